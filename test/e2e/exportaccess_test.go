package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

const exportAccessNS = "export-access"

// TestExportNeedsItemAccess is acceptance point 4 of issue 12, through the
// real kube-apiserver and its RBAC: a user who may `use` a sink but not
// `list` the namespace's inventoryitems cannot create an Inventory (403
// naming the verb and the resource); granted, the create succeeds within
// 2 s; revoked, the exporter stops (ItemsForbidden); and changing the
// targetSelector is a change of references, so a user who lost `use` on
// the sink cannot make it, while suspending needs nothing.
func TestExportNeedsItemAccess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env.Kubectl(t, ctx, "create", "namespace", exportAccessNS)
	admin := env.KollectClient(t).KollectV1alpha1()
	// The sink's host never resolves: this test is about what may be
	// exported, not about delivering it.
	_, err := admin.EventSinks(exportAccessNS).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec:       v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "https://hooks.export-access.invalid/events"},
	}, metav1.CreateOptions{})
	must(t, err, "the sink")

	exporter := serviceAccount(t, ctx, exportAccessNS, "exporter")
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: inventories-and-use, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [inventories]
  verbs: [get, list, watch, create, update, patch, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-hook, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [eventsinks]
  resourceNames: [hook]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-items, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [inventoryitems]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: exporter-inventories, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: inventories-and-use}
subjects:
- {kind: ServiceAccount, name: exporter, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: exporter-uses-hook, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-hook}
subjects:
- {kind: ServiceAccount, name: exporter, namespace: %[1]s}
`, exportAccessNS))
	readItems := fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: exporter-reads-items, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-items}
subjects:
- {kind: ServiceAccount, name: exporter, namespace: %[1]s}
`, exportAccessNS)
	waitCanI(t, ctx, exporter, "create", "inventories", exportAccessNS, true)
	waitCanIUseHook(t, ctx, exporter, true)
	if canI(t, ctx, exporter, "list", "inventoryitems", exportAccessNS) {
		t.Fatal("the exporter ServiceAccount may list inventoryitems before the grant")
	}
	invs := exporter.client.KollectV1alpha1().Inventories(exportAccessNS)
	inv := &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "exports"},
		Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "hook"}},
			TargetSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}

	// Refused without list on the items.
	_, err = invs.Create(ctx, inv, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an Inventory by a user who may not list the items: %v, want 403", err)
	}
	for _, want := range []string{"spec:", `user "system:serviceaccount:` + exportAccessNS + `:exporter"`, `the verb "list"`,
		`inventoryitems.kollect.dev in namespace "` + exportAccessNS + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal should name %s: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), `EventSink "hook"`) {
		t.Errorf("the user holds use on the sink; only the list is missing: %v", err)
	}
	t.Logf("refused: %v", err)

	// Granted: the create succeeds within 2 s.
	applyManifest(t, ctx, readItems)
	granted := time.Now()
	var created *v1alpha1.Inventory
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		created, err = invs.Create(ctx, inv, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	must(t, err, "creating the Inventory within 2s of the grant of list on inventoryitems")
	t.Logf("accepted %s after the RoleBinding was created", time.Since(granted).Round(10*time.Millisecond))
	if r := created.Status.Requester; r == nil || r.Username != "system:serviceaccount:"+exportAccessNS+":exporter" || r.RecordedAt == nil {
		t.Errorf("status.requester %+v, want the exporter ServiceAccount with recordedAt", r)
	}

	entry := func(ctx context.Context) (*v1alpha1.Inventory, *v1alpha1.SinkExportStatus) {
		got, err := admin.Inventories(exportAccessNS).Get(ctx, inv.Name, metav1.GetOptions{})
		if err != nil || len(got.Status.SinkExports) == 0 {
			return got, nil
		}
		return got, &got.Status.SinkExports[0]
	}
	eventually(ctx, t, "the exporter's first entry", func(ctx context.Context) (bool, string) {
		_, e := entry(ctx)
		return e != nil && e.Reason != v1alpha1.ReasonItemsForbidden, fmt.Sprintf("%+v", e)
	})

	// Revoked: the exporter stops, saying why, and resumes on a new grant.
	env.Kubectl(t, ctx, "delete", "rolebinding", "exporter-reads-items", "-n", exportAccessNS)
	revoked := time.Now()
	eventually(ctx, t, "ItemsForbidden", func(ctx context.Context) (bool, string) {
		got, e := entry(ctx)
		if got == nil {
			return false, "no inventory"
		}
		degraded := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionDegraded)
		return e != nil && e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonItemsForbidden &&
			strings.Contains(e.Message, "inventoryitems.kollect.dev") &&
			degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonItemsForbidden, fmt.Sprintf("%+v %+v", e, degraded)
	})
	t.Logf("ItemsForbidden %s after the RoleBinding was deleted (exporter period 5s)", time.Since(revoked).Round(100*time.Millisecond))
	waitWarning(t, ctx, exportAccessNS, inv.Name, v1alpha1.ReasonItemsForbidden)
	applyManifest(t, ctx, readItems)
	eventually(ctx, t, "no longer ItemsForbidden after the grant returned", func(ctx context.Context) (bool, string) {
		_, e := entry(ctx)
		return e != nil && e.Reason != v1alpha1.ReasonItemsForbidden, fmt.Sprintf("%+v", e)
	})

	// The user loses use on the sink: the selection cannot change, since
	// that needs use on every sink again; suspending is no reference change.
	// Each attempt asks for another selection, so that every one is a
	// change of references, checked within 2 s of the revocation.
	env.Kubectl(t, ctx, "delete", "rolebinding", "exporter-uses-hook", "-n", exportAccessNS)
	lost := time.Now()
	var reselect error
	var refused string
	attempt := 0
	cur, err := invs.Get(ctx, inv.Name, metav1.GetOptions{})
	must(t, err, "reading the Inventory")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		attempt++
		refused = fmt.Sprintf("db-%d", attempt)
		next := cur.DeepCopy()
		next.ResourceVersion = "" // the exporters write status meanwhile
		next.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": refused}}
		var updated *v1alpha1.Inventory
		if updated, reselect = invs.Update(ctx, next, metav1.UpdateOptions{}); reselect == nil {
			cur = updated // still within the authorizer's last allow
		}
		return apierrors.IsForbidden(reselect), nil
	})
	must(t, err, fmt.Sprintf("changing targetSelector without use on the sink should be refused within 2s (last: %v)", reselect))
	t.Logf("selector change refused %s after the RoleBinding was deleted (attempt %d): %v", time.Since(lost).Round(10*time.Millisecond), attempt, reselect)
	for _, want := range []string{"spec.eventSinkRefs[0]", `EventSink "hook"`, `"use"`} {
		if !strings.Contains(reselect.Error(), want) {
			t.Errorf("the refusal should name %s: %v", want, reselect)
		}
	}
	cur.Spec.Suspend = true
	cur.ResourceVersion = ""
	suspended, err := invs.Update(ctx, cur, metav1.UpdateOptions{})
	must(t, err, "suspending, which changes no reference")
	if suspended.Spec.TargetSelector.MatchLabels["app"] == refused {
		t.Errorf("the refused selector was stored: %+v", suspended.Spec.TargetSelector)
	}
	if r := suspended.Status.Requester; r == nil || !r.RecordedAt.Equal(cur.Status.Requester.RecordedAt) {
		t.Errorf("suspending re-recorded the requester: %+v, was %+v", r, cur.Status.Requester)
	}
}

// waitCanIUseHook waits until kube-apiserver's RBAC answers want to
// whether who may use the EventSink hook (granted by resource name).
func waitCanIUseHook(t *testing.T, ctx context.Context, who identity, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, _, _ := env.Cluster.Kubectl(ctx, "--kubeconfig", who.kubeconfig, "auth", "can-i", "use", "eventsinks.kollect.dev/hook", "-n", exportAccessNS)
		return (strings.TrimSpace(out) == "yes") == want, nil
	})
	if err != nil {
		t.Fatalf("%s can-i use eventsinks/hook never became %v", who.name, want)
	}
}
