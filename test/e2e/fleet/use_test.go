package fleet

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// prodTarget is the ClusterTarget over env=prod members that alice
// creates; the later subtests read its items.
const prodTarget = `
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: prod-deployments}
spec:
  profileRef: {namespace: fleet, name: deployments}
  clusterSelector: {matchLabels: {env: prod}}
`

// testUseNeeded: alice may create ClusterTargets, use the Profile and
// list Deployments, yet her ClusterTarget over env=prod is refused with a
// 403 naming each prod member she may not use; with use on east only, it
// names west alone; with use on both, the same create succeeds and the
// ClusterTarget collects on her authority. north, which she may not use,
// stays refused.
func testUseNeeded(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	apply(ctx, t, hub, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: fleet-e2e-cluster-targets}
rules:
- apiGroups: [kollect.dev]
  resources: [clustertargets]
  verbs: [get, list, watch, create, delete]
# A ClusterTarget collects only what its user may list across the cluster.
- apiGroups: [apps]
  resources: [deployments]
  verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: fleet-e2e-alice}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: fleet-e2e-cluster-targets}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
---
# use on the Profile the ClusterTarget references, in its namespace.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-deployments-profile, namespace: fleet}
rules:
- apiGroups: [kollect.dev]
  resources: [profiles]
  resourceNames: [deployments]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: alice-uses-deployments-profile, namespace: fleet}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-deployments-profile}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
`)
	createAsAlice := func(manifest string) (string, error) {
		return kubectlStdin(ctx, hub, manifest, "--as=alice", "create", "-f", "-")
	}

	// No use on any member: both prod members are named. (Until the RBAC
	// above reaches kube-apiserver's authorizer, the refusal is of the
	// create itself.)
	var (
		out string
		err error
	)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err = createAsAlice(prodTarget)
		return err == nil || strings.Contains(out, "spec.clusterSelector"), nil
	}); err != nil {
		t.Fatalf("alice's create never reached the clusterSelector check: %v; last answer:\n%s", err, out)
	}
	checkRefused(t, out, err, []string{"east", "west"}, []string{"north"})

	// use on east: west alone is named. The delegated authorizer caches a
	// denial for 10 s, hence the retries.
	grantUse(ctx, t, f, "east")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err = createAsAlice(prodTarget)
		if err == nil {
			return false, fmt.Errorf("created with use on east only:\n%s", out)
		}
		return !strings.Contains(out, `membercluster "east"`), nil
	}); err != nil {
		t.Fatalf("with use on east: %v; last answer:\n%s", err, out)
	}
	checkRefused(t, out, err, []string{"west"}, []string{"east", "north"})

	// use on both: the same create succeeds.
	grantUse(ctx, t, f, "east", "west")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		out, err = createAsAlice(prodTarget)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("with use on east and west the create still fails: %v\n%s", err, out)
	}
	ct, err := hub.Client.KollectV1alpha1().ClusterTargets().Get(ctx, "prod-deployments", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r := ct.Status.Requester; r == nil || r.Username != "alice" {
		t.Errorf("status.requester %+v, want alice", r)
	}

	// north stays out of her reach.
	out, err = createAsAlice(strings.NewReplacer("prod-deployments", "dev-deployments", "env: prod", "env: dev").Replace(prodTarget))
	checkRefused(t, out, err, []string{"north"}, []string{"east", "west"})
}

// grantUse gives alice use on exactly the members named.
func grantUse(ctx context.Context, t *testing.T, f *fleet, members ...string) {
	t.Helper()
	apply(ctx, t, f.hub, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: fleet-e2e-use-members}
rules:
- apiGroups: [kollect.dev]
  resources: [memberclusters]
  resourceNames: [%s]
  verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: fleet-e2e-alice-members}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: fleet-e2e-use-members}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}
`, strings.Join(members, ", ")))
}

// checkRefused fails unless kubectl's create was a 403 on
// spec.clusterSelector naming alice and each member of named, and none of
// others.
func checkRefused(t *testing.T, out string, err error, named, others []string) {
	t.Helper()
	if err == nil {
		t.Fatalf("alice's ClusterTarget was created:\n%s", out)
	}
	t.Logf("kubectl --as=alice create: %s", strings.TrimSpace(out))
	for _, want := range []string{"(Forbidden)", "spec.clusterSelector"} {
		if !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %q", want)
		}
	}
	for _, m := range named {
		if want := fmt.Sprintf(`user "alice" cannot use membercluster %q`, m); !strings.Contains(out, want) {
			t.Errorf("the refusal lacks %s", want)
		}
	}
	for _, m := range others {
		if strings.Contains(out, fmt.Sprintf("membercluster %q", m)) {
			t.Errorf("the refusal names membercluster %q", m)
		}
	}
}
