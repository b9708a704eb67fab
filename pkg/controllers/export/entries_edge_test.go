package export

// The coalesced status entry writes under restarts and shutdown, and the
// notes of their Warning Events.

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// waitOpen waits until the open batch of t holds n entries.
func waitOpen(t *testing.T, w *entryWrites, tg entryInventory, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		w.mu.Lock()
		b := w.open[tg]
		got := 0
		if b != nil {
			got = len(b.entries)
		}
		w.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("open batch never held %d entries", n)
}

// Two entries of one sink in one batch: the later is what is stored; a
// batch whose every entry was withdrawn still ends, and the next put works.
func TestEntryWritesLaterWinsAndEmptyBatch(t *testing.T) {
	var mu sync.Mutex
	stored := map[string]string{}
	started, release := make(chan struct{}), make(chan struct{})
	first := true
	w := newEntryWrites(0, func(_ context.Context, _ entryInventory, b *entryBatch) []error {
		mu.Lock()
		f := first
		first = false
		for _, e := range b.entries { // as the registry's mutate loop: in order
			stored[e.Name] = e.Message
		}
		mu.Unlock()
		if f {
			close(started)
			<-release
		}
		return make([]error, len(b.entries))
	})
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	tg := entryInventory{inv: inv, uid: "u"}
	go func() { _ = w.put(ctx, ctx, sinkKeyed(inv, "x"), "u", &v1alpha1.SinkExportStatus{Name: "x"}, "") }()
	<-started
	errs := make(chan error, 2)
	go func() {
		errs <- w.put(ctx, ctx, sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a", Message: "old"}, "")
	}()
	waitOpen(t, w, tg, 1)
	go func() {
		errs <- w.put(ctx, ctx, sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a", Message: "new"}, "")
	}()
	waitOpen(t, w, tg, 2)
	close(release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if stored["a"] != "new" {
		t.Errorf("stored %q, want the later entry", stored["a"])
	}

	// Every entry withdrawn: the batch ends without a write.
	started2, release2 := make(chan struct{}), make(chan struct{})
	w2 := newEntryWrites(0, func(_ context.Context, _ entryInventory, b *entryBatch) []error {
		if len(b.entries) > 0 && b.entries[0].Name == "hold" {
			close(started2)
			<-release2
		}
		return make([]error, len(b.entries))
	})
	go func() {
		_ = w2.put(ctx, ctx, sinkKeyed(inv, "hold"), "u", &v1alpha1.SinkExportStatus{Name: "hold"}, "")
	}()
	<-started2
	stopped, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- w2.put(stopped, ctx, sinkKeyed(inv, "b"), "u", &v1alpha1.SinkExportStatus{Name: "b"}, "")
	}()
	waitOpen(t, w2, tg, 1)
	stop()
	<-done
	waitOpen(t, w2, tg, 0)
	close(release2)
	ok := make(chan error, 1)
	go func() { ok <- w2.put(ctx, ctx, sinkKeyed(inv, "c"), "u", &v1alpha1.SinkExportStatus{Name: "c"}, "") }()
	select {
	case err := <-ok:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a put after an emptied batch never returned")
	}
}

// The controller's run context ending releases every flush goroutine and
// every waiting put, even when the write in flight only ends with it.
func TestEntryWritesEndWithBase(t *testing.T) {
	before := runtime.NumGoroutine()
	base, cancel := context.WithCancel(context.Background())
	w := newEntryWrites(time.Millisecond, func(ctx context.Context, _ entryInventory, b *entryBatch) []error {
		<-ctx.Done() // the storage answers only when the context ends
		errs := make([]error, len(b.entries))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	})
	live := context.Background() // exporters not yet stopped
	var wg sync.WaitGroup
	for i := range 8 {
		inv := plumbing.InventoryKey{Namespace: "ns", Name: fmt.Sprint("inv", i%2)}
		wg.Go(func() {
			if err := w.put(live, base, sinkKeyed(inv, fmt.Sprint("s", i)), "u", &v1alpha1.SinkExportStatus{Name: fmt.Sprint("s", i)}, ""); err == nil {
				t.Errorf("an entry acknowledged though its write failed")
			}
		})
		time.Sleep(2 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines left, %d before", n, before)
	}
}

// oldTruncate is the previous version's truncate.
func oldTruncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// entrySays compares a stored message (written by the previous version)
// with the new truncate: for valid UTF-8 they agree, so no rewrite.
func TestTruncateMatchesPreviousVersion(t *testing.T) {
	for _, r := range []string{"é", "€", "😀", "a"} {
		for pad := 1000; pad < 1030; pad++ {
			s := strings.Repeat("a", pad) + strings.Repeat(r, 20)
			old := strings.ToValidUTF8(oldTruncate(s, 1024), "")
			now := strings.ToValidUTF8(plumbing.Truncate(s, 1024), "")
			if old != now {
				t.Fatalf("pad %d rune %q: stored %d bytes, compared %d", pad, r, len(old), len(now))
			}
		}
	}
	// Only stray continuation bytes at the cut differ (a one-time rewrite).
	s := strings.Repeat("a", 1023) + "\x80\x80"
	if a, b := strings.ToValidUTF8(oldTruncate(s, 1024), ""), strings.ToValidUTF8(plumbing.Truncate(s, 1024), ""); a == b {
		t.Logf("no difference")
	} else {
		t.Logf("invalid input: old %d bytes, new %d bytes", len(a), len(b))
	}
}

// With an inventory's 20 sinks (MaxSinkReferences) failing together, the
// note still names every sink, within plumbing.MaxEventNote and valid UTF-8; with names
// too long for all of them to fit, it names what fits and counts the rest.
func TestJoinedNoteNamesManySinks(t *testing.T) {
	var notes []sinkNote
	for i := range 20 {
		notes = append(notes, sinkNote{sink: fmt.Sprintf("Database payments-prod/orders-replica-%02d", i),
			text: fmt.Sprintf("export failed: dial tcp 10.0.0.%d:5432: connect: connection refused", i)})
	}
	note := joinNotes(notes)
	if len(note) > plumbing.MaxEventNote || !utf8.ValidString(note) {
		t.Errorf("note of %d bytes, valid UTF-8 %v; want at most %d, valid", len(note), utf8.ValidString(note), plumbing.MaxEventNote)
	}
	for _, n := range notes {
		if !strings.Contains(note, n.sink+": ") {
			t.Errorf("%s not named in the note: %.300q", n.sink, note)
		}
	}
	var long []sinkNote
	for i := range 20 {
		long = append(long, sinkNote{sink: fmt.Sprintf("Database %s/%s-%02d", strings.Repeat("n", 63), strings.Repeat("s", 60), i), text: "x"})
	}
	note = joinNotes(long)
	if len(note) > plumbing.MaxEventNote || !strings.HasSuffix(note, " more") || !strings.Contains(note, long[0].sink) {
		t.Errorf("note of names too long: %d bytes %.200q...; want at most %d, the first sink, a count of the rest", len(note), note, plumbing.MaxEventNote)
	}
}

// An entry its write gives no outcome for is not acknowledged.
func TestEntryWithoutOutcomeNotAcknowledged(t *testing.T) {
	w := newEntryWrites(0, func(context.Context, entryInventory, *entryBatch) []error { return nil })
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	if err := w.put(ctx, ctx, sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a"}, ""); err == nil {
		t.Errorf("an entry the writer gave no outcome for was acknowledged")
	}
}
