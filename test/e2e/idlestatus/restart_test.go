package idlestatus

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestRestartKeepsTheDueTime: an Inventory re-exporting every 30s, at
// rest (its share of the period spent: nextDueTime = lastExportTime +
// 30s), is exported by a kollect-apiserver restarted between two
// re-exports. The next re-export comes when the entry said, not a share
// later: a new exporter takes its place in the period from the entry.
func TestRestartKeepsTheDueTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	const ns, name, interval = "idle-restart", "restarted", 30 * time.Second
	collectConfigMaps(ctx, t, ns, 1)
	api := kollect.KollectV1alpha1()
	_, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///restart"},
	}, metav1.CreateOptions{})
	must(t, err, "sink")
	_, err = api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: interval},
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "files"}}}}, metav1.CreateOptions{})
	must(t, err, "inventory")

	entry := func() *v1alpha1.SinkExportStatus {
		inv, err := api.Inventories(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || len(inv.Status.SinkExports) != 1 {
			return nil
		}
		return &inv.Status.SinkExports[0]
	}
	poll := func(what string, done func(*v1alpha1.SinkExportStatus) bool) *v1alpha1.SinkExportStatus {
		t.Helper()
		var en *v1alpha1.SinkExportStatus
		err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(context.Context) (bool, error) {
			en = entry()
			return en != nil && en.LastExportTime != nil && en.NextDueTime != nil && done(en), nil
		})
		must(t, err, what)
		return en
	}
	first := poll("first export", func(en *v1alpha1.SinkExportStatus) bool {
		return en.Outcome == v1alpha1.OutcomeExported && en.ItemCount == 1
	})
	share := first.NextDueTime.Sub(first.LastExportTime.Add(interval))
	t.Logf("first export at %s, next due %s: a share of %s", first.LastExportTime.Format(time.RFC3339), first.NextDueTime.Format(time.RFC3339), share)
	if share < 5*time.Second {
		// The share is fixed by the names; this test tells a share added
		// again only when it is larger than its tolerance.
		t.Fatalf("this inventory's share is %s; rename it so that it exceeds 5s", share)
	}
	rest := poll("the spread re-export", func(en *v1alpha1.SinkExportStatus) bool {
		return en.LastExportTime.After(first.LastExportTime.Time) && en.NextDueTime.Equal(&metav1.Time{Time: en.LastExportTime.Add(interval)})
	})
	t.Logf("at rest: re-exported at %s, next due %s", rest.LastExportTime.Format(time.RFC3339), rest.NextDueTime.Format(time.RFC3339))

	began := time.Now()
	must(t, env.Kollect.Restart(ctx), "restart kollect-apiserver")
	must(t, env.Cluster.RegisterKollect(ctx, env.Kollect), "register kollect-apiserver")
	restarted := time.Now()
	t.Logf("restarted in %s", restarted.Sub(began).Round(time.Millisecond))

	next := poll("the re-export after the restart", func(en *v1alpha1.SinkExportStatus) bool {
		return en.LastExportTime.After(rest.LastExportTime.Time)
	})
	// Whole seconds, and the restart itself may end after the due time.
	late := next.LastExportTime.Sub(rest.NextDueTime.Time)
	limit := 2*time.Second + max(restarted.Sub(rest.NextDueTime.Time), 0)
	t.Logf("after the restart: re-exported at %s, %s after the due time the entry showed; next due %s",
		next.LastExportTime.Format(time.RFC3339), late, next.NextDueTime.Format(time.RFC3339))
	if late > limit {
		t.Errorf("the re-export came %s after the entry's nextDueTime (the share is %s)", late, share)
	}
	if !next.NextDueTime.Equal(&metav1.Time{Time: next.LastExportTime.Add(interval)}) {
		t.Errorf("after the restart next due %s, want lastExportTime + %s", next.NextDueTime.Format(time.RFC3339), interval)
	}
}
