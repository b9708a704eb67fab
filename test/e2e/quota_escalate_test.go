package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/tenancy"
)

// TestQuotaEscalate: a namespace admin (the built-in admin role, which
// aggregates kollect-admin) writes the namespace's Scope but cannot raise
// its quotas above the server's defaults, which this server keeps at
// tenancy.DefaultQuotas; lowering is allowed. Nor can they grant
// themselves `escalate` (kube RBAC's own escalation check). Granted
// `escalate` on scopes by a cluster admin, they may raise it.
func TestQuotaEscalate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const ns = "quota-escalate"
	env.Kubectl(t, ctx, "create", "namespace", ns)
	nsAdmin := serviceAccount(t, ctx, ns, "admin")
	env.Kubectl(t, ctx, "create", "rolebinding", "admin", "-n", ns, "--clusterrole=admin", "--serviceaccount="+ns+":admin")
	waitCanI(t, ctx, nsAdmin, "create", "scopes", ns, true)
	if canI(t, ctx, nsAdmin, tenancy.VerbEscalate, "scopes", ns) {
		t.Fatalf("kubectl auth can-i escalate scopes as a namespace admin: yes, want no (kollect-admin must not hold it)")
	}
	user := "system:serviceaccount:" + ns + ":admin"
	above := tenancy.DefaultQuotas.MaxItems * 5
	scopes := nsAdmin.client.KollectV1alpha1().Scopes(ns)

	limits := &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "limits"}, Spec: v1alpha1.ScopeSpec{MaxItems: ptr(above)}}
	_, err := scopes.Create(ctx, limits, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a namespace admin creating a Scope with maxItems %d: %v, want 403", above, err)
	}
	for _, want := range []string{
		fmt.Sprintf("spec.maxItems: %d is above the server default %d (--default-max-items)", above, tenancy.DefaultQuotas.MaxItems),
		fmt.Sprintf(`the verb "escalate" on scopes.kollect.dev in namespace %q`, ns), fmt.Sprintf("user %q", user),
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal should say %s: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)
	if _, err := env.KollectClient(t).KollectV1alpha1().Scopes(ns).Get(ctx, "limits", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused Scope: %v, want NotFound (nothing stored)", err)
	}

	// Lowering the namespace's quota needs nothing more than kollect-admin.
	limits.Spec.MaxItems = ptr[int64](50)
	if _, err := scopes.Create(ctx, limits, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a namespace admin lowering maxItems to 50: %v", err)
	}
	if err := setEscalateScopeMaxItems(ctx, nsAdmin, ns, 20); err != nil {
		t.Fatalf("a namespace admin lowering maxItems to 20: %v", err)
	}

	// Raising it above the default, through kubectl as users do, is refused
	// and changes nothing.
	patch := fmt.Sprintf(`{"spec":{"maxItems":%d}}`, above)
	_, stderr, err := env.Cluster.Kubectl(ctx, "--kubeconfig", nsAdmin.kubeconfig, "-n", ns, "patch", "scopes.kollect.dev", "limits", "--type=merge", "-p", patch)
	if err == nil || !strings.Contains(stderr, "Error from server (Forbidden)") || !strings.Contains(stderr, fmt.Sprintf("spec.maxItems: %d is above the server default", above)) {
		t.Fatalf("kubectl patch raising maxItems as the namespace admin: err %v, stderr %q, want Forbidden naming spec.maxItems", err, stderr)
	}
	if got := escalateScopeMaxItems(t, ctx, ns); got != 20 {
		t.Fatalf("maxItems after the refused patch: %d, want 20", got)
	}

	// kube-apiserver refuses the namespace admin a Role granting what they
	// do not hold, so they cannot give themselves `escalate` either.
	// (kubectl create role refuses a verb discovery does not list, so apply.)
	grant := env.Cluster.KubectlCmd(ctx, "--kubeconfig", nsAdmin.kubeconfig, "apply", "-f", "-")
	grant.Stdin = strings.NewReader(fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: self-escalate, namespace: %s}
rules:
- apiGroups: [kollect.dev]
  resources: [scopes]
  verbs: [escalate]
`, ns))
	out, err := grant.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "attempting to grant RBAC permissions not currently held") {
		t.Fatalf("a namespace admin granting themselves escalate: err %v, output %q, want kube RBAC's escalation refusal", err, out)
	}

	// A cluster admin grants it.
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: raise-quotas, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [scopes]
  verbs: [escalate]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: admin-raises-quotas, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: raise-quotas}
subjects:
- {kind: ServiceAccount, name: admin, namespace: %[1]s}
`, ns))
	waitCanI(t, ctx, nsAdmin, tenancy.VerbEscalate, "scopes", ns, true)
	// The tenancy checks keep an authorizer's answer for half a second.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := setEscalateScopeMaxItems(ctx, nsAdmin, ns, above)
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("the namespace admin granted escalate raising maxItems to %d: %v", above, err)
	}
	if got := escalateScopeMaxItems(t, ctx, ns); got != above {
		t.Fatalf("maxItems after the raise: %d, want %d", got, above)
	}
}

// setEscalateScopeMaxItems sets maxItems of Scope ns/limits as who.
func setEscalateScopeMaxItems(ctx context.Context, who identity, ns string, n int64) error {
	scopes := who.client.KollectV1alpha1().Scopes(ns)
	s, err := scopes.Get(ctx, "limits", metav1.GetOptions{})
	if err != nil {
		return err
	}
	s.Spec.MaxItems = &n
	_, err = scopes.Update(ctx, s, metav1.UpdateOptions{})
	return err
}

// escalateScopeMaxItems is maxItems of Scope ns/limits as stored, read as cluster admin.
func escalateScopeMaxItems(t *testing.T, ctx context.Context, ns string) int64 {
	t.Helper()
	s, err := env.KollectClient(t).KollectV1alpha1().Scopes(ns).Get(ctx, "limits", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.MaxItems == nil {
		t.Fatal("Scope limits has no maxItems")
	}
	return *s.Spec.MaxItems
}
