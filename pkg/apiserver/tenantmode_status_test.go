package apiserver_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// TestTenantModeStatus: with --tenant-mode, writing the status of a cluster
// kind is an update like any other and is refused (update, merge patch and
// apply of /status), even for a cluster admin; the server's own loopback
// client, which its controllers report through, may still write it.
func TestTenantModeStatus(t *testing.T) {
	ctx := tenancyContext(t)
	before := testserver.Start(t, testserver.Options{})
	old := before.Client.KollectV1alpha1()
	if _, err := old.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "old"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "p"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := old.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	srv := testserver.Start(t, testserver.Options{TenantMode: true, EtcdEndpoint: before.EtcdEndpoint,
		Users: map[string]user.Info{"admin": &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}})
	admin := srv.ClientFor("admin").KollectV1alpha1()

	ct, err := admin.ClusterTargets().Get(ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct.Status.Collection = &v1alpha1.CollectionObservation{ObservedGeneration: 1, ItemCount: 7}
	_, err = admin.ClusterTargets().UpdateStatus(ctx, ct, metav1.UpdateOptions{})
	expectForbidden(t, err, tenancy.TenantModeMessage)
	_, err = admin.ClusterTargets().Patch(ctx, "old", types.MergePatchType, []byte(`{"status":{"collection":{"itemCount":7}}}`), metav1.PatchOptions{}, "status")
	expectForbidden(t, err, tenancy.TenantModeMessage)
	_, err = admin.ClusterInventories().Patch(ctx, "old", types.ApplyPatchType,
		[]byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"ClusterInventory","metadata":{"name":"old"},"status":{"itemCount":3}}`),
		metav1.PatchOptions{FieldManager: "forger"}, "status")
	expectForbidden(t, err, tenancy.TenantModeMessage)
	if got, err := admin.ClusterTargets().Get(ctx, "old", metav1.GetOptions{}); err != nil || got.Status.Collection != nil {
		t.Errorf("after the refused writes: %v, collection %+v, want none", err, got.Status.Collection)
	}

	// The controllers' identity still reports.
	got, err := srv.Client.KollectV1alpha1().ClusterTargets().UpdateStatus(ctx, ct, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status write by the loopback client: %v", err)
	}
	if got.Status.Collection == nil || got.Status.Collection.ItemCount != 7 {
		t.Errorf("status.collection %+v, want itemCount 7", got.Status.Collection)
	}
}
