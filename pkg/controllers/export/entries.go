package export

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// entryWrites coalesces the status entries that the exporters of one
// inventory report while a write of that inventory is in flight into the
// next write: one storage update for all of them. A new inventory's
// exporters report their first outcome at the same moment; written apart,
// each entry is an etcd transaction with its fsync, and each after the
// first conflicts with the one before and is read and tried again. It is
// group commit: the first entry of a batch writes it, once the write
// before it ended; entries that come meanwhile join it.
type entryWrites struct {
	// write stores a batch of one inventory's entries and emits their
	// warnings; it returns each entry's outcome.
	write func(ctx context.Context, t entryTarget, b *entryBatch) []error
	// linger is how long a batch with no write before it waits for more
	// entries (PostgreSQL's commit_delay).
	linger time.Duration

	mu sync.Mutex
	// open is the batch of a target that still takes entries: its writer
	// waits for the target's write in flight.
	open map[entryTarget]*entryBatch
	// inFlight is the batch of a target being written.
	inFlight map[entryTarget]*entryBatch
}

// entryTarget is the inventory an entry is for: the same name with
// another UID is another object, written apart.
type entryTarget struct {
	inv invKey
	uid string
}

// entryBatch is the entries of one write in the order they came, with
// the Warning Events they asked for. Only put and withdraw change it,
// while it is open; its flush reads it once it is not. An exporter
// restarted meanwhile may have two entries in it: the later one is
// written over the earlier, as two writes would.
type entryBatch struct {
	entries []*v1alpha1.SinkExportStatus
	// warnings holds, per entry, the note of its Warning Event ("" none).
	warnings []string
	done     chan struct{}
	// errs holds, once done is closed, each entry's outcome.
	errs map[*v1alpha1.SinkExportStatus]error
}

func newEntryWrites(linger time.Duration, write func(ctx context.Context, t entryTarget, b *entryBatch) []error) *entryWrites {
	return &entryWrites{write: write, linger: linger, open: map[entryTarget]*entryBatch{}, inFlight: map[entryTarget]*entryBatch{}}
}

// put stores an exporter's entry, with the note of a Warning Event about
// it when warning is set, and returns the outcome of the entry's write.
// The batch is written under base, not ctx: other exporters' entries may
// ride on it. A stopped exporter (ctx done) writes nothing: its entry is
// withdrawn while its batch waits, and one already being written may
// still land, as a request in flight may.
func (w *entryWrites) put(ctx, base context.Context, k exporterKey, uid string, entry *v1alpha1.SinkExportStatus, warning string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t := entryTarget{inv: k.inv, uid: uid}
	w.mu.Lock()
	b := w.open[t]
	if b == nil {
		b = &entryBatch{done: make(chan struct{})}
		w.open[t] = b
		go w.flush(base, t, b, w.inFlight[t])
	}
	b.add(entry, warning)
	w.mu.Unlock()
	select {
	case <-b.done:
		return b.errs[entry]
	case <-ctx.Done():
		w.mu.Lock()
		if w.open[t] == b {
			b.withdraw(entry)
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// flush writes a batch once the write before it ended (or, with none,
// after the linger): until then it takes entries.
func (w *entryWrites) flush(base context.Context, t entryTarget, b, prev *entryBatch) {
	if prev != nil {
		<-prev.done // a write's own time: the storage bounds it
	} else {
		// Exporters started together (a new inventory's) report within
		// moments of each other: a short wait lets them share this write
		// rather than make the next one.
		time.Sleep(w.linger)
	}
	w.mu.Lock()
	delete(w.open, t)
	w.inFlight[t] = b
	w.mu.Unlock()

	b.errs = make(map[*v1alpha1.SinkExportStatus]error, len(b.entries))
	if len(b.entries) > 0 {
		for i, err := range w.write(base, t, b) {
			b.errs[b.entries[i]] = err
		}
	}

	w.mu.Lock()
	delete(w.inFlight, t) // the next batch's flush waits for done
	w.mu.Unlock()
	close(b.done)
}

// add appends an entry to the batch.
func (b *entryBatch) add(entry *v1alpha1.SinkExportStatus, warning string) {
	b.entries = append(b.entries, entry)
	b.warnings = append(b.warnings, warning)
}

// withdraw takes an entry out of the batch.
func (b *entryBatch) withdraw(entry *v1alpha1.SinkExportStatus) {
	i := slices.Index(b.entries, entry)
	if i < 0 {
		return
	}
	b.entries = slices.Delete(b.entries, i, i+1)
	b.warnings = slices.Delete(b.warnings, i, i+1)
}

// warningsByReason joins the batch's Warning Event notes per entry reason,
// in the order of the entries: one Event per reason says what every sink
// of the write says. The recorder makes Events about one object (at one
// resourceVersion) with one reason a series that keeps the first note:
// recorded apart, the other sinks' notes would be lost. Each note gets an
// equal share of maxNote, so that a long one hides no other sink.
func (b *entryBatch) warningsByReason() (reasons []string, notes map[string]string) {
	byReason := map[string][]string{}
	for i, w := range b.warnings {
		if w == "" {
			continue
		}
		r := b.entries[i].Reason
		if _, ok := byReason[r]; !ok {
			reasons = append(reasons, r)
		}
		byReason[r] = append(byReason[r], w)
	}
	notes = make(map[string]string, len(reasons))
	for _, r := range reasons {
		parts := byReason[r]
		share := (maxNote - len(noteSep)*(len(parts)-1)) / len(parts)
		for i, p := range parts {
			parts[i] = truncate(strings.ToValidUTF8(p, ""), max(share, 1))
		}
		notes[r] = strings.Join(parts, noteSep)
	}
	return reasons, notes
}

// maxNote is the longest Event note the controller records; noteSep
// separates the notes of one reason's sinks.
const (
	maxNote = 1000
	noteSep = "; "
)
