package export

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// entryLinger is how long a status write with none in flight waits for the
// entries of the inventory's other exporters.
const entryLinger = 5 * time.Millisecond

// entryWrites coalesces the status entries that the exporters of one
// inventory report while a write of that inventory is in flight into the
// next write: one storage update for all of them. A new inventory's
// exporters report their first outcome at the same moment; written apart,
// each entry is an etcd transaction with its fsync, and each after the
// first conflicts with the one before and is read and tried again. It is
// group commit: the first entry of a batch starts its flush, which writes
// it once the write before it ended; entries that come meanwhile join it.
type entryWrites struct {
	// write stores a batch of one inventory's entries and emits their
	// warnings; it returns each entry's outcome.
	write func(ctx context.Context, t entryInventory, b *entryBatch) []error
	// linger is how long a batch with no write before it waits for more
	// entries (PostgreSQL's commit_delay).
	linger time.Duration
	// alone, when set, reports that no other exporter of the target may
	// join its batch: it then does not linger, since nothing would come.
	alone func(entryInventory) bool

	mu sync.Mutex
	// open is the batch of a target that still takes entries: its flush
	// waits for the target's write in flight (or the linger).
	open map[entryInventory]*entryBatch
	// inFlight is the batch of a target being written.
	inFlight map[entryInventory]*entryBatch
}

// entryInventory is the inventory object an entry is for: the same name
// with another UID is another object, written apart.
type entryInventory struct {
	inv plumbing.InventoryKey
	uid string
}

// entryBatch is the entries of one write in the order they came, with
// their exporters and the Warning Events they asked for. Only put and
// withdraw change it, while it is open; its flush reads it once it is
// not. An exporter restarted meanwhile may have two entries in it: the
// later one is written over the earlier, as two writes would.
type entryBatch struct {
	keys    []exporterKey
	entries []*v1alpha1.SinkExportStatus
	// warnings holds, per entry, what its Warning Event says about the
	// sink ("" none).
	warnings []string
	done     chan struct{}
	// errs holds, once done is closed, each entry's outcome.
	errs map[*v1alpha1.SinkExportStatus]error
}

// errNotWritten is the outcome of an entry its write did not report on.
var errNotWritten = errors.New("the status entry was not written")

func newEntryWrites(linger time.Duration, write func(ctx context.Context, t entryInventory, b *entryBatch) []error) *entryWrites {
	return &entryWrites{write: write, linger: linger, open: map[entryInventory]*entryBatch{}, inFlight: map[entryInventory]*entryBatch{}}
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
	t := entryInventory{inv: k.inv, uid: uid}
	w.mu.Lock()
	b := w.open[t]
	if b == nil {
		b = &entryBatch{done: make(chan struct{})}
		w.open[t] = b
		go w.flush(base, t, b, w.inFlight[t])
	}
	b.add(k, entry, warning)
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
func (w *entryWrites) flush(base context.Context, t entryInventory, b, prev *entryBatch) {
	if prev != nil {
		<-prev.done // a write's own time: the storage bounds it
	} else if w.alone == nil || !w.alone(t) {
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
		errs := w.write(base, t, b)
		for i, e := range b.entries {
			b.errs[e] = errNotWritten
			if i < len(errs) {
				b.errs[e] = errs[i]
			}
		}
	}

	w.mu.Lock()
	delete(w.inFlight, t) // the next batch's flush waits for done
	w.mu.Unlock()
	close(b.done)
}

// add appends an exporter's entry to the batch.
func (b *entryBatch) add(k exporterKey, entry *v1alpha1.SinkExportStatus, warning string) {
	b.keys = append(b.keys, k)
	b.entries = append(b.entries, entry)
	b.warnings = append(b.warnings, warning)
}

// withdraw takes an entry out of the batch.
func (b *entryBatch) withdraw(entry *v1alpha1.SinkExportStatus) {
	i := slices.Index(b.entries, entry)
	if i < 0 {
		return
	}
	b.keys = slices.Delete(b.keys, i, i+1)
	b.entries = slices.Delete(b.entries, i, i+1)
	b.warnings = slices.Delete(b.warnings, i, i+1)
}

// writeEntry stores an exporter's status entry, with the entries of the
// inventory's other exporters reported meanwhile (entryWrites). The
// shared write runs until the controller stops, not the exporter.
func (c *Controller) writeEntry(ctx context.Context, k exporterKey, uid string, entry *v1alpha1.SinkExportStatus, warning string) error {
	return c.entries.put(ctx, wait.ContextForChannel(c.stopped), k, uid, entry, warning)
}

// writeEntries stores a batch of one inventory's entries in one update,
// then emits the Warning Events of the entries stored: one per reason and
// write, regarding the inventory as that write left it. The recorder
// makes Events about one object version with one reason a series that
// keeps the first note; each write is a version of its own, and its note
// names every sink.
func (c *Controller) writeEntries(ctx context.Context, t entryInventory, b *entryBatch) []error {
	// In process, these writes pass no client rate limit or priority and
	// fairness: this limit, the loopback client's, stands in for them.
	// One outcome per entry: any the writer does not give is a failure.
	rvs, errs := make([]string, len(b.entries)), slices.Repeat([]error{errNotWritten}, len(b.entries))
	if err := c.entryLimiter.Wait(ctx); err != nil {
		errs = slices.Repeat([]error{err}, len(b.entries))
	} else {
		wrote, outcomes := c.cfg.SinkExports.WriteSinkExports(ctx, t.inv.Cluster, t.inv.Namespace, t.inv.Name, t.uid, b.entries)
		copy(rvs, wrote)
		copy(errs, outcomes)
	}
	var w warnings
	// last holds each exporter's last entry in the batch: an earlier one
	// (a restarted exporter's) was written over, and says nothing now.
	last := map[exporterKey]int{}
	for i, k := range b.keys {
		last[k] = i
	}
	for i, err := range errs {
		result := "ok"
		if err != nil {
			result = "error"
		}
		metrics.StatusEntryWrites.WithLabelValues(t.inv.Kind(), result).Inc()
		if err != nil || b.warnings[i] == "" || last[b.keys[i]] != i {
			continue
		}
		k := b.keys[i]
		w.add(rvs[i], b.entries[i].Reason, k.family, k.namespace, k.name, b.warnings[i])
	}
	uid := t.uid
	if uid == "" && len(w.order) > 0 {
		// A write for whatever object holds the name: the cache's.
		obj, err := c.getInventory(t.inv)
		if err != nil || obj == nil {
			return errs
		}
		uid = string(obj.GetUID())
	}
	w.emit(c, t.inv, uid)
	return errs
}
