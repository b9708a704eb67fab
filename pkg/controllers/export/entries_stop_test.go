package export

// Stopped exporters and the coalesced status entry writes (entryWrites).

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/flowcontrol"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// batchHost is reviewHost with the real entryWrites in front of a writer
// that, as Controller.writeEntries does, waits for the entry limiter under
// the context it is given, then stores the batch.
type batchHost struct {
	*reviewHost
	w    *entryWrites
	base context.Context

	mu     sync.Mutex
	stored []*v1alpha1.SinkExportStatus
}

func newBatchHost(base context.Context, h *reviewHost) *batchHost {
	bh := &batchHost{reviewHost: h, base: base}
	lim := flowcontrol.NewTokenBucketRateLimiter(loopbackQPS, loopbackBurst)
	bh.w = newEntryWrites(entryLinger, func(ctx context.Context, _ entryInventory, b *entryBatch) []error {
		errs := make([]error, len(b.entries))
		if err := lim.Wait(ctx); err != nil {
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		bh.mu.Lock()
		bh.stored = append(bh.stored, b.entries...)
		bh.mu.Unlock()
		return errs
	})
	return bh
}

func (h *batchHost) writeEntry(ctx context.Context, k exporterKey, uid string, e *v1alpha1.SinkExportStatus, warning string) error {
	return h.w.put(ctx, h.base, k, uid, e, warning)
}

// An exporter stopped in the middle of a delivery (the inventory suspended
// or deleted) stores no entry: its run did not fail. A stored
// Failed/"context canceled" entry would raise consecutiveFailures, which a
// resumed exporter seeds from: its next real failure would not start a
// streak (no Warning Event) and its breaker would open a failure early.
func TestStoppedExporterStoresNoEntry(t *testing.T) {
	ctx := reviewCtx(t)
	got := make(chan struct{}, 1)
	quit := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			return
		}
		select {
		case got <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer srv.Close()
	defer close(quit)
	h := newBatchHost(ctx, hookHost(t, srv.URL))
	v := newItemSet(func() string { return "1" })
	for i := range 10 {
		v.upsert(exported(reviewItem(strconv.Itoa(i), "uid-"+strconv.Itoa(i), "1", "h"+strconv.Itoa(i))))
	}
	e := hookExporter(t, h, v)

	exporterCtx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); e.runOnce(exporterCtx) }()
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatal("the sink got no delivery")
	}
	stop() // the controller stops the exporter
	<-ran
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.stored {
		t.Errorf("a stopped exporter's entry was stored: outcome %s reason %s message %q consecutiveFailures %d",
			s.Outcome, s.Reason, s.Message, s.ConsecutiveFailures)
	}
}

// A stopped exporter's report returns at once, whatever is in flight:
// stop(), and the one reconcile worker calling it, do not wait for writes.
func TestStoppedEntryReturnsAtOnce(t *testing.T) {
	l := &writeLog{started: make(chan struct{}), release: make(chan struct{})}
	w := newEntryWrites(0, l.write)
	ctx := t.Context()
	inv := plumbing.InventoryKey{Namespace: "ns", Name: "inv"}
	go func() { _ = w.put(ctx, ctx, sinkKeyed(inv, "a"), "u", &v1alpha1.SinkExportStatus{Name: "a"}, "") }()
	<-l.started
	defer close(l.release)
	stopped, stop := context.WithCancel(ctx)
	stop()
	done := make(chan error, 1)
	go func() {
		done <- w.put(stopped, ctx, sinkKeyed(inv, "b"), "u", &v1alpha1.SinkExportStatus{Name: "b"}, "")
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a stopped exporter's entry: %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second): // a deadlock, not a speed
		t.Errorf("a put with a cancelled context still waits for the write in flight")
	}
}

// A long note hides no other sink of its reason (docs/export.md: "its note
// naming each sink"), and no cut splits a UTF-8 sequence.
func TestJoinedNoteNamesEverySink(t *testing.T) {
	note := joinNotes([]sinkNote{
		{sink: "Event ns/a", text: "export failed: " + strings.Repeat("é", 600)},
		{sink: "Event ns/b", text: "export failed: 500"},
	})
	if !strings.Contains(note, "Event ns/b: export failed: 500") {
		t.Errorf("the Event's note does not say what the second sink says: %.100q", note[len(note)-100:])
	}
	if len(note) > plumbing.MaxEventNote || !utf8.ValidString(note) {
		t.Errorf("note of %d bytes, valid UTF-8 %v; want at most %d, valid", len(note), utf8.ValidString(note), plumbing.MaxEventNote)
	}
}

// flakyEntryHost is reviewHost whose first entry write fails, recording
// the warning each write carries.
type flakyEntryHost struct {
	*reviewHost
	warnings []string
}

func (h *flakyEntryHost) writeEntry(ctx context.Context, k exporterKey, uid string, e *v1alpha1.SinkExportStatus, warning string) error {
	h.warnings = append(h.warnings, warning)
	if len(h.warnings) == 1 {
		return errors.New("etcdserver: request timed out")
	}
	return h.reviewHost.writeEntry(ctx, k, uid, e, warning)
}

// The Warning Event of a failure streak is not lost with its entry: when
// the first failure's entry write fails, the next report carries the
// warning again; once stored, the streak warns no more.
func TestStreakWarningSurvivesAFailedWrite(t *testing.T) {
	ctx := reviewCtx(t)
	srv := failingReceiver(t)
	h := &flakyEntryHost{reviewHost: hookHost(t, srv.URL)}
	v := newItemSet(func() string { return "1" })
	v.upsert(exported(reviewItem("0", "uid-0", "1", "h0")))
	e := hookExporter(t, h, v)
	for range 3 {
		e.runOnce(ctx)
	}
	if len(h.warnings) != 3 || h.warnings[0] == "" || h.warnings[1] == "" || h.warnings[2] != "" {
		t.Errorf("warnings of three failed runs, the first entry write failing: %q; want the first two set, the third empty", h.warnings)
	}
}

// missingSinkHost is flakyEntryHost whose sink can go missing.
type missingSinkHost struct {
	*flakyEntryHost
	missing bool
}

func (h *missingSinkHost) resolve(ctx context.Context, k exporterKey) (*resolved, error) {
	r, err := h.flakyEntryHost.resolve(ctx, k)
	if h.missing {
		return r, &resolveFailure{reason: v1alpha1.ReasonSinkNotFound, message: "EventSink ns/hook does not exist"}
	}
	return r, err
}

// A reference failure stored in the middle of an export streak whose own
// Warning is still owed does not pay that debt: the streak's next failed
// run still carries it.
func TestStreakWarningOutlivesAReferenceFailure(t *testing.T) {
	ctx := reviewCtx(t)
	srv := failingReceiver(t)
	h := &missingSinkHost{flakyEntryHost: &flakyEntryHost{reviewHost: hookHost(t, srv.URL)}}
	v := newItemSet(func() string { return "1" })
	v.upsert(exported(reviewItem("0", "uid-0", "1", "h0")))
	e := hookExporter(t, h, v)
	e.runOnce(ctx) // fails; its entry's write fails
	h.missing = true
	e.runOnce(ctx) // the sink is gone: SinkNotFound, stored
	h.missing = false
	e.runOnce(ctx) // fails again
	if len(h.warnings) != 3 || !strings.HasPrefix(h.warnings[2], "export failed: ") {
		t.Errorf("warnings %q; want the third run to carry the export streak's owed warning", h.warnings)
	}
}

// hookHost is a reviewHost exporting the Inventory ns/inv to the EventSink
// ns/hook, a webhook at url.
func hookHost(t *testing.T, url string) *reviewHost {
	t.Helper()
	obj, err := sinkObjectOf(&v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hook", UID: "sink-uid", Generation: 1},
		Spec:       v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: url + "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv", UID: "inv-uid"}
	return &reviewHost{inv: inv, obj: obj, maxAge: time.Hour}
}

// hookExporter is the exporter of ns/inv to ns/hook on h, following v.
func hookExporter(t *testing.T, h parent, v *itemSet) *exporter {
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: "hook"}, v)
	t.Cleanup(func() { e.sub.close(); e.closeClient() })
	return e
}

// failingReceiver answers every request 500.
func failingReceiver(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	t.Cleanup(srv.Close)
	return srv
}
