package export

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/metrics"
)

const (
	// batchWindow coalesces a burst of item changes into one export.
	batchWindow = 250 * time.Millisecond
	// exportTimeout bounds one run against a sink.
	exportTimeout = 5 * time.Minute
	// backoffMin and backoffMax bound the retry delay of a failing sink.
	backoffMin, backoffMax = time.Second, 5 * time.Minute
	// breakerThreshold consecutive failures open a sink's breaker: it is
	// then tried only once per backoff period (half-open), whatever changes.
	breakerThreshold = 3
	// applyBatch is the most changes one database transaction carries.
	applyBatch = 1000
	// secretMaxAge is how long a sink client built from a Secret is used
	// before the Secret is read again (rotation).
	secretMaxAge = 5 * time.Minute
)

// exporterKey names one (inventory, sink) pair.
type exporterKey struct {
	inv       invKey
	family    v1alpha1.SinkFamily
	namespace string // of the sink
	name      string
}

func (k exporterKey) String() string {
	return fmt.Sprintf("%s -> %s/%s/%s", k.inv, k.family, k.namespace, k.name)
}

// exporter follows one inventory's view and delivers it to one sink. Its
// goroutine is the only one that talks to the sink or writes the sink's
// status entry; a failing sink therefore delays nobody else.
type exporter struct {
	c    *Controller
	key  exporterKey
	view *view
	// dirty holds the keys changed since the last run; guarded by view.mu.
	dirty map[string]*sink.Item
	wake  chan struct{}

	cancel context.CancelFunc
	done   chan struct{}

	// What follows belongs to the exporter's goroutine.
	seeded         bool
	lastChecksum   string
	lastGeneration int64
	lastExport     time.Time
	failures       int
	notBefore      time.Time
	// held is what a database or event sink holds: item UID → item (for
	// database sinks read back from the table, so only UID and Hash are set).
	// nil until known.
	held   map[string]*sink.Item
	client *sinkClient
}

func newExporter(c *Controller, key exporterKey, v *view) *exporter {
	return &exporter{
		c:     c,
		key:   key,
		view:  v,
		dirty: map[string]*sink.Item{},
		wake:  make(chan struct{}, 1),
		done:  make(chan struct{}),
	}
}

// markDirtyLocked records a changed key (view.mu held). The first "before"
// of a key since the last run is kept: it is what the sink may hold.
func (e *exporter) markDirtyLocked(key string, before *sink.Item) {
	if _, ok := e.dirty[key]; !ok {
		e.dirty[key] = before
	}
	e.poke()
}

// poke asks for a run; it never blocks.
func (e *exporter) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *exporter) start(ctx context.Context) {
	ctx, e.cancel = context.WithCancel(ctx)
	e.view.subscribe(e)
	go e.loop(ctx)
}

// stop ends the goroutine and waits for it.
func (e *exporter) stop() {
	e.cancel()
	<-e.done
	e.view.unsubscribe(e)
	if e.client != nil {
		_ = e.client.Close()
		e.client = nil
	}
	metrics.BreakerOpen.DeleteLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name)
}

func (e *exporter) loop(ctx context.Context) {
	defer close(e.done)
	logger := klog.FromContext(ctx).WithValues("exporter", e.key.String())
	ctx = klog.NewContext(ctx, logger)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
			if time.Now().Before(e.notBefore) {
				continue // backing off: the timer fires at notBefore
			}
			select { // coalesce a burst of changes
			case <-ctx.Done():
				return
			case <-time.After(batchWindow):
			}
		case <-timer.C:
		}
		next := e.runOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		timer.Reset(max(time.Until(next), 10*time.Millisecond))
	}
}

// runOnce does one export decision and returns when to run next at the latest.
func (e *exporter) runOnce(ctx context.Context) time.Time {
	now := time.Now()
	watchdog := now.Add(e.c.watchdog)
	cfg, err := e.c.resolve(ctx, e.key)
	if err != nil {
		var rf *resolveFailure
		if errors.As(err, &rf) {
			// A broken reference exports nothing until it resolves again,
			// and keeps no connection: a client built from a Secret the
			// sink's requester may no longer read must not be used again.
			if e.client != nil {
				_ = e.client.Close()
				e.client, e.held = nil, nil
			}
			// The first run that finds it broken says so in an Event.
			if cfg.entry == nil || cfg.entry.Reason != rf.reason {
				e.c.warn(e.key.inv, rf.reason, fmt.Sprintf("%s %s/%s: %s", e.key.family, e.key.namespace, e.key.name, rf.message))
			}
			e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeFailed, reason: rf.reason, message: rf.message})
			return watchdog
		}
		if ctx.Err() == nil {
			// The inventory or the reference is gone (the controller stops
			// us), or the authorizer could not answer: try again later.
			klog.FromContext(ctx).V(2).Info("Cannot resolve the sink reference", "err", err)
		}
		return watchdog
	}
	if !e.seeded {
		e.seed(cfg)
	}

	if err := e.ensureClient(ctx, cfg); err != nil {
		return e.failed(ctx, cfg, nil, "SinkUnavailable", err)
	}

	st := e.view.take(e)
	changed := st.checksum != e.lastChecksum
	bumped := cfg.generation != e.lastGeneration
	act, due := decide(now, e.lastExport, cfg.interval, changed, bumped)
	if e.key.family != v1alpha1.SinkFamilySnapshot && e.held == nil {
		// First run of a row or event sink since this replica started:
		// find out what the sink holds before deciding what to send.
		if act == actDebounce {
			act = actDelta
		}
	}

	if act == actDebounce {
		metrics.ExportDebounced.Inc()
		metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultDebounced).Inc()
		e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeDebounced, checksum: e.lastChecksum, count: st.count, due: due,
			message: debounceMessage(cfg.interval)})
		return earliest(due, watchdog)
	}

	runCtx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	start := time.Now()
	wrote, bytes, err := e.export(runCtx, cfg, act, st)
	if err != nil {
		return e.failed(ctx, cfg, st.changed, "ExportFailed", err)
	}
	metrics.ExportDuration.WithLabelValues(cfg.sinkType).Observe(time.Since(start).Seconds())
	metrics.ExportBytes.WithLabelValues(cfg.sinkType).Add(float64(bytes))
	metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultExported).Inc()
	if e.failures >= breakerThreshold {
		klog.FromContext(ctx).Info("Sink recovered; closing its breaker", "failures", e.failures)
	}
	e.failures, e.notBefore = 0, time.Time{}
	metrics.BreakerOpen.WithLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name).Set(0)
	e.lastChecksum, e.lastGeneration = st.checksum, cfg.generation
	exportedAt := now
	if act == actDelta && !wrote && !changed {
		// Nothing needed writing (changes that cancelled out): the last
		// export still stands, and so does its due time.
		exportedAt = e.lastExport
	}
	if exportedAt.IsZero() {
		exportedAt = now
	}
	e.lastExport = exportedAt
	_, due = decide(now, e.lastExport, cfg.interval, false, false)
	e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeExported, checksum: st.checksum, count: st.count, due: due,
		exportedAt: exportedAt, message: exportMessage(act, wrote)})
	return earliest(due, watchdog)
}

func exportMessage(act action, wrote bool) string {
	switch {
	case act == actFull && wrote:
		return "full export written"
	case act == actFull:
		return "full export: the sink already held the payload"
	case wrote:
		return "changes exported"
	default:
		return "the sink holds the current payload"
	}
}

func debounceMessage(interval time.Duration) string {
	if interval <= 0 {
		return "the sink holds the current payload; interval 0s: only changes are exported"
	}
	return fmt.Sprintf("the sink holds the current payload; the next unchanged re-export is due after %s", interval)
}

func earliest(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) {
		return b
	}
	return a
}

// seed restores the debounce state from the exporter's own status entry,
// so that a restart neither re-exports an unchanged payload early nor
// forgets a pending generation.
func (e *exporter) seed(cfg *resolved) {
	e.seeded = true
	if cfg.entry == nil {
		return
	}
	e.lastGeneration = cfg.entry.ObservedGeneration
	if cfg.entry.Outcome != v1alpha1.OutcomeFailed || cfg.entry.LastChecksum != "" {
		e.lastChecksum = cfg.entry.LastChecksum
	}
	if cfg.entry.LastExportTime != nil {
		e.lastExport = cfg.entry.LastExportTime.Time
	}
	e.failures = int(cfg.entry.ConsecutiveFailures)
}

// failed records a failed run: the changes go back to the dirty set, the
// next attempt waits for an exponential backoff, and the first failure of
// a streak emits a Warning Event.
func (e *exporter) failed(ctx context.Context, cfg *resolved, changed map[string]*sink.Item, reason string, err error) time.Time {
	if changed != nil {
		e.view.giveBack(e, changed)
	}
	if errors.Is(err, sink.ErrPermanent) && e.client != nil {
		// A configuration or credential problem: build the client again
		// (re-reading the Secret) on the next attempt.
		_ = e.client.Close()
		e.client = nil
	}
	e.failures++
	backoff := min(backoffMax, backoffMin<<min(e.failures-1, 16))
	backoff = backoff/2 + rand.N(backoff/2+1) // jitter keeps failing sinks apart
	e.notBefore = time.Now().Add(backoff)
	metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultFailed).Inc()
	if e.failures >= breakerThreshold {
		metrics.BreakerOpen.WithLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name).Set(1)
	}
	msg := e.scrub(err.Error())
	if c := sink.Classify(err); c.Outcome == sink.OutcomeAddressForbidden {
		// What a probe shows too: the host as the sink names it, not the
		// address the server's DNS gave for it.
		msg = c.Refusal.Summary()
	}
	klog.FromContext(ctx).Info("Export failed", "failures", e.failures, "retryIn", backoff.Round(time.Millisecond), "err", msg)
	if e.failures == 1 {
		e.c.warn(e.key.inv, reason, fmt.Sprintf("export to %s %s/%s failed: %s", e.key.family, e.key.namespace, e.key.name, msg))
	}
	e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeFailed, reason: reason, message: msg, checksum: e.lastChecksum})
	return e.notBefore
}

// export writes to the sink. It returns whether the destination changed
// and how many payload bytes were handed over.
func (e *exporter) export(ctx context.Context, cfg *resolved, act action, st state) (bool, int, error) {
	inv := cfg.inventory
	switch e.key.family {
	case v1alpha1.SinkFamilySnapshot:
		items, sum := e.view.sorted()
		env := &sink.Envelope{
			SchemaVersion: sink.SchemaVersion,
			Checksum:      sum,
			Generation:    cfg.generation,
			ItemCount:     len(items),
			ExportedAt:    time.Now().UTC().Truncate(time.Second),
			Cluster:       e.c.cfg.ClusterName,
			Inventory:     inv,
			Items:         items,
		}
		wrote, err := e.client.snapshot.Write(ctx, inv, env)
		return wrote, approxBytes(items), err

	case v1alpha1.SinkFamilyDatabase:
		if e.held == nil || act == actFull {
			held, _, err := e.client.database.State(ctx, inv)
			if err != nil {
				return false, 0, err
			}
			e.held = make(map[string]*sink.Item, len(held))
			for uid, hash := range held {
				e.held[uid] = &sink.Item{UID: uid, Hash: hash}
			}
			// Any row may have been edited by hand: a full sync rewrites
			// them all (the sink skips rows that are identical).
			return e.applyAll(ctx, cfg, e.fullChanges(act == actFull))
		}
		return e.applyAll(ctx, cfg, e.deltaChanges(st.changed))

	default: // Event
		var changes []sink.Change
		switch {
		case e.held == nil:
			e.held = e.assumeHeld(cfg)
			changes = e.fullChanges(act == actFull)
		case act == actFull:
			changes = e.fullChanges(true)
		default:
			changes = e.deltaChanges(st.changed)
		}
		if len(changes) == 0 {
			return false, 0, nil
		}
		for i := 0; i < len(changes); i += applyBatch {
			part := changes[i:min(i+applyBatch, len(changes))]
			if err := e.client.event.Publish(ctx, inv, part); err != nil {
				return false, 0, err
			}
			e.commitHeld(part)
		}
		return true, changesBytes(changes), nil
	}
}

// assumeHeld is what an event sink holds when this replica starts
// exporting to it: the view as of the last reported export when the
// checksum matches; otherwise the items whose resourceVersion is not newer
// than the reported cursor, so that newer ones are published again (their
// idempotency keys make repeats harmless).
func (e *exporter) assumeHeld(cfg *resolved) map[string]*sink.Item {
	items, sum := e.view.sorted()
	held := make(map[string]*sink.Item, len(items))
	var cursor uint64
	if cfg.entry != nil {
		_, _ = fmt.Sscan(cfg.entry.Cursor, &cursor)
	}
	for _, it := range items {
		var rv uint64
		_, _ = fmt.Sscan(it.ResourceVersion, &rv)
		if sum == e.lastChecksum || (cursor > 0 && rv <= cursor) {
			held[it.UID] = it
		}
	}
	return held
}

// deltaChanges turns the changed keys into the changes the sink lacks,
// comparing with what it holds.
func (e *exporter) deltaChanges(changed map[string]*sink.Item) []sink.Change {
	var out []sink.Change
	for key, before := range changed {
		cur := e.view.get(key)
		if before != nil && (cur == nil || cur.UID != before.UID) {
			if _, ok := e.held[before.UID]; ok {
				out = append(out, sink.Change{Op: sink.Delete, Item: before})
			}
		}
		if cur != nil {
			if h, ok := e.held[cur.UID]; !ok || h.Hash != cur.Hash {
				out = append(out, sink.Change{Op: sink.Upsert, Item: cur})
			}
		}
	}
	return out
}

// fullChanges compares the whole view with what the sink holds: upserts
// for what it lacks (every item when all is set) and deletes for what it
// holds beyond the view.
func (e *exporter) fullChanges(all bool) []sink.Change {
	items, _ := e.view.sorted()
	seen := make(map[string]struct{}, len(items))
	var out []sink.Change
	for _, it := range items {
		seen[it.UID] = struct{}{}
		if h, ok := e.held[it.UID]; all || !ok || h.Hash != it.Hash {
			out = append(out, sink.Change{Op: sink.Upsert, Item: it})
		}
	}
	for uid, it := range e.held {
		if _, ok := seen[uid]; !ok {
			out = append(out, sink.Change{Op: sink.Delete, Item: it})
		}
	}
	return out
}

// applyAll applies changes to a database sink in transactions of at most
// applyBatch changes; each stores the cursor, and what committed is
// recorded as held, so a failure part-way resumes where it stopped.
func (e *exporter) applyAll(ctx context.Context, cfg *resolved, changes []sink.Change) (bool, int, error) {
	if len(changes) == 0 {
		return false, 0, nil
	}
	for i := 0; i < len(changes); i += applyBatch {
		part := changes[i:min(i+applyBatch, len(changes))]
		if err := e.client.database.Apply(ctx, cfg.inventory, part, e.c.itemsCursor(e.key.inv)); err != nil {
			return i > 0, 0, err
		}
		e.commitHeld(part)
	}
	return true, changesBytes(changes), nil
}

func (e *exporter) commitHeld(changes []sink.Change) {
	for _, c := range changes {
		if c.Op == sink.Delete {
			delete(e.held, c.Item.UID)
		} else {
			e.held[c.Item.UID] = c.Item
		}
	}
}

func approxBytes(items []*sink.Item) int {
	n := 0
	for _, it := range items {
		n += len(it.Attributes) + len(it.Object) + len(it.Name) + len(it.Hash) + 64
	}
	return n
}

func changesBytes(changes []sink.Change) int {
	n := 0
	for _, c := range changes {
		n += len(c.Item.Attributes) + len(c.Item.Object) + len(c.Item.Name) + len(c.Item.Hash) + 64
	}
	return n
}

// entryUpdate is what a run reports in the exporter's status entry.
type entryUpdate struct {
	outcome    v1alpha1.ExportOutcome
	reason     string
	message    string
	checksum   string
	count      int
	due        time.Time
	exportedAt time.Time
}

// report writes the exporter's own status entry with server-side apply,
// as its own field manager: entries of other sinks are not touched, and
// the server derives the aggregate in the same write.
func (e *exporter) report(ctx context.Context, cfg *resolved, u entryUpdate) {
	if cfg == nil {
		return
	}
	now := metav1.Now()
	entry := statusEntry(e.key)
	entry.WithObservedGeneration(cfg.generation).
		WithOutcome(u.outcome).
		WithLastAttemptTime(now).
		WithConsecutiveFailures(int32(min(e.failures, 1<<30))).
		WithCursor(e.c.itemsCursor(e.key.inv))
	if u.outcome != v1alpha1.OutcomeFailed {
		entry.WithItemCount(int64(u.count))
	}
	if u.reason != "" {
		entry.WithReason(u.reason)
	}
	if u.message != "" {
		entry.WithMessage(strings.ToValidUTF8(truncate(u.message, 1024), ""))
	}
	if u.checksum != "" {
		entry.WithLastChecksum(u.checksum)
	}
	if !e.lastExport.IsZero() {
		entry.WithLastExportTime(metav1.NewTime(e.lastExport))
	}
	if cfg.sinkFound {
		entry.WithEffectiveInterval(metav1.Duration{Duration: cfg.interval})
	}
	if !u.due.IsZero() {
		entry.WithNextDueTime(metav1.NewTime(u.due))
	}
	if err := e.c.applyEntry(ctx, e.key, entry); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Writing the status entry failed", "err", err)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
