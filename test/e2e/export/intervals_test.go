package export

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestIntervals is issue 5's acceptance point 3, with file sinks: with 1h
// and no change nothing is re-exported and, at rest, the entry is not
// written at all (issue 11: only a due re-export or, for 0s, the watchdog
// writes status); with 0s the watchdog refreshes the entry (Debounced)
// without exporting; a short interval
// re-exports the identical payload (anti-drift); a generation bump exports
// to every sink; a Scope created later clamps the intervals, visibly.
func TestIntervals(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	ns := "export-intervals"
	namespace(ctx, t, ns)
	collectDeployments(ctx, t, ns, 3)
	dirs := map[string]string{}
	for _, name := range []string{"hourly", "zero", "frequent"} {
		var endpoint string
		endpoint, dirs[name] = fileEndpoint(ns)
		_, err := kollect.KollectV1alpha1().SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: endpoint},
		}, metav1.CreateOptions{})
		must(t, err, "sink "+name)
	}
	_, err := kollect.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{
			{Name: "hourly", ExportMinInterval: &metav1.Duration{Duration: time.Hour}},
			{Name: "zero", ExportMinInterval: &metav1.Duration{}},
			{Name: "frequent", ExportMinInterval: &metav1.Duration{Duration: 2 * time.Second}},
		}},
	}, metav1.CreateOptions{})
	must(t, err, "inventory")
	_, sum := itemSet(ctx, t, ns)
	first := waitSynced(ctx, t, ns, "inv", sum, 3)
	mtime := func(name string) time.Time {
		st, err := os.Stat(filepath.Join(dirs[name], clusterName, ns, "inv.json"))
		must(t, err, "stat "+name)
		return st.ModTime()
	}
	hourlyWritten := mtime("hourly")

	// Let several watchdog periods pass without any change.
	var now *v1alpha1.Inventory
	eventually(ctx, t, "debounced entries", func(ctx context.Context) (bool, string) {
		now = getInventory(ctx, t, ns, "inv")
		h, z, f := entry(now, v1alpha1.SinkFamilySnapshot, "hourly"), entry(now, v1alpha1.SinkFamilySnapshot, "zero"), entry(now, v1alpha1.SinkFamilySnapshot, "frequent")
		f0 := entry(first, v1alpha1.SinkFamilySnapshot, "frequent")
		h0 := entry(first, v1alpha1.SinkFamilySnapshot, "hourly")
		switch {
		case !apiequality.Semantic.DeepEqual(h, h0):
			// Not a wait: an idle 1h sink must never write its entry.
			t.Fatalf("hourly: the entry was written at rest:\nfirst %+v\nnow   %+v", h0, h)
		case z.Outcome != v1alpha1.OutcomeDebounced || !z.LastAttemptTime.After(entry(first, v1alpha1.SinkFamilySnapshot, "zero").LastAttemptTime.Time):
			return false, fmt.Sprintf("zero: %s, attempt %s", z.Outcome, z.LastAttemptTime)
		case !f.LastExportTime.After(f0.LastExportTime.Time.Add(time.Second)):
			return false, fmt.Sprintf("frequent: last export %s, first %s", f.LastExportTime, f0.LastExportTime)
		}
		return true, ""
	})
	for _, name := range []string{"hourly", "zero"} {
		e, e0 := entry(now, v1alpha1.SinkFamilySnapshot, name), entry(first, v1alpha1.SinkFamilySnapshot, name)
		if !e.LastExportTime.Equal(e0.LastExportTime) {
			t.Errorf("%s: re-exported an unchanged payload (lastExportTime %s → %s)", name, e0.LastExportTime, e.LastExportTime)
		}
	}
	if !mtime("hourly").Equal(hourlyWritten) {
		t.Errorf("hourly: the file was rewritten")
	}
	h, z, f := entry(now, v1alpha1.SinkFamilySnapshot, "hourly"), entry(now, v1alpha1.SinkFamilySnapshot, "zero"), entry(now, v1alpha1.SinkFamilySnapshot, "frequent")
	if h.EffectiveInterval.Duration != time.Hour || z.EffectiveInterval.Duration != 0 || f.EffectiveInterval.Duration != 2*time.Second {
		t.Errorf("effective intervals %s, %s, %s; want 1h, 0s, 2s", h.EffectiveInterval, z.EffectiveInterval, f.EffectiveInterval)
	}
	// The first re-export after an export of changes comes up to one
	// watchdog period late, by the exporter's share of it (spreading
	// inventories created together).
	if z.NextDueTime == nil && h.NextDueTime != nil {
		late := h.NextDueTime.Sub(h.LastExportTime.Add(time.Hour))
		if late < 0 || late >= watchdog {
			t.Errorf("next due: hourly %v, %s after lastExportTime+1h; want within [0, %s)", h.NextDueTime, late, watchdog)
		}
	} else {
		t.Errorf("next due: zero %v (want none), hourly %v (want one)", z.NextDueTime, h.NextDueTime)
	}
	if env, err := readFileEnvelope(filepath.Join(dirs["frequent"], clusterName, ns, "inv.json")); err != nil || env.Checksum != sum {
		t.Errorf("frequent: re-exported document %v, %v; want the same checksum", env, err)
	}

	// A generation bump exports to every sink, even with 1h and 0s.
	bumpedAt := time.Now().Add(-time.Second)
	// The exporters write status every 2s: retry the read-modify-write
	// on a conflict, as any client must.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		inv := getInventory(ctx, t, ns, "inv")
		inv.Spec.ExportMinInterval = &metav1.Duration{Duration: 10 * time.Minute}
		_, err := kollect.KollectV1alpha1().Inventories(ns).Update(ctx, inv, metav1.UpdateOptions{})
		return err
	})
	must(t, err, "bump generation")
	eventually(ctx, t, "export after the generation bump", func(ctx context.Context) (bool, string) {
		now := getInventory(ctx, t, ns, "inv")
		for _, e := range now.Status.SinkExports {
			if e.ObservedGeneration != now.Generation || e.LastExportTime == nil || e.LastExportTime.Time.Before(bumpedAt.Truncate(time.Second)) {
				return false, fmt.Sprintf("%s: generation %d/%d, last export %s", e.Name, e.ObservedGeneration, now.Generation, e.LastExportTime)
			}
		}
		return true, ""
	})

	// A Scope created later clamps every interval to its floor.
	_, err = kollect.KollectV1alpha1().Scopes(ns).Create(ctx, &v1alpha1.Scope{
		ObjectMeta: metav1.ObjectMeta{Name: "limits"},
		Spec:       v1alpha1.ScopeSpec{MinExportInterval: &metav1.Duration{Duration: 2 * time.Hour}},
	}, metav1.CreateOptions{})
	must(t, err, "scope")
	eventually(ctx, t, "intervals clamped by the scope floor", func(ctx context.Context) (bool, string) {
		now := getInventory(ctx, t, ns, "inv")
		for _, e := range now.Status.SinkExports {
			if e.EffectiveInterval == nil || e.EffectiveInterval.Duration != 2*time.Hour {
				return false, fmt.Sprintf("%s: effective interval %v", e.Name, e.EffectiveInterval)
			}
		}
		return true, ""
	})
	clamped := entry(getInventory(ctx, t, ns, "inv"), v1alpha1.SinkFamilySnapshot, "frequent").LastExportTime
	time.Sleep(3 * watchdog)
	if e := entry(getInventory(ctx, t, ns, "inv"), v1alpha1.SinkFamilySnapshot, "frequent"); !e.LastExportTime.Equal(clamped) {
		t.Errorf("frequent under a 2h floor re-exported: %s → %s", clamped, e.LastExportTime)
	}
}
