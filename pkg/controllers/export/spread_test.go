package export

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
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
		v := newItemSet(func() string { return "1" })
		v.upsert(exported(reviewItem("x", "uid-x-"+name, "1", "hx")))
		e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: name}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
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
	// one is exactly one interval later. The file sink finds its document
	// in place and leaves it.
	last.lastExport = time.Now().Add(-interval - watchdog)
	last.runOnce(ctx)
	en := lastHost.entries[len(lastHost.entries)-1]
	if en.Outcome != v1alpha1.OutcomeExported || en.Message != exportMessage(actFull, false) {
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
	h, v := spreadHost(t, 0, watchdog)
	e := spreadExporter(t, h, v, 0.3, 0.7)
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

// spreadHost is a file-sink host at interval that echoes its last entry
// (as the informer would), with one item in view.
func spreadHost(t *testing.T, interval, watchdog time.Duration) (*reviewHost, *itemSet) {
	h := &reviewHost{inv: sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"},
		obj: reviewFileSink(t), root: t.TempDir(), maxAge: time.Hour, interval: interval, watchdog: watchdog, echo: true}
	v := newItemSet(func() string { return "1" })
	v.upsert(exported(reviewItem("x", "uid-x", "1", "hx")))
	return h, v
}

// spreadExporter is an exporter on h whose share lies in [lo, hi].
func spreadExporter(t *testing.T, h *reviewHost, v *itemSet, lo, hi float64) *exporter {
	t.Helper()
	for i := range 10000 {
		k := exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: fmt.Sprintf("inv-%d", i)}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}
		if s := spreadOf(k); s >= lo && s <= hi {
			e := newExporter(h, k, v)
			t.Cleanup(func() { e.sub.close(); e.closeClient() })
			return e
		}
	}
	t.Fatal("no key with such a share")
	return nil
}

// Keys that differ only in their last bytes (one inventory's sinks
// sink-00 … sink-99) spread like any others.
func TestSpreadOfKeysDifferingAtTheEnd(t *testing.T) {
	seconds := map[int]int{}
	for i := range 100 {
		k := exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyDatabase, namespace: "ns", name: fmt.Sprintf("sink-%02d", i)}
		seconds[int(spreadOf(k)*30)]++
	}
	// 100 uniform draws over 30 slots leave about 1.1 empty.
	if len(seconds) < 25 {
		t.Errorf("100 exporters of one Inventory fall in %d of 30 one-second slots: %v", len(seconds), seconds)
	}
}

// A restarted exporter, or a new leader's, keeps its place in the period:
// it takes from the entry whether its share is spent, rather than adding
// it again (the entry's nextDueTime would then lie by up to a period) or
// dropping it.
func TestRestartKeepsThePlaceInThePeriod(t *testing.T) {
	const period = 30 * time.Second
	for _, tc := range []struct {
		name     string
		interval time.Duration
		// spent: the entry shows the share spent (a re-export or refresh
		// since the export of changes).
		spent bool
	}{
		{"30s at rest", period, true},
		{"30s share to come", period, false},
		{"0s at rest", 0, true},
		{"0s share to come", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := reviewCtx(t)
			h, v := spreadHost(t, tc.interval, period)
			old := spreadExporter(t, h, v, 0.3, 0.7)
			old.runOnce(ctx)
			share := time.Duration(old.spread * float64(period))
			if tc.spent {
				if tc.interval > 0 {
					old.lastExport = time.Now().Add(-period - share)
				} else {
					old.lastReport = time.Now().Add(-period - share)
				}
				old.runOnce(ctx)
			}
			old.sub.close()
			writes := len(h.entries)
			if writes != 1+btoi(tc.spent) {
				t.Fatalf("setup: %d entries", writes)
			}
			en := h.entries[writes-1]
			if tc.spent && tc.interval <= 0 {
				// A refresh comes a period and the share after the export.
				en.LastExportTime = &metav1.Time{Time: en.LastAttemptTime.Add(-period - share)}
			}
			// The entry as stored (whole seconds), as a new leader finds it
			// a period less two seconds later.
			for _, tm := range []*metav1.Time{en.LastExportTime, en.LastAttemptTime, en.NextDueTime} {
				if tm != nil {
					*tm = metav1.NewTime(tm.Add(-period + 2*time.Second).Truncate(time.Second))
				}
			}
			var want time.Time
			switch {
			case tc.interval > 0:
				want = en.NextDueTime.Time
			case tc.spent:
				want = en.LastAttemptTime.Add(period)
			default:
				want = en.LastAttemptTime.Add(period + share)
			}

			e := newExporter(h, old.key, v)
			t.Cleanup(func() { e.sub.close(); e.closeClient() })
			next := e.runOnce(ctx)
			if len(h.entries) != writes {
				t.Fatalf("the new exporter wrote at once: %s %q", h.entries[len(h.entries)-1].Outcome, h.entries[len(h.entries)-1].Message)
			}
			if d := next.Sub(want); d < -time.Second || d > time.Second {
				t.Errorf("the new exporter wakes at %s, %s from the due time %s the entry shows", next.Format(time.RFC3339Nano), d.Round(time.Millisecond), want.Format(time.RFC3339))
			}
		})
	}
}

// With 0s only refreshes due within a second ride on the watchdog's own
// wake-up: exporters whose share is larger wait for it, so the fleet's
// lowest tenth does not refresh at one instant.
func TestWatchdogRefreshSmallShares(t *testing.T) {
	ctx := reviewCtx(t)
	const watchdog, n = 30 * time.Second, 300
	obj := reviewFileSink(t)
	root := t.TempDir()
	for i := range n {
		name := fmt.Sprintf("inv-%03d", i)
		h := &reviewHost{inv: sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: name},
			obj: obj, root: root, maxAge: time.Hour, watchdog: watchdog, echo: true}
		v := newItemSet(func() string { return "1" })
		v.upsert(exported(reviewItem("x", "uid-x-"+name, "1", "hx")))
		e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: name}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
		e.runOnce(ctx)
		share := time.Duration(e.spread * float64(watchdog))
		// The watchdog's wake-up, one period after the export's report.
		e.lastReport = time.Now().Add(-watchdog)
		e.runOnce(ctx)
		if len(h.entries) == 2 && share >= time.Second {
			t.Errorf("%s refreshed at the watchdog's wake-up, %s before its share", name, share.Round(time.Millisecond))
		}
		e.sub.close()
		e.closeClient()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
