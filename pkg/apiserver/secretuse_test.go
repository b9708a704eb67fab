package apiserver_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	typed "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/tenancy"
)

// TestSinkSecretUse: a sink's Secret needs `get` for the user who sets it,
// the sink records that user (with the time) as its requester, and every
// later change of where or how the Secret is sent is checked again; the
// requester cannot be written by clients and survives /status writes.
func TestSinkSecretUse(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "get", resource: "secrets", namespace: "team-a", name: "hook-token"},
		{user: "carol", verb: "get", resource: "secrets", namespace: "team-a", name: "hook-token"},
	})
	ctx := tenancyContext(t)
	api := func(who string) typed.EventSinkInterface {
		return srv.ClientFor(who).KollectV1alpha1().EventSinks("team-a")
	}
	hook := &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "https://hooks.example.com/kollect",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-token"}},
		Status: v1alpha1.SinkStatus{Requester: &v1alpha1.RequesterInfo{Username: "mallory"}},
	}

	_, err := api("bob").Create(ctx, hook, metav1.CreateOptions{})
	expectForbidden(t, err, `user "bob"`, "spec.secretRef.name", `Secret "hook-token"`, `namespace "team-a"`, `the verb "get"`)
	before := time.Now().Add(-time.Second)
	created, err := api("alice").Create(ctx, hook, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("alice may get the Secret: %v", err)
	}
	expectRequester(t, "create", created.Status.Requester, "alice")
	if at := created.Status.Requester.RecordedAt; at == nil || at.Time.Before(before.Truncate(time.Second)) || at.Time.After(time.Now()) {
		t.Errorf("recordedAt %v, want the time of the create", at)
	}

	// bob may update sinks but not read the Secret: relabelling is fine,
	// sending alice's Secret elsewhere is not.
	relabelled := created.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	got, err := api("bob").Update(ctx, relabelled, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("bob relabels: %v", err)
	}
	expectRequester(t, "relabel", got.Status.Requester, "alice")
	moved := got.DeepCopy()
	moved.Spec.Endpoint = "https://attacker.example.com/collect"
	_, err = api("bob").Update(ctx, moved, metav1.UpdateOptions{})
	expectForbidden(t, err, `user "bob"`, `Secret "hook-token"`, `"get"`)
	_, err = api("bob").Patch(ctx, "hook", types.MergePatchType, []byte(`{"spec":{"tls":{"insecureSkipVerify":true}}}`), metav1.PatchOptions{})
	expectForbidden(t, err, `user "bob"`, `Secret "hook-token"`)

	// Status writes keep the requester, whatever they send.
	got.Status.Requester = &v1alpha1.RequesterInfo{Username: "mallory", Groups: []string{"system:masters"}}
	got, err = api("bob").UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	expectRequester(t, "status update", got.Status.Requester, "alice")

	// carol, who may get the Secret, re-affirms: she becomes the requester.
	time.Sleep(time.Second) // recordedAt has a resolution of one second
	got, err = api("carol").Patch(ctx, "hook", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+tenancy.AnnotationReaffirm+`":"1"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("carol re-affirms: %v", err)
	}
	expectRequester(t, "re-affirmed", got.Status.Requester, "carol")
	if !got.Status.Requester.RecordedAt.After(created.Status.Requester.RecordedAt.Time) {
		t.Errorf("re-affirming keeps recordedAt %v, want a later time than %v", got.Status.Requester.RecordedAt, created.Status.Requester.RecordedAt)
	}
	// bob may not re-affirm: it is checked like a change of Secret.
	_, err = api("bob").Patch(ctx, "hook", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+tenancy.AnnotationReaffirm+`":"2"}}}`), metav1.PatchOptions{})
	expectForbidden(t, err, `user "bob"`, `Secret "hook-token"`)

	// Without a Secret there is nothing to check.
	if _, err := srv.ClientFor("bob").KollectV1alpha1().SnapshotSinks("team-a").Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://git.example.com/inventory.git",
			Git: &v1alpha1.GitSinkConfig{Branch: "main"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a sink without a Secret: %v", err)
	}
	// The other families are checked the same way.
	_, err = srv.ClientFor("bob").KollectV1alpha1().DatabaseSinks("team-a").Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, SecretRef: &v1alpha1.LocalObjectReference{Name: "db"},
			Postgres: &v1alpha1.PostgresSinkConfig{Table: "inventory"}},
	}, metav1.CreateOptions{})
	expectForbidden(t, err, `databasesinks.kollect.dev "portal"`, `Secret "db"`, "spec.secretRef.name")
	_, err = srv.ClientFor("bob").KollectV1alpha1().SnapshotSinks("team-a").Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "git"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://git.example.com/inventory.git",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "git-token"}, Git: &v1alpha1.GitSinkConfig{Branch: "main"}},
	}, metav1.CreateOptions{})
	expectForbidden(t, err, `snapshotsinks.kollect.dev "git"`, `Secret "git-token"`)
}

// TestInventoryNeedsItems: an Inventory needs `list` on its namespace's
// inventoryitems, a ClusterInventory on clusterinventoryitems across the
// cluster; changing the target selection is a change of references,
// checked (`use` on the sinks too) against the updating user.
func TestInventoryNeedsItems(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "use", namespace: "team-a"},
		{user: "alice", verb: "list", resource: "inventoryitems", namespace: "team-a"},
		{user: "bob", verb: "use", namespace: "team-a"},
		{user: "carol", verb: "list", resource: "inventoryitems", namespace: "team-a"},
		{user: "platform", verb: "use"},
		{user: "platform", verb: "list", resource: "inventoryitems"},
		{user: "carol", verb: "list", resource: "clusterinventoryitems"},
	})
	ctx := tenancyContext(t)
	inv := &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "exports"},
		Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}},
			TargetSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	invs := func(who string) typed.InventoryInterface {
		return srv.ClientFor(who).KollectV1alpha1().Inventories("team-a")
	}

	_, err := invs("bob").Create(ctx, inv, metav1.CreateOptions{})
	expectForbidden(t, err, `user "bob"`, "spec:", `the verb "list"`, `inventoryitems.kollect.dev in namespace "team-a"`)
	if strings.Contains(err.Error(), "use") && strings.Contains(err.Error(), `SnapshotSink "audit"`) {
		t.Errorf("bob holds use on the sink; only the list should be reported: %v", err)
	}
	created, err := invs("alice").Create(ctx, inv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("alice may use the sink and list the items: %v", err)
	}
	expectRequester(t, "create", created.Status.Requester, "alice")

	// carol may list the items but not use the sink: she may suspend the
	// Inventory, not change what it selects.
	suspended := created.DeepCopy()
	suspended.Spec.Suspend = true
	got, err := invs("carol").Update(ctx, suspended, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("carol suspends: %v", err)
	}
	expectRequester(t, "suspend", got.Status.Requester, "alice")
	got.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	_, err = invs("carol").Update(ctx, got, metav1.UpdateOptions{})
	expectForbidden(t, err, `user "carol"`, `SnapshotSink "audit"`, `"use"`, "spec.snapshotSinkRefs[0]")
	// bob may use the sink but not list the items.
	_, err = invs("bob").Update(ctx, got, metav1.UpdateOptions{})
	expectForbidden(t, err, `user "bob"`, `inventoryitems.kollect.dev`)
	got, err = invs("alice").Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("alice changes the selection: %v", err)
	}
	expectRequester(t, "selection change", got.Status.Requester, "alice")

	// A ClusterInventory reads the cluster's items: list of
	// clusterinventoryitems across the cluster; inventoryitems (platform's
	// grant) are not enough.
	cinv := &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "rollup"},
		Spec: v1alpha1.ClusterInventorySpec{TargetRefs: []v1alpha1.LocalObjectReference{{Name: "deployments"}}}}
	_, err = srv.ClientFor("platform").KollectV1alpha1().ClusterInventories().Create(ctx, cinv, metav1.CreateOptions{})
	expectForbidden(t, err, `user "platform"`, `clusterinventoryitems.kollect.dev across the cluster`)
	created2, err := srv.ClientFor("carol").KollectV1alpha1().ClusterInventories().Create(ctx, cinv, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("carol may list clusterinventoryitems: %v", err)
	}
	// Adding a target is a change of the selection, checked again.
	created2.Spec.TargetRefs = append(created2.Spec.TargetRefs, v1alpha1.LocalObjectReference{Name: "secrets"})
	_, err = srv.ClientFor("platform").KollectV1alpha1().ClusterInventories().Update(ctx, created2, metav1.UpdateOptions{})
	expectForbidden(t, err, `user "platform"`, "clusterinventoryitems")
}
