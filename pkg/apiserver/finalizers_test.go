package apiserver_test

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestFinalizersOnCreate: the registry puts the controllers' finalizer on
// every new Target, ClusterTarget, Inventory and ClusterInventory, however
// it is created, once, beside the client's own; no controller runs here, so
// only the registry can have added it. Removing it by update is allowed
// (the controller restores it).
func TestFinalizersOnCreate(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	const hold = "example.dev/hold"
	mine := func(name string, finalizers ...string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Finalizers: finalizers}
	}
	check := func(what string, got []string, err error, want ...string) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: finalizers %q, want %q", what, got, want)
		}
	}

	tgt, err := api.Targets("fin").Create(ctx, &v1alpha1.Target{ObjectMeta: mine("t"),
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "p"}}}, metav1.CreateOptions{})
	check("Target", tgt.GetFinalizers(), err, v1alpha1.ItemsFinalizer)
	ctgt, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: mine("ct", hold),
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fin", Name: "p"}}}, metav1.CreateOptions{})
	check("ClusterTarget with its own finalizer", ctgt.GetFinalizers(), err, hold, v1alpha1.ItemsFinalizer)
	inv, err := api.Inventories("fin").Create(ctx, &v1alpha1.Inventory{ObjectMeta: mine("i", v1alpha1.ExportFinalizer)}, metav1.CreateOptions{})
	check("Inventory that names the finalizer itself", inv.GetFinalizers(), err, v1alpha1.ExportFinalizer)
	cinv, err := api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: mine("ci")}, metav1.CreateOptions{})
	check("ClusterInventory", cinv.GetFinalizers(), err, v1alpha1.ExportFinalizer)

	// Server-side apply creates through the update path.
	applied, err := api.Inventories("fin").Patch(ctx, "applied", types.ApplyPatchType,
		[]byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Inventory","metadata":{"name":"applied"}}`),
		metav1.PatchOptions{FieldManager: "test"})
	check("Inventory created by server-side apply", applied.GetFinalizers(), err, v1alpha1.ExportFinalizer)

	// Stored as returned; an update may remove it.
	got, err := api.Inventories("fin").Get(ctx, "i", metav1.GetOptions{})
	check("Inventory as stored", got.GetFinalizers(), err, v1alpha1.ExportFinalizer)
	got.Finalizers = nil
	updated, err := api.Inventories("fin").Update(ctx, got, metav1.UpdateOptions{})
	check("Inventory after an update removing it", updated.GetFinalizers(), err)
}
