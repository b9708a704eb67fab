package export

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// Exporters created together spread their first re-export over the
// period, each by its own share; after that unchanged re-export the
// period is exact. (Without the share, 500 Inventories created together
// wrote 404 status entries in one second and none in 34 seconds of 120.)
func TestReexportsSpreadOverThePeriod(t *testing.T) {
	ctx := reviewCtx(t)
	const interval, watchdog, n = 30 * time.Second, 30 * time.Second, 200
	obj := reviewFileSink(t)
	root := t.TempDir()
	var deciles [10]int
	var last *exporter
	var lastHost *reviewHost
	for i := range n {
		name := fmt.Sprintf("inv-%03d", i)
		h := &reviewHost{inv: sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: name},
			obj: obj, root: root, maxAge: time.Hour, interval: interval, watchdog: watchdog, echo: true}
		v := newView(func() string { return "1" })
		v.upsert(reviewItem("x", "uid-x-"+name, "1", "hx"))
		e := newExporter(h, exporterKey{inv: invKey{Namespace: "ns", Name: name}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
		t.Cleanup(func() { e.sub.close(); e.closeClient() })
		e.runOnce(ctx)
		if len(h.entries) != 1 || h.entries[0].Outcome != v1alpha1.OutcomeExported {
			t.Fatalf("%s: entries %+v, want one Exported", name, h.entries)
		}
		en := h.entries[0]
		late := en.NextDueTime.Sub(en.LastExportTime.Add(interval))
		if late < 0 || late >= watchdog {
			t.Fatalf("%s: due %s after lastExportTime+interval; want within [0, %s)", name, late, watchdog)
		}
		deciles[int(late*10/watchdog)]++
		last, lastHost = e, h
	}
	for d, k := range deciles {
		// 200 exporters, 20 per tenth on average.
		if k < 5 {
			t.Errorf("tenth %d of the period holds %d of %d first re-exports: %v", d, k, n, deciles)
		}
	}

	// The due re-export of an unchanged payload keeps its place: the next
	// one is exactly one interval later.
	last.lastExport = time.Now().Add(-interval - watchdog)
	last.runOnce(ctx)
	en := lastHost.entries[len(lastHost.entries)-1]
	if en.Outcome != v1alpha1.OutcomeExported || en.Message != exportMessage(actFull, true) {
		t.Fatalf("the due re-export: %s %q", en.Outcome, en.Message)
	}
	if !en.NextDueTime.Equal(&metav1.Time{Time: en.LastExportTime.Add(interval)}) {
		t.Errorf("after the due re-export: next due %s, want lastExportTime %s + %s", en.NextDueTime, en.LastExportTime, interval)
	}
}

// With 0s the watchdog's refresh spreads the same way: the first after an
// export waits for the exporter's share, and wakes for it; the next one
// comes one watchdog period after it.
func TestWatchdogRefreshSpreads(t *testing.T) {
	ctx := reviewCtx(t)
	const watchdog = 30 * time.Second
	obj := reviewFileSink(t)
	h := &reviewHost{inv: sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"},
		obj: obj, root: t.TempDir(), maxAge: time.Hour, watchdog: watchdog, echo: true}
	v := newView(func() string { return "1" })
	v.upsert(reviewItem("x", "uid-x", "1", "hx"))
	// A key whose share is well inside the period.
	var e *exporter
	for i := 0; e == nil || e.spread < 0.3 || e.spread > 0.7; i++ {
		if e != nil {
			e.sub.close()
		}
		e = newExporter(h, exporterKey{inv: invKey{Namespace: "ns", Name: fmt.Sprintf("inv-%d", i)}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
	}
	t.Cleanup(func() { e.sub.close(); e.closeClient() })
	e.runOnce(ctx)
	if len(h.entries) != 1 {
		t.Fatalf("%d entries after the first export, want 1", len(h.entries))
	}
	share := time.Duration(e.spread * float64(watchdog))

	// A plain watchdog period after the export: not yet.
	e.lastReport = time.Now().Add(-watchdog)
	next := e.runOnce(ctx)
	if len(h.entries) != 1 {
		t.Fatalf("refreshed %s after the export, before its share %s", watchdog, share)
	}
	if want := e.lastReport.Add(watchdog + share); !next.Equal(want) {
		t.Errorf("next wake-up %s, want the refresh at %s", next, want)
	}
	// Its share later: refreshed, and the share is spent.
	e.lastReport = time.Now().Add(-watchdog - share)
	e.runOnce(ctx)
	if len(h.entries) != 2 || h.entries[1].Outcome != v1alpha1.OutcomeDebounced {
		t.Fatalf("no Debounced refresh after watchdog + share: %d entries", len(h.entries))
	}
	if d := e.delay(watchdog, watchdog); d != 0 {
		t.Errorf("after the first refresh the next waits %s more, want an exact period", d)
	}
}

// reviewFileSink is the file SnapshotSink "ns/files" writing to file:///a.
func reviewFileSink(t *testing.T) *sinkObject {
	t.Helper()
	obj, err := sinkObjectOf(&v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "files", UID: "sink-uid", Generation: 1},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///a"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}
