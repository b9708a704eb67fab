package export

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
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
)

// exporterKey names one (inventory, sink) pair.
type exporterKey struct {
	inv       plumbing.InventoryKey
	family    v1alpha1.SinkFamily
	namespace string // of the sink
	name      string
}

func (k exporterKey) String() string {
	return fmt.Sprintf("%s -> %s/%s/%s", k.inv, k.family, k.namespace, k.name)
}

// parent is what an exporter needs from the controller that started it,
// and all it may reach: its configuration for a run, a connected sink,
// its own status entry, Warning Events and the settings of this
// leadership term.
type parent interface {
	resolve(ctx context.Context, k exporterKey) (*resolved, error)
	connect(ctx context.Context, obj *sinkObject) (*sinkClient, error)
	// writeEntry stores the exporter's status entry and, when warning is
	// set and the entry stored, emits a Warning Event with the entry's
	// reason that says warning about the sink.
	writeEntry(ctx context.Context, k exporterKey, uid string, entry *v1alpha1.SinkExportStatus, warning string) error
	settings() settings
}

// settings are the exporters' fixed parameters.
type settings struct {
	// epoch is this leadership term's (the Lease's acquire time, µs).
	epoch int64
	// watchdog is how often an idle exporter with interval 0s writes status.
	watchdog time.Duration
	// clientMaxAge is how long a sink client built from a Secret is used
	// before it is built again (Secret rotation).
	clientMaxAge time.Duration
}

// exporter follows one inventory's item set and delivers it to one sink. Its
// goroutine is the only one that talks to the sink and reports the sink's
// status entry (entryWrites writes it, with the entries reported beside
// it); a failing sink therefore delays nobody else. What the sink
// is owed lives in the subscription, which nothing but a delivery the sink
// acknowledged empties: not a client rebuild, an error, a revoked grant.
type exporter struct {
	parent parent
	key    exporterKey
	sub    *subscription

	cancel context.CancelFunc
	done   chan struct{}

	// What follows belongs to the exporter's goroutine.
	seeded bool
	// known: the sink acknowledged a delivery from this exporter, so it
	// holds what the subscription says. Until then a database sink is
	// diffed and an event sink resynced.
	known bool
	// sinkSpec identifies the sink spec (UID and generation) the exporter
	// delivered to: another spec may be another destination.
	sinkSpec string
	// respec: the sink's spec or Secret changed since the last delivery.
	respec bool
	// secretVersion is the resourceVersion of the Secret the client was
	// built from: a changed Secret may name another destination too.
	secretVersion  string
	cursor         string
	lastChecksum   string
	lastGeneration int64
	lastExport     time.Time
	lastReport     time.Time
	// spread, in [0, 1), is this exporter's share of a period by which
	// it delays the first re-export (or watchdog refresh) after an export
	// of changes: exporters created or changed together would otherwise
	// write together once every period from then on.
	spread float64
	// spreadNext: the next re-export or refresh is the first since such
	// an export, and waits for its share.
	spreadNext bool
	failures   int
	// warnPending: the streak's Warning Event is still to be emitted (its
	// entry's write failed).
	warnPending bool
	notBefore   time.Time
	client      *sinkClient
}

func newExporter(p parent, key exporterKey, set *itemSet) *exporter {
	return &exporter{parent: p, key: key, sub: set.subscribe(), done: make(chan struct{}), spread: spreadOf(key), spreadNext: true}
}

// spreadOf places an exporter within a period, from its key: stable across
// restarts and replicas, and uniform over the exporters of a fleet.
func spreadOf(key exporterKey) float64 {
	// A well-mixed hash: keys that differ only in their last bytes (one
	// inventory's sinks sink-00 … sink-99) must land apart; FNV alone kept
	// them within microseconds of each other.
	sum := sha256.Sum256([]byte(key.String()))
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// delay is how much later than period after the last export (or report)
// the next unchanged re-export (or watchdog refresh) comes: the
// exporter's share of the period, at most one watchdog period, once after
// each export of changes; nothing otherwise, so that at rest the period is
// exact.
func (e *exporter) delay(period, watchdog time.Duration) time.Duration {
	if !e.spreadNext || period <= 0 {
		return 0
	}
	return time.Duration(e.spread * float64(min(period, watchdog)))
}

// reexportAfter is how long after the last export an unchanged payload is
// re-exported: the interval, plus the share when it is still to come.
func (e *exporter) reexportAfter(interval, watchdog time.Duration) time.Duration {
	return interval + e.delay(interval, watchdog)
}

func (e *exporter) poke() { e.sub.poke() }

func (e *exporter) start(ctx context.Context) {
	ctx, e.cancel = context.WithCancel(ctx)
	go e.loop(ctx)
}

// stop ends the goroutine and waits for it.
func (e *exporter) stop() {
	e.cancel()
	<-e.done
	e.sub.close()
	e.closeClient()
	metrics.BreakerOpen.DeleteLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name)
}

func (e *exporter) closeClient() {
	if e.client != nil {
		_ = e.client.Close()
		e.client = nil
	}
}

func (e *exporter) loop(ctx context.Context) {
	defer close(e.done)
	logger := klog.FromContext(ctx).WithValues("exporter", e.key.String())
	ctx = klog.NewContext(ctx, logger)
	timer := time.NewTimer(0)
	defer timer.Stop()
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.sub.wake:
			if time.Now().Before(e.notBefore) {
				continue // backing off: the timer fires at notBefore
			}
			if first {
				// The first run is due at once (the timer says so too):
				// no burst to wait for.
				break
			}
			select { // coalesce a burst of changes
			case <-ctx.Done():
				return
			case <-time.After(batchWindow):
			}
		case <-timer.C:
		}
		next := e.runOnce(ctx)
		first = false
		if ctx.Err() != nil {
			return
		}
		timer.Reset(max(time.Until(next), 10*time.Millisecond))
	}
}

// runOnce does one export decision and returns when to run next at the latest.
func (e *exporter) runOnce(ctx context.Context) time.Time {
	set := e.parent.settings()
	now := time.Now()
	watchdog := now.Add(set.watchdog)
	cfg, err := e.parent.resolve(ctx, e.key)
	if err != nil {
		var rf *resolveFailure
		if errors.As(err, &rf) {
			// A broken reference exports nothing until it resolves again,
			// and keeps no connection: a client built from a Secret the
			// sink's requester may no longer read must not be used again.
			// What the sink is owed stays owed.
			e.closeClient()
			if !cfg.entrySays(v1alpha1.OutcomeFailed, rf.reason, rf.message) {
				// A transition: say it once, in an Event and the entry.
				e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeFailed, reason: rf.reason, message: rf.message,
					warning: rf.message})
			}
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
		e.seed(cfg, set.watchdog)
	}
	if spec := fingerprintOf(cfg.sink); spec != e.sinkSpec {
		// A new sink spec may name another destination: find out what
		// it holds (diff or resync) before sending deltas, and write a
		// snapshot there even when nothing changed.
		e.respec = e.sinkSpec != ""
		e.sinkSpec, e.known = spec, false
	}
	if err := e.ensureClient(ctx, cfg, set); err != nil {
		return e.failed(ctx, cfg, nil, "SinkUnavailable", err)
	}

	sum := e.sub.peek()
	if sum.restate {
		// The selection changed: restate the whole set (take hands the
		// flag over with the batch; a failure gives it back).
		e.known = false
	}
	changed := sum.owed > 0 || sum.checksum != e.lastChecksum
	bumped := cfg.generation != e.lastGeneration
	act, due := decide(now, e.lastExport, e.reexportAfter(cfg.interval, set.watchdog), changed, bumped)
	if act == actDebounce && ((!e.known && e.key.family != v1alpha1.SinkFamilySnapshot) || e.respec) {
		// First run of a row or event sink since this exporter started,
		// or a sink whose spec (or Secret) changed: bring it up to date
		// before anything else.
		act = actDelta
	}

	if act == actDebounce {
		metrics.ExportDebounced.Inc()
		metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultDebounced).Inc()
		// At rest only the watchdog writes status, and only when nothing
		// is ever due (interval 0s): a due re-export writes its own. A
		// new effective interval (a Scope's floor, a sink's default) is a
		// transition the entry must show at once.
		moved := cfg.entry == nil || cfg.entry.EffectiveInterval == nil || cfg.entry.EffectiveInterval.Duration != cfg.interval ||
			// Another writer's entry (a former leader's last word): the
			// sink is fine and holds what this exporter delivered.
			(e.known && cfg.entry.Outcome == v1alpha1.OutcomeFailed && e.failures == 0) || cfg.entry.LastChecksum != e.lastChecksum
		// With 0s the watchdog refreshes the entry once per period, and
		// wakes for it. Up to a second early is on time: the watchdog's
		// own wake-up comes a run's length before the refresh (the report
		// ends after the run starts), and a refresh due within a second
		// rides on it rather than waking again.
		var refresh time.Time
		refreshDue := false
		if cfg.interval <= 0 {
			refresh = e.lastReport.Add(set.watchdog + e.delay(set.watchdog, set.watchdog))
			refreshDue = !now.Before(refresh.Add(-min(set.watchdog/10, time.Second)))
		}
		if moved || refreshDue {
			e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeDebounced, checksum: e.lastChecksum, count: sum.count, due: due,
				message: debounceMessage(cfg.interval)})
			e.spreadNext = e.spreadNext && !refreshDue
			return earliest(due, watchdog)
		}
		return earliest(due, earliest(refresh, watchdog))
	}

	full := act == actFull
	b := e.sub.take(e.client.needsLiveSet(e.known, full))
	runCtx, cancel := context.WithTimeout(ctx, exportTimeout)
	defer cancel()
	if e.failures >= breakerThreshold {
		// An open breaker tries the sink once per backoff step.
		runCtx = sink.SingleAttempt(runCtx)
	}
	start := time.Now()
	wrote, err := e.client.deliver(runCtx, &delivery{inv: cfg.inventory, b: b, known: e.known, full: full,
		generation: cfg.generation, epoch: set.epoch, acked: e.cursor})
	if err != nil {
		return e.failed(ctx, cfg, b, "ExportFailed", err)
	}
	metrics.ExportDuration.WithLabelValues(cfg.sinkType).Observe(time.Since(start).Seconds())
	metrics.ExportBytes.WithLabelValues(cfg.sinkType).Add(float64(batchBytes(b)))
	metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultExported).Inc()
	if e.failures >= breakerThreshold {
		klog.FromContext(ctx).Info("Sink recovered; closing its breaker", "failures", e.failures)
	}
	e.failures, e.notBefore, e.warnPending = 0, time.Time{}, false
	metrics.BreakerOpen.WithLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name).Set(0)
	// The sink acknowledged the batch: what it describes is now true of it.
	e.known, e.respec, e.cursor, e.lastChecksum, e.lastGeneration = true, false, b.cursor, b.checksum, cfg.generation
	exportedAt := now
	if act == actDelta && !wrote && !changed {
		// Nothing needed writing: the last export still stands, and so
		// does its due time.
		exportedAt = e.lastExport
	}
	if exportedAt.IsZero() {
		exportedAt = now
	}
	e.lastExport = exportedAt
	// An unchanged re-export keeps its place in the period; an export of
	// changes may have come at the same moment as many others.
	e.spreadNext = act != actFull || changed || bumped
	_, due = decide(now, e.lastExport, e.reexportAfter(cfg.interval, set.watchdog), false, false)
	e.report(ctx, cfg, entryUpdate{outcome: v1alpha1.OutcomeExported, checksum: b.checksum, count: b.count, due: due,
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
// so that a restart neither re-exports an unchanged snapshot early nor
// forgets a pending generation. What a row or event sink holds is not
// taken from status: the exporter finds out (diff or resync).
func (e *exporter) seed(cfg *resolved, watchdog time.Duration) {
	e.seeded = true
	en := cfg.entry
	if en == nil {
		return
	}
	e.lastGeneration = en.ObservedGeneration
	e.lastChecksum = en.LastChecksum
	e.cursor = en.Cursor
	if en.LastExportTime != nil {
		e.lastExport = en.LastExportTime.Time
	}
	if en.LastAttemptTime != nil {
		// The watchdog refresh keeps its place in the period too.
		e.lastReport = en.LastAttemptTime.Time
	}
	e.failures = int(en.ConsecutiveFailures)
	// Whether the share is still to come, as the entry shows it (its
	// times are whole seconds): a restart or a new leader keeps the
	// exporter's place instead of adding the share again.
	switch {
	case en.LastExportTime == nil:
	case cfg.interval > 0 && en.NextDueTime != nil:
		e.spreadNext = en.NextDueTime.Sub(en.LastExportTime.Add(cfg.interval)) >= time.Second
	case cfg.interval <= 0 && en.LastAttemptTime != nil:
		// The last report was the export itself, not a refresh.
		e.spreadNext = en.LastAttemptTime.Sub(en.LastExportTime.Time) < watchdog/2
	}
}

// failed records a failed run: the batch is owed again, the next attempt
// waits for an exponential backoff, and the first failure of a streak
// emits a Warning Event.
func (e *exporter) failed(ctx context.Context, cfg *resolved, b *batch, reason string, err error) time.Time {
	if b != nil {
		e.sub.giveBack(b)
		// A failed delivery may have partly landed (a transaction whose
		// commit was not acknowledged, events stored or processed before
		// an error or a lost answer): the sink may hold items the
		// subscription does not record. The next run diffs or resyncs.
		e.known = false
	}
	if errors.Is(err, sink.ErrPermanent) {
		// A configuration or credential problem: build the client again
		// (re-reading the Secret) on the next attempt.
		e.closeClient()
	}
	if ctx.Err() != nil {
		// Stopped (the inventory suspended, changed or gone): the sink did
		// not fail, and a resumed exporter must not count this run.
		return time.Now()
	}
	if errors.Is(err, sink.ErrFenced) {
		// A newer leader wrote to the sink: this replica no longer leads
		// and its term ends shortly. It writes no status either: the
		// entry is the new leader's to write.
		klog.FromContext(ctx).Info("A newer leader wrote to the sink; not exporting or reporting", "err", e.client.scrub(err.Error()))
		e.notBefore = time.Now().Add(backoffMax)
		return e.notBefore
	}
	e.failures++
	backoff := min(backoffMax, backoffMin<<min(e.failures-1, 16))
	backoff = backoff/2 + rand.N(backoff/2+1) // jitter keeps failing sinks apart
	e.notBefore = time.Now().Add(backoff)
	metrics.SinkExports.WithLabelValues(string(e.key.family), cfg.sinkType, metrics.ResultFailed).Inc()
	if e.failures >= breakerThreshold {
		metrics.BreakerOpen.WithLabelValues(string(e.key.family), e.key.namespace+"/"+e.key.name).Set(1)
	}
	msg := e.client.scrub(err.Error())
	if c := sink.Classify(err); c.Outcome == sink.OutcomeAddressForbidden {
		// What a probe shows too: the host as the sink names it, not the
		// address the server's DNS gave for it.
		msg = c.Refusal.Summary()
	}
	klog.FromContext(ctx).Info("Export failed", "failures", e.failures, "retryIn", backoff.Round(time.Millisecond), "err", msg)
	u := entryUpdate{outcome: v1alpha1.OutcomeFailed, reason: reason, message: msg, checksum: e.lastChecksum}
	e.warnPending = e.warnPending || e.failures == 1
	if e.warnPending {
		// The first failure of a streak, or a later one while its Event
		// (which goes out with a stored entry) is owed.
		u.warning = "export failed: " + msg
	}
	if e.report(ctx, cfg, u) && u.warning != "" {
		e.warnPending = false
	}
	return e.notBefore
}

func batchBytes(b *batch) int {
	n := 0
	add := func(it *sink.Item) {
		n += len(it.Attributes) + len(it.Object) + len(it.Name) + len(it.Hash) + 64
	}
	for _, c := range b.changes {
		add(c.Item)
	}
	for _, it := range b.items {
		add(it)
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
	// warning, when set, is what a Warning Event says about the sink.
	warning string
}

// report writes the exporter's own status entry, in process, and says
// whether it was stored: entries of other sinks are not touched, and the
// server derives the aggregate in the same write.
func (e *exporter) report(ctx context.Context, cfg *resolved, u entryUpdate) (stored bool) {
	if cfg == nil {
		return false
	}
	now := metav1.Now()
	entry := &v1alpha1.SinkExportStatus{Family: e.key.family, Namespace: e.key.namespace, Name: e.key.name,
		ObservedGeneration: cfg.generation, Outcome: u.outcome, LastAttemptTime: &now,
		// Only what the sink acknowledged.
		Cursor:              e.cursor,
		ConsecutiveFailures: int32(min(e.failures, 1<<30)),
		Reason:              u.reason, Message: entryMessage(u.message),
		LastChecksum: u.checksum,
	}
	if u.outcome != v1alpha1.OutcomeFailed {
		entry.ItemCount = int64(u.count)
	}
	if !e.lastExport.IsZero() {
		entry.LastExportTime = &metav1.Time{Time: e.lastExport}
	}
	if cfg.sinkFound {
		entry.EffectiveInterval = &metav1.Duration{Duration: cfg.interval}
	}
	if !u.due.IsZero() {
		entry.NextDueTime = &metav1.Time{Time: u.due}
	}
	if err := e.parent.writeEntry(ctx, e.key, cfg.inventory.UID, entry, u.warning); err != nil {
		switch {
		case ctx.Err() != nil:
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// The inventory went, or was replaced: the controller stops us.
			klog.FromContext(ctx).V(2).Info("Writing the status entry failed", "err", err)
		default:
			klog.FromContext(ctx).Error(err, "Writing the status entry failed")
		}
		return false
	}
	e.lastReport = time.Now()
	return true
}

// entryMessage is a message as a status entry holds it: valid UTF-8
// checked after the cut, as entries written before were, so that
// entrySays finds them unchanged.
func entryMessage(msg string) string { return strings.ToValidUTF8(plumbing.Truncate(msg, 1024), "") }
