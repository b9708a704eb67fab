package apiserver_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestInventoryStatusComputedOnWrite shows the aggregate arriving in the
// response of the very write that reports the observations, and a spec
// update dropping the entry of a removed reference.
func TestInventoryStatusComputedOnWrite(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	invs := srv.Client.KollectV1alpha1().Inventories("team-a")

	inv, err := invs.Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "team-a"},
		Spec: v1alpha1.InventorySpec{
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}},
			DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "portal"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	expectCondition(t, inv.Status.Conditions, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonProgressing)

	exported := metav1.NewTime(time.Now().Add(-time.Minute).Truncate(time.Second))
	later := metav1.NewTime(exported.Add(30 * time.Second))
	inv.Status.SinkExports = []v1alpha1.SinkExportStatus{
		{Family: v1alpha1.SinkFamilySnapshot, Name: "audit", ObservedGeneration: 1, Outcome: v1alpha1.OutcomeExported, LastExportTime: &exported, ItemCount: 12},
		{Family: v1alpha1.SinkFamilyDatabase, Name: "portal", ObservedGeneration: 1, Outcome: v1alpha1.OutcomeFailed, Message: "connection refused"},
	}
	inv, err = invs.UpdateStatus(ctx, inv, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	expectCondition(t, inv.Status.Conditions, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonPartiallySynced)
	expectCondition(t, inv.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPartiallySynced)
	if inv.Status.LastExportTime == nil || !inv.Status.LastExportTime.Equal(&exported) || inv.Status.SinksSynced != "1/2" || inv.Status.ItemCount != 12 {
		t.Errorf("aggregate lastExportTime=%v sinksSynced=%q itemCount=%d", inv.Status.LastExportTime, inv.Status.SinksSynced, inv.Status.ItemCount)
	}

	inv.Status.SinkExports[1] = v1alpha1.SinkExportStatus{Family: v1alpha1.SinkFamilyDatabase, Name: "portal", ObservedGeneration: 1, Outcome: v1alpha1.OutcomeExported, LastExportTime: &later}
	inv, err = invs.UpdateStatus(ctx, inv, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	expectCondition(t, inv.Status.Conditions, v1alpha1.ConditionSynced, metav1.ConditionTrue, v1alpha1.ReasonExported)
	if !inv.Status.LastExportTime.Equal(&later) {
		t.Errorf("lastExportTime = %v, want the max %v", inv.Status.LastExportTime, later)
	}

	// GET returns exactly what the write stored: nothing is computed on read.
	again, err := invs.Get(ctx, "team-a", metav1.GetOptions{})
	if err != nil || again.ResourceVersion != inv.ResourceVersion {
		t.Fatalf("get: %v, resourceVersion %s vs %s", err, again.ResourceVersion, inv.ResourceVersion)
	}

	// Removing a reference drops its entry; adding one makes it pending.
	inv.Spec.DatabaseSinkRefs = nil
	inv.Spec.EventSinkRefs = []v1alpha1.SinkReference{{Name: "changes"}}
	inv, err = invs.Update(ctx, inv, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update spec: %v", err)
	}
	if inv.Generation != 2 || len(inv.Status.SinkExports) != 1 || inv.Status.SinkExports[0].Name != "audit" {
		t.Fatalf("after removing portal: generation %d, entries %+v", inv.Generation, inv.Status.SinkExports)
	}
	expectCondition(t, inv.Status.Conditions, v1alpha1.ConditionSynced, metav1.ConditionFalse, v1alpha1.ReasonProgressing)
}

func expectCondition(t *testing.T, conds []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		t.Fatalf("no %s condition in %+v", typ, conds)
	}
	if c.Status != status || c.Reason != reason {
		t.Fatalf("%s = %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
	}
}
