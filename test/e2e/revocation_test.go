package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/e2e/framework"
)

// The namespaces of the revocation scenarios: a team that owns a sink and
// collects, and a platform team that exports into the team's sink.
const (
	revokeTeam     = "revoke-team"
	revokePlatform = "revoke-platform"
)

// TestRevokedReferences is the reconcile side of issue 6: admission let
// these objects in, then the grants or limits change under them. The
// requester recorded on each object is asked again (SubjectAccessReviews
// answered by the cluster's RBAC) on every exporter run and every sync of
// a target, and Scopes written later apply to existing objects:
//   - acceptance 1, end: revoking `use` on a sink turns the ClusterInventory
//     SinkForbidden within one exporter period, and nothing more is exported
//     there until the grant returns;
//   - revoking a Target's grants turns it ProfileForbidden at the next full
//     walk; it keeps its items and collects nothing more;
//   - a Scope created later denies an existing Inventory's sink
//     (ScopeSinkDenied) and an existing Target's kind (ScopeGVKDenied);
//   - missing references are SinkNotFound and ProfileNotFound;
//   - acceptance 6: /metrics counts the resolutions with the label values
//     of these steps, and the forbidden reconciles.
//
// The package's kollect-apiserver runs with --export-watchdog-period=5s and
// --resync-period=30s (main_test.go) so that "one period" is short.
func TestRevokedReferences(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, ns := range []string{revokeTeam, revokePlatform} {
		env.Kubectl(t, ctx, "create", "namespace", ns)
	}
	admin := env.KollectClient(t).KollectV1alpha1()
	dir := filepath.Join(fileSinkRoot, revokeTeam, "shared") // file:///shared
	must(t, os.MkdirAll(dir, 0o750), "creating the sink's directory")
	_, err := admin.SnapshotSinks(revokeTeam).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///shared"},
	}, metav1.CreateOptions{})
	must(t, err, "creating the team's sink")

	t.Run("revoked use on a sink stops the export there", func(t *testing.T) { revokedSink(t, ctx, dir) })
	t.Run("revoked grants stop a target", func(t *testing.T) { revokedTarget(t, ctx) })
	t.Run("a later scope denies existing objects", func(t *testing.T) { laterScope(t, ctx) })
	t.Run("missing references", func(t *testing.T) { missingReferences(t, ctx) })
	t.Run("resolution metrics", func(t *testing.T) { resolutionMetrics(t, ctx) })
}

func revokedSink(t *testing.T, ctx context.Context, dir string) {
	admin := env.KollectClient(t).KollectV1alpha1()
	platform := serviceAccount(t, ctx, revokePlatform, "platform")
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: revoke-e2e-cluster-inventories}
rules:
- apiGroups: [kollect.dev]
  resources: [clusterinventories]
  verbs: [get, list, watch, create, update, patch, delete]
# A ClusterInventory exports only what its requester may read.
- apiGroups: [kollect.dev]
  resources: [clusterinventoryitems]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: revoke-e2e-platform}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: revoke-e2e-cluster-inventories}
subjects:
- {kind: ServiceAccount, name: platform, namespace: %[2]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-shared, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [snapshotsinks]
  resourceNames: [shared]
  verbs: [use]
`, revokeTeam, revokePlatform))
	grant := fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: platform-uses-shared, namespace: %s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-shared}
subjects:
- {kind: ServiceAccount, name: platform, namespace: %s}
`, revokeTeam, revokePlatform)
	applyManifest(t, ctx, grant)
	t.Cleanup(func() {
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterrolebinding", "revoke-e2e-platform", "--ignore-not-found")
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterrole", "revoke-e2e-cluster-inventories", "--ignore-not-found")
	})
	waitCanI(t, ctx, platform, "create", "clusterinventories", "", true)

	rollup := &v1alpha1.ClusterInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "revoke-rollup"},
		Spec: v1alpha1.ClusterInventorySpec{
			SinkNamespace:    revokePlatform,
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "shared", Namespace: revokeTeam}},
			// No target: the export is the (empty) inventory itself.
			TargetRefs: []v1alpha1.LocalObjectReference{{Name: "revoke-none"}},
		},
	}
	// The grant may take a moment to reach the authorizer's cache.
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := platform.client.KollectV1alpha1().ClusterInventories().Create(ctx, rollup, metav1.CreateOptions{})
		return err == nil, nil
	})
	must(t, err, "the platform creating a ClusterInventory into the shared sink")
	t.Cleanup(func() {
		_ = env.KollectClient(t).KollectV1alpha1().ClusterInventories().Delete(context.Background(), rollup.Name, metav1.DeleteOptions{})
	})

	entryOf := func(ctx context.Context) (*v1alpha1.ClusterInventory, *v1alpha1.SinkExportStatus) {
		inv, err := admin.ClusterInventories().Get(ctx, rollup.Name, metav1.GetOptions{})
		if err != nil || len(inv.Status.SinkExports) == 0 {
			return inv, nil
		}
		return inv, &inv.Status.SinkExports[0]
	}
	eventually(ctx, t, "the first export", func(ctx context.Context) (bool, string) {
		_, e := entryOf(ctx)
		return e != nil && e.Outcome == v1alpha1.OutcomeExported, fmt.Sprintf("%+v", e)
	})
	document := exportedFile(t, dir)

	// team-b revokes the grant.
	env.Kubectl(t, ctx, "delete", "rolebinding", "platform-uses-shared", "-n", revokeTeam)
	revoked := time.Now()
	eventually(ctx, t, "SinkForbidden", func(ctx context.Context) (bool, string) {
		inv, e := entryOf(ctx)
		degraded := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionDegraded)
		return e != nil && e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonSinkForbidden &&
			degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonSinkForbidden, fmt.Sprintf("%+v %+v", e, degraded)
	})
	t.Logf("SinkForbidden %s after the RoleBinding was deleted", time.Since(revoked).Round(time.Second))
	inv, e := entryOf(ctx)
	if want := fmt.Sprintf(`"system:serviceaccount:%s:platform"`, revokePlatform); !strings.Contains(e.Message, want) {
		t.Errorf("the entry's message should name the requester %s: %s", want, e.Message)
	}
	waitWarning(t, ctx, "default", rollup.Name, v1alpha1.ReasonSinkForbidden)

	// A generation bump forces an export; a forbidden sink gets none.
	before, beforeInfo := readFile(t, document)
	inv.Spec.ExportMinInterval = &metav1.Duration{Duration: time.Hour}
	inv, err = admin.ClusterInventories().Update(ctx, inv, metav1.UpdateOptions{})
	must(t, err, "bumping the generation")
	eventually(ctx, t, "the forbidden sink observed the new generation", func(ctx context.Context) (bool, string) {
		_, e := entryOf(ctx)
		return e != nil && e.ObservedGeneration == inv.Generation && e.Reason == v1alpha1.ReasonSinkForbidden, fmt.Sprintf("%+v", e)
	})
	time.Sleep(6 * time.Second) // one more exporter period
	after, afterInfo := readFile(t, document)
	if !bytes.Equal(before, after) || !beforeInfo.ModTime().Equal(afterInfo.ModTime()) {
		t.Errorf("the forbidden sink was written: %s → %s", beforeInfo.ModTime(), afterInfo.ModTime())
	}

	// The grant returns: the pending generation is exported.
	applyManifest(t, ctx, grant)
	eventually(ctx, t, "exported again after the grant returned", func(ctx context.Context) (bool, string) {
		_, e := entryOf(ctx)
		return e != nil && e.Outcome == v1alpha1.OutcomeExported && e.ObservedGeneration == inv.Generation, fmt.Sprintf("%+v", e)
	})
	if again, _ := readFile(t, document); bytes.Equal(before, again) {
		t.Error("the new generation was not written after the grant returned")
	}
}

func revokedTarget(t *testing.T, ctx context.Context) {
	admin := env.KollectClient(t).KollectV1alpha1()
	kube := env.Kube(t)
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: configmaps, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes: [{name: data, path: "{.data}"}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: first, namespace: %[1]s, labels: {app: revoke}}
data: {k: v}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: collects-configmaps, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [targets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [kollect.dev]
  resources: [profiles]
  verbs: [use]
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: collector, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: collects-configmaps}
subjects:
- {kind: ServiceAccount, name: collector, namespace: %[1]s}
`, revokeTeam))
	collector := serviceAccount(t, ctx, revokeTeam, "collector")
	waitCanI(t, ctx, collector, "create", "targets", revokeTeam, true)
	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "revoke"}}}}
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := collector.client.KollectV1alpha1().Targets(revokeTeam).Create(ctx, target, metav1.CreateOptions{})
		return err == nil, nil
	})
	must(t, err, "the collector ServiceAccount creating its Target")
	items := func(ctx context.Context) int {
		list, err := admin.InventoryItems(revokeTeam).List(ctx, metav1.ListOptions{})
		if err != nil {
			return -1
		}
		return len(list.Items)
	}
	eventually(ctx, t, "the first item", func(ctx context.Context) (bool, string) {
		n := items(ctx)
		return n == 1, fmt.Sprint(n)
	})

	env.Kubectl(t, ctx, "delete", "rolebinding", "collector", "-n", revokeTeam)
	revoked := time.Now()
	eventually(ctx, t, "ProfileForbidden", func(ctx context.Context) (bool, string) {
		tg, err := admin.Targets(revokeTeam).Get(ctx, target.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady)
		degraded := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionDegraded)
		stopped := ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.ReasonProfileForbidden
		flagged := degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonProfileForbidden
		return stopped && flagged, fmt.Sprintf("%+v", tg.Status.Conditions)
	})
	t.Logf("ProfileForbidden %s after the RoleBinding was deleted (one full walk: --resync-period=30s)", time.Since(revoked).Round(time.Second))
	waitWarning(t, ctx, revokeTeam, target.Name, v1alpha1.ReasonProfileForbidden)

	// The items stay; nothing new is collected.
	// With data, like the first: the Profile's {.data} would extract it
	// if collection still ran.
	_, err = kube.CoreV1().ConfigMaps(revokeTeam).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "second", Labels: map[string]string{"app": "revoke"}},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	must(t, err, "a second matching ConfigMap")
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := items(ctx); n != 1 {
			t.Fatalf("%d items after the grant was revoked, want the 1 collected before", n)
		}
		time.Sleep(time.Second)
	}
}

func laterScope(t *testing.T, ctx context.Context) {
	admin := env.KollectClient(t).KollectV1alpha1()
	_, err := admin.Inventories(revokeTeam).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "shared"}}},
	}, metav1.CreateOptions{})
	must(t, err, "the team's Inventory")
	entry := func(ctx context.Context) *v1alpha1.SinkExportStatus {
		inv, err := admin.Inventories(revokeTeam).Get(ctx, "team", metav1.GetOptions{})
		if err != nil || len(inv.Status.SinkExports) == 0 {
			return nil
		}
		return &inv.Status.SinkExports[0]
	}
	eventually(ctx, t, "the team's export", func(ctx context.Context) (bool, string) {
		e := entry(ctx)
		return e != nil && e.Outcome == v1alpha1.OutcomeExported, fmt.Sprintf("%+v", e)
	})

	// The platform team limits the namespace afterwards: only apps kinds,
	// only the snapshot sink "archive".
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: later, namespace: %s}
spec:
  allowedGVKs: [{group: apps, kind: "*"}]
  snapshotSinkRefs: [archive]
`, revokeTeam))
	eventually(ctx, t, "ScopeSinkDenied on the existing Inventory", func(ctx context.Context) (bool, string) {
		e := entry(ctx)
		return e != nil && e.Reason == v1alpha1.ReasonScopeSinkDenied && strings.Contains(e.Message, `Scope "later"`), fmt.Sprintf("%+v", e)
	})
	eventually(ctx, t, "ScopeGVKDenied on the existing Target", func(ctx context.Context) (bool, string) {
		tg, err := admin.Targets(revokeTeam).Get(ctx, "configmaps", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		degraded := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionDegraded)
		return degraded != nil && degraded.Reason == v1alpha1.ReasonScopeGVKDenied && strings.Contains(degraded.Message, "core/ConfigMap"), fmt.Sprintf("%+v", degraded)
	})
	// Lift the limit again: the other scenarios in the namespace need none.
	must(t, admin.Scopes(revokeTeam).Delete(ctx, "later", metav1.DeleteOptions{}), "deleting the Scope")
	eventually(ctx, t, "the Inventory exports again without the Scope", func(ctx context.Context) (bool, string) {
		e := entry(ctx)
		return e != nil && e.Outcome != v1alpha1.OutcomeFailed, fmt.Sprintf("%+v", e)
	})
}

func missingReferences(t *testing.T, ctx context.Context) {
	admin := env.KollectClient(t).KollectV1alpha1()
	_, err := admin.Inventories(revokeTeam).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "missing-sink"},
		Spec:       v1alpha1.InventorySpec{DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "nowhere"}}},
	}, metav1.CreateOptions{})
	must(t, err, "an Inventory of a sink that does not exist")
	eventually(ctx, t, "SinkNotFound", func(ctx context.Context) (bool, string) {
		inv, err := admin.Inventories(revokeTeam).Get(ctx, "missing-sink", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		degraded := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionDegraded)
		return degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonSinkNotFound, fmt.Sprintf("%+v", degraded)
	})

	must(t, admin.Profiles(revokeTeam).Delete(ctx, "configmaps", metav1.DeleteOptions{}), "deleting the Target's Profile")
	eventually(ctx, t, "ProfileNotFound", func(ctx context.Context) (bool, string) {
		tg, err := admin.Targets(revokeTeam).Get(ctx, "configmaps", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		degraded := meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionDegraded)
		return degraded != nil && degraded.Reason == v1alpha1.ReasonProfileNotFound, fmt.Sprintf("%+v", degraded)
	})
}

// resolutionMetrics is acceptance point 6, after the steps above.
func resolutionMetrics(t *testing.T, ctx context.Context) {
	cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Kollect))
	must(t, err, "a client of kollect-apiserver")
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	must(t, err, "GET /metrics")
	metrics := string(body)
	for _, want := range []struct{ kind, ref, result string }{
		{"ClusterInventory", "SnapshotSink", "ok"},
		{"ClusterInventory", "SnapshotSink", "forbidden"},
		{"Inventory", "SnapshotSink", "ok"},
		{"Inventory", "SnapshotSink", "forbidden"},
		{"Inventory", "DatabaseSink", "not_found"},
		{"Target", "Profile", "ok"},
		{"Target", "Profile", "forbidden"},
		{"Target", "Profile", "not_found"},
	} {
		if v := framework.SampleSum(metrics, "kollect_static_ref_resolution_total", `kind="`+want.kind+`"`, `ref_type="`+want.ref+`"`, `result="`+want.result+`"`); v < 1 {
			t.Errorf("kollect_static_ref_resolution_total{kind=%q,ref_type=%q,result=%q} = %v, want at least 1", want.kind, want.ref, want.result, v)
		}
	}
	for _, kind := range []string{"ClusterInventory", "Inventory", "Target"} {
		if v := framework.SampleSum(metrics, "kollect_reconcile_errors_total", `kind="`+kind+`"`, `error_class="forbidden"`); v < 1 {
			t.Errorf(`kollect_reconcile_errors_total{kind=%q,error_class="forbidden"} = %v, want at least 1`, kind, v)
		}
	}
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "kollect_static_ref_resolution_total{") {
			t.Log(line)
		}
	}
}

// waitWarning waits for a Warning Event with reason about the named object.
func waitWarning(t *testing.T, ctx context.Context, namespace, name, reason string) {
	t.Helper()
	kube := env.Kube(t)
	eventually(ctx, t, "a Warning Event "+reason+" about "+name, func(ctx context.Context) (bool, string) {
		list, err := kube.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Regarding.Name == name && e.Reason == reason && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events in %s", len(list.Items), namespace)
	})
}

// exportedFile waits for the one document a file sink holds and returns its path.
func exportedFile(t *testing.T, dir string) string {
	t.Helper()
	var found string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return found != "", filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && !strings.HasPrefix(d.Name(), ".") {
				found = p
			}
			return err
		})
	})
	must(t, err, "the exported document in "+dir)
	return found
}

func readFile(t *testing.T, path string) ([]byte, os.FileInfo) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err, "reading the exported document")
	info, err := os.Stat(path)
	must(t, err, "stat of the exported document")
	return b, info
}

// eventually polls cond until it holds; on timeout it fails with the last
// thing cond said.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ok, said := cond(ctx)
		last = said
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within 2m; last: %s", what, last)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
