package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// The namespaces of the tenancy scenarios: two teams and a platform team.
const (
	tenancyA        = "tenancy-a"
	tenancyB        = "tenancy-b"
	tenancyPlatform = "tenancy-platform"
)

// TestTenancy shows the admission side of issue 6 through the real
// kube-apiserver: references are checked against the requesting user with
// the delegated authorizer (SubjectAccessReviews answered by the cluster's
// RBAC), and Scopes and ClusterScopes bound what may be written.
func TestTenancy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for _, ns := range []string{tenancyA, tenancyB, tenancyPlatform} {
		env.Kubectl(t, ctx, "create", "namespace", ns)
	}
	// An editor of team A: the built-in edit role in tenancy-a only.
	editor := serviceAccount(t, ctx, tenancyA, "editor")
	env.Kubectl(t, ctx, "create", "rolebinding", "editor", "-n", tenancyA, "--clusterrole=edit", "--serviceaccount="+tenancyA+":editor")
	waitCanI(t, ctx, editor, "create", "inventories", tenancyA, true)

	t.Run("cluster inventory needs use on the sink", func(t *testing.T) { clusterInventoryNeedsUse(t, ctx, editor) })
	t.Run("target needs list on what it collects", func(t *testing.T) { targetNeedsList(t, ctx, editor) })
	t.Run("scope floor", func(t *testing.T) { scopeFloor(t, ctx) })
	t.Run("cluster target references", func(t *testing.T) { clusterTargetReferences(t, ctx) })
}

// clusterInventoryNeedsUse is acceptance point 1: a team editor cannot
// create a ClusterInventory at all; a platform user who may create them is
// refused a sink of team-b until team-b grants `use` on it with a
// RoleBinding, and is then recorded as the requester.
func clusterInventoryNeedsUse(t *testing.T, ctx context.Context, editor identity) {
	admin := env.KollectClient(t).KollectV1alpha1()
	if _, err := admin.SnapshotSinks(tenancyB).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "team-git"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file://" + t.TempDir()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	platform := serviceAccount(t, ctx, tenancyPlatform, "platform")
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: tenancy-e2e-cluster-inventories}
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
metadata: {name: tenancy-e2e-platform}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: tenancy-e2e-cluster-inventories}
subjects:
- {kind: ServiceAccount, name: platform, namespace: %s}
`, tenancyPlatform))
	t.Cleanup(func() {
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterrolebinding", "tenancy-e2e-platform", "--ignore-not-found")
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterrole", "tenancy-e2e-cluster-inventories", "--ignore-not-found")
	})
	waitCanI(t, ctx, platform, "create", "clusterinventories", "", true)

	rollup := &v1alpha1.ClusterInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "tenancy-rollup"},
		Spec: v1alpha1.ClusterInventorySpec{
			SinkNamespace:    tenancyPlatform,
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "team-git", Namespace: tenancyB}},
		},
	}
	// edit in one namespace does not reach the cluster kinds (kube RBAC,
	// through the aggregator).
	_, err := editor.client.KollectV1alpha1().ClusterInventories().Create(ctx, rollup, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("an editor of %s creating a ClusterInventory: %v, want 403", tenancyA, err)
	}

	// The platform user may create ClusterInventories, but not use team-b's sink.
	_, err = platform.client.KollectV1alpha1().ClusterInventories().Create(ctx, rollup, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("platform without use on %s/team-git: %v, want 403", tenancyB, err)
	}
	for _, want := range []string{`SnapshotSink "team-git"`, fmt.Sprintf("namespace %q", tenancyB), `"use"`, "spec.snapshotSinkRefs[0]",
		fmt.Sprintf("system:serviceaccount:%s:platform", tenancyPlatform)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal should name %s: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)

	// team-b shares exactly that sink with the platform team.
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-team-git, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [snapshotsinks]
  resourceNames: [team-git]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: platform-uses-team-git, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-team-git}
subjects:
- {kind: ServiceAccount, name: platform, namespace: %[2]s}
`, tenancyB, tenancyPlatform))
	var created *v1alpha1.ClusterInventory
	// The delegated authorizer caches a denial for 10s.
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		created, err = platform.client.KollectV1alpha1().ClusterInventories().Create(ctx, rollup, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("platform after team-b's RoleBinding: %v", err)
	}
	t.Cleanup(func() {
		_ = env.KollectClient(t).KollectV1alpha1().ClusterInventories().Delete(context.Background(), rollup.Name, metav1.DeleteOptions{})
	})
	r := created.Status.Requester
	if r == nil || r.Username != "system:serviceaccount:"+tenancyPlatform+":platform" || !slices.Contains(r.Groups, "system:serviceaccounts:"+tenancyPlatform) {
		t.Errorf("status.requester %+v, want the platform ServiceAccount with its groups", r)
	}
}

// targetNeedsList is acceptance point 2: a user who cannot list Secrets in
// the namespace cannot create a Target collecting them, opt-in annotation
// or not; an editor of the namespace, who can, may.
func targetNeedsList(t *testing.T, ctx context.Context, editor identity) {
	admin := env.KollectClient(t).KollectV1alpha1()
	if _, err := admin.Profiles(tenancyA).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "secrets", Annotations: map[string]string{v1alpha1.AnnotationCollectSecrets: "true"}},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"},
			Attributes: []v1alpha1.Attribute{{Name: "type", Path: "{.type}"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// May manage Targets and use Profiles, but not read Secrets.
	collector := serviceAccount(t, ctx, tenancyA, "collector")
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: targets-only, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [targets]
  verbs: [get, list, watch, create, update, patch, delete]
- apiGroups: [kollect.dev]
  resources: [profiles]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: collector, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: targets-only}
subjects:
- {kind: ServiceAccount, name: collector, namespace: %[1]s}
`, tenancyA))
	waitCanI(t, ctx, collector, "create", "targets", tenancyA, true)
	if out, _, _ := env.Cluster.Kubectl(ctx, "--kubeconfig", collector.kubeconfig, "auth", "can-i", "list", "secrets", "-n", tenancyA); strings.TrimSpace(out) != "no" {
		t.Fatalf("kubectl auth can-i list secrets as the collector ServiceAccount: %q, want no", out)
	}

	target := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "secrets"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "secrets"}}}
	_, err := collector.client.KollectV1alpha1().Targets(tenancyA).Create(ctx, target, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a Target collecting Secrets by a user who cannot list them: %v, want 403", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("may not list secrets in namespace %q", tenancyA)) {
		t.Errorf("the refusal should name the verb, resource and namespace: %v", err)
	}
	t.Logf("refused: %v", err)

	// The editor (edit in tenancy-a) can list Secrets there, and so may
	// collect them.
	if _, err := editor.client.KollectV1alpha1().Targets(tenancyA).Create(ctx, target, metav1.CreateOptions{}); err != nil {
		t.Fatalf("an editor, who may list secrets: %v", err)
	}
	_ = admin.Targets(tenancyA).Delete(ctx, target.Name, metav1.DeleteOptions{})
}

// scopeFloor is acceptance point 3: an Inventory interval below its
// namespace's Scope floor is rejected, naming the floor and the Scope.
func scopeFloor(t *testing.T, ctx context.Context) {
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: limits, namespace: %s}
spec: {minExportInterval: 5m}
`, tenancyA))
	stderr := applyFails(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: too-fast, namespace: %s}
spec:
  exportMinInterval: 1m
`, tenancyA))
	for _, want := range []string{"spec.exportMinInterval", "below the floor of 5m0s", `Scope "limits"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kubectl's error should contain %q:\n%s", want, stderr)
		}
	}
	t.Logf("kubectl apply: %s", strings.TrimSpace(stderr))
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: slow-enough, namespace: %s}
spec:
  exportMinInterval: 10m
`, tenancyA))
}

// clusterTargetReferences is acceptance point 4: a ClusterTarget without
// profileRef.namespace is rejected, and so is one pointing into a namespace
// the ClusterScope does not let cluster kinds reference.
func clusterTargetReferences(t *testing.T, ctx context.Context) {
	stderr := createFails(t, ctx, `
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: tenancy-no-namespace}
spec: {profileRef: {name: configmaps}}
`)
	if !strings.Contains(stderr, "spec.profileRef.namespace") {
		t.Errorf("stderr lacks spec.profileRef.namespace:\n%s", stderr)
	}

	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: configmaps, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes: [{name: data, path: "{.data}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: ClusterScope
metadata: {name: tenancy-e2e}
spec:
  referenceNamespaces: [%[1]s]
`, tenancyPlatform))
	t.Cleanup(func() {
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clusterscope", "tenancy-e2e", "--ignore-not-found")
	})
	stderr = createFails(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: tenancy-team-profile}
spec: {profileRef: {name: secrets, namespace: %s}, includeNamespaces: [%[1]s]}
`, tenancyA))
	for _, want := range []string{"spec.profileRef.namespace", fmt.Sprintf("namespace %q is not in the referenceNamespaces", tenancyA), `ClusterScope "tenancy-e2e"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("kubectl's error should contain %q:\n%s", want, stderr)
		}
	}
	t.Logf("kubectl create: %s", strings.TrimSpace(stderr))

	// Within the ClusterScope it is accepted.
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: tenancy-platform-configmaps}
spec: {profileRef: {name: configmaps, namespace: %s}, includeNamespaces: [%s]}
`, tenancyPlatform, tenancyB))
	t.Cleanup(func() {
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "clustertarget", "tenancy-platform-configmaps", "--ignore-not-found", "--wait=false")
	})
}

// applyManifest applies YAML as admin and fails the test on error.
func applyManifest(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nmanifest:\n%s", err, out, manifest)
	}
}
