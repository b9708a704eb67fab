package export

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// writeLog is a batch writer that records each write's entries and holds
// the first write until released.
type writeLog struct {
	mu      sync.Mutex
	writes  [][]string // sink names per write
	started chan struct{}
	release chan struct{}
	fail    map[string]error
}

func (l *writeLog) write(_ context.Context, _ entryInventory, b *entryBatch) []error {
	l.mu.Lock()
	var names []string
	for _, e := range b.entries {
		names = append(names, e.Name)
	}
	l.writes = append(l.writes, names)
	first := len(l.writes) == 1
	l.mu.Unlock()
	if first {
		close(l.started)
		<-l.release
	}
	errs := make([]error, len(b.entries))
	for i, e := range b.entries {
		errs[i] = l.fail[e.Name]
	}
	return errs
}

func sinkKeyed(inv plumbing.InventoryKey, name string) exporterKey {
	return exporterKey{inv: inv, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: name}
}

// Entries reported while a write of their inventory is in flight are one
// write after it; each learns its own outcome; an entry of another
// inventory does not wait.
func TestEntryWritesCoalesce(t *testing.T) {
	l := &writeLog{started: make(chan struct{}), release: make(chan struct{}), fail: map[string]error{"c": errors.New("refused")}}
	w := newEntryWrites(0, l.write)
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	put := func(name string) error {
		return w.put(ctx, ctx, sinkKeyed(inv, name), "uid-1", &v1alpha1.SinkExportStatus{Name: name}, "")
	}
	results := make(chan error, 4)
	go func() { results <- put("a") }()
	<-l.started
	// Joining the batch that waits is not observable from outside: wait
	// until each entry is in it before releasing the write in flight.
	var errC error
	var wg sync.WaitGroup
	for _, n := range []string{"b", "c", "d"} {
		wg.Go(func() {
			err := put(n)
			if n == "c" {
				errC = err
				return
			}
			results <- err
		})
	}
	waitOpen(t, w, entryInventory{inv: inv, uid: "uid-1"}, 3)
	// Another inventory's entry is written at once, beside the one in flight.
	other := plumbing.InventoryKey{Namespace: "ns", Name: "other"}
	if err := w.put(ctx, ctx, sinkKeyed(other, "a"), "uid-2", &v1alpha1.SinkExportStatus{Name: "x"}, ""); err != nil {
		t.Fatalf("another inventory's entry: %v", err)
	}
	close(l.release)
	wg.Wait()
	for range 3 {
		if err := <-results; err != nil {
			t.Errorf("entry: %v", err)
		}
	}
	if errC == nil || errC.Error() != "refused" {
		t.Errorf("the refused entry's outcome: %v, want its own error", errC)
	}
	if len(l.writes) != 3 {
		t.Fatalf("writes %v, want 3: the first, the other inventory's, the three that waited", l.writes)
	}
	last := slices.Clone(l.writes[2])
	slices.Sort(last)
	if !slices.Equal(l.writes[0], []string{"a"}) || !slices.Equal(l.writes[1], []string{"x"}) || !slices.Equal(last, []string{"b", "c", "d"}) {
		t.Errorf("writes %v, want [a] [x] [b c d]", l.writes)
	}
	if len(w.open) != 0 || len(w.inFlight) != 0 {
		t.Errorf("batches left behind: open %d, in flight %d", len(w.open), len(w.inFlight))
	}
}

// An entry whose exporter stops while its batch waits is withdrawn and
// returns at once; the batch is still written for the others. Two
// entries of one exporter (a restarted one's) are both kept, in order.
func TestEntryWritesWaiterCancelled(t *testing.T) {
	l := &writeLog{started: make(chan struct{}), release: make(chan struct{})}
	w := newEntryWrites(0, l.write)
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	target := entryInventory{inv: inv, uid: "u"}
	go func() {
		_ = w.put(ctx, ctx, sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a"}, "")
	}()
	<-l.started
	results := make(chan error, 2)
	go func() {
		results <- w.put(ctx, ctx, sinkKeyed(inv, "b"), "u", &v1alpha1.SinkExportStatus{Name: "b-old"}, "")
	}()
	waitOpen(t, w, target, 1)
	stopped, stop := context.WithCancel(ctx)
	go func() {
		results <- w.put(stopped, ctx, sinkKeyed(inv, "b"), "u", &v1alpha1.SinkExportStatus{Name: "b-stopped"}, "")
	}()
	waitOpen(t, w, target, 2)
	go func() {
		results <- w.put(ctx, ctx, sinkKeyed(inv, "b"), "u", &v1alpha1.SinkExportStatus{Name: "b-new"}, "")
	}()
	waitOpen(t, w, target, 3)
	stop()
	waitOpen(t, w, target, 2)
	close(l.release)
	var errs []error
	for range 3 {
		errs = append(errs, <-results)
	}
	canceled := 0
	for _, err := range errs {
		if errors.Is(err, context.Canceled) {
			canceled++
		} else if err != nil {
			t.Errorf("entry: %v", err)
		}
	}
	if canceled != 1 {
		t.Errorf("outcomes %v, want one context.Canceled (the stopped exporter's)", errs)
	}
	if len(l.writes) != 2 || !slices.Equal(l.writes[1], []string{"b-old", "b-new"}) {
		t.Errorf("writes %v, want [a] [b-old b-new]", l.writes)
	}
	// A stopped exporter's entry is not written at all.
	if err := w.put(stopped, ctx, sinkKeyed(inv, "c"), "u", &v1alpha1.SinkExportStatus{Name: "c"}, ""); !errors.Is(err, context.Canceled) {
		t.Errorf("an entry of a stopped exporter: %v, want context.Canceled", err)
	}
	if len(l.writes) != 2 {
		t.Errorf("writes %v after a stopped exporter's entry, want still 2", l.writes)
	}
}

// A note names each sink with what it says about it, in order.
func TestJoinNotes(t *testing.T) {
	got := joinNotes([]sinkNote{
		{sink: "Snapshot ns/a", text: "SnapshotSink ns/a does not exist"},
		{sink: "Event ns/c", text: "EventSink ns/c does not exist"},
	})
	if want := "Snapshot ns/a: SnapshotSink ns/a does not exist; Event ns/c: EventSink ns/c does not exist"; got != want {
		t.Errorf("note %q, want %q", got, want)
	}
}

// Entries reported together with no write in flight share one write: the
// first waits for the others for the linger.
func TestEntryWritesLinger(t *testing.T) {
	l := &writeLog{started: make(chan struct{}), release: make(chan struct{})}
	close(l.release)
	w := newEntryWrites(time.Second, l.write)
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	var wg sync.WaitGroup
	for _, n := range []string{"a", "b", "c"} {
		wg.Go(func() {
			if err := w.put(ctx, ctx, sinkKeyed(inv, n), "u", &v1alpha1.SinkExportStatus{Name: n}, ""); err != nil {
				t.Errorf("entry %s: %v", n, err)
			}
		})
	}
	wg.Wait()
	if len(l.writes) != 1 || len(l.writes[0]) != 3 {
		t.Errorf("writes %v, want one of a, b and c", l.writes)
	}
}

// An inventory with one exporter has nobody to wait for: its entry is
// written without the linger (an hour here: the test's deadline fails it
// if it waits).
func TestEntryWritesAloneDoNotLinger(t *testing.T) {
	l := &writeLog{started: make(chan struct{}), release: make(chan struct{})}
	close(l.release)
	w := newEntryWrites(time.Hour, l.write)
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	var asked []entryInventory
	w.alone = func(t entryInventory) bool {
		asked = append(asked, t)
		return true
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.put(ctx, t.Context(), sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a"}, ""); err != nil {
		t.Fatalf("entry of a lone exporter: %v (it waited for the linger)", err)
	}
	if len(l.writes) != 1 || !slices.Equal(asked, []entryInventory{{inv: inv, uid: "u"}}) {
		t.Errorf("writes %v, alone asked for %v", l.writes, asked)
	}
}
