package idlestatus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// TestRefusedByAdmissionReadNoSink: a create that tenancy admission
// refuses reads no sink either, whatever the reason: no `use` on one of
// its sinks, no `list` on the items, a Scope's sink allowlist, a
// ClusterScope's referenceNamespaces. Asking only for `use` left the other
// three reading the sinks the cache missed, so their latency still told
// which exist, in a namespace a ClusterScope had put out of reach (found
// by review, helper 59).
func TestRefusedByAdmissionReadNoSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	gets := func() float64 { return sinkGets(ctx, t) }
	as := func(user string) versioned.Interface {
		cfg := env.Cluster.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := versioned.NewForConfig(cfg)
		must(t, err, "client")
		return c
	}
	bind := func(ns, user string, rules []rbacv1.PolicyRule) {
		_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: rules}, metav1.CreateOptions{})
		must(t, err, "role")
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}, metav1.CreateOptions{})
		must(t, err, "binding")
	}
	// bindCluster grants rules to user across the cluster, until the test ends.
	bindCluster := func(name, user string, rules []rbacv1.PolicyRule) {
		_, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
		must(t, err, "clusterrole")
		t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
		_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}, metav1.CreateOptions{})
		must(t, err, "clusterrolebinding")
		t.Cleanup(func() {
			_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		})
	}
	// pollRefused creates (event sink refs: not counted) until the error contains want.
	pollRefused := func(create func(context.Context) error, want string) {
		t.Helper()
		var last error
		err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			last = create(ctx)
			return last != nil && strings.Contains(last.Error(), want), nil
		})
		if err != nil {
			t.Fatalf("waiting for a refusal saying %q: last %v", want, last)
		}
	}
	// refusedReadNoSink makes three creates that must each be refused as
	// refused says, and fails unless they read no sink from etcd.
	refusedReadNoSink := func(t *testing.T, what string, refused func(error) bool, create func(ctx context.Context, i int) error) {
		t.Helper()
		before := gets()
		for i := range 3 {
			if err := create(ctx, i); !refused(err) {
				t.Fatalf("create %d: %v, want it refused (%s)", i, err, what)
			}
		}
		if n := gets() - before; n != 0 {
			t.Errorf("3 creates refused (%s) read sinks %v times from etcd; want none", what, n)
		}
	}

	// No `list` on inventoryitems (403 from admission's checkItems).
	t.Run("items", func(t *testing.T) {
		const ns = "adm-items"
		createNamespace(ctx, t, ns)
		bind(ns, "mallet", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventories"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks", "eventsinks"}, Verbs: []string{"use"}},
		})
		c := as("mallet").KollectV1alpha1()
		pollRefused(func(ctx context.Context) error {
			_, err := c.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "w"},
				Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "x"}}}}, metav1.CreateOptions{})
			if err != nil && strings.Contains(err.Error(), "may not use") {
				return fmt.Errorf("grant not there yet")
			}
			return err
		}, "may not list")
		refusedReadNoSink(t, "no `list` on inventoryitems", apierrors.IsForbidden, func(ctx context.Context, i int) error {
			_, err := c.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("a-%d", i)},
				Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "hidden-a"}, {Name: "hidden-b"}}}}, metav1.CreateOptions{})
			return err
		})
	})

	// A Scope's sink allowlist (422), the user with every grant.
	t.Run("scope", func(t *testing.T) {
		const ns = "adm-scope"
		createNamespace(ctx, t, ns)
		bind(ns, "trudy", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventories"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks", "eventsinks"}, Verbs: []string{"use"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventoryitems"}, Verbs: []string{"list"}},
		})
		c := as("trudy").KollectV1alpha1()
		waitFirstEntries(ctx, t, c, ns)
		_, err := kollect.KollectV1alpha1().Scopes(ns).Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "only-allowed"},
			Spec: v1alpha1.ScopeSpec{SnapshotSinkRefs: []string{"allowed"}, EventSinkRefs: []string{"allowed"}}}, metav1.CreateOptions{})
		must(t, err, "scope")
		pollRefused(func(ctx context.Context) error {
			_, err := c.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "w"},
				Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "x"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "allowlist")
		refusedReadNoSink(t, "a Scope's sink allowlist", apierrors.IsInvalid, func(ctx context.Context, i int) error {
			_, err := c.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("b-%d", i)},
				Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "hidden-a"}, {Name: "hidden-b"}}}}, metav1.CreateOptions{})
			return err
		})
	})

	// A ClusterScope's referenceNamespaces (422); the user may use sinks
	// in every namespace but get none.
	t.Run("clusterscope", func(t *testing.T) {
		const victim = "adm-victim"
		createNamespace(ctx, t, victim)
		bindCluster("adm-oscar", "oscar", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"clusterinventories"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks", "eventsinks"}, Verbs: []string{"use"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"clusterinventoryitems"}, Verbs: []string{"list"}},
		})
		c := as("oscar").KollectV1alpha1()
		// The grant has arrived once a dry run passes.
		pollRefused(func(ctx context.Context) error {
			_, err := c.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "w"},
				Spec: v1alpha1.ClusterInventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "x", Namespace: victim}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return fmt.Errorf("GRANTED")
			}
			return nil
		}, "GRANTED")
		_, err := kollect.KollectV1alpha1().ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "adm-refns"},
			Spec: v1alpha1.ClusterScopeSpec{ReferenceNamespaces: []string{"kollect-system"}}}, metav1.CreateOptions{})
		must(t, err, "clusterscope")
		t.Cleanup(func() {
			_ = kollect.KollectV1alpha1().ClusterScopes().Delete(context.Background(), "adm-refns", metav1.DeleteOptions{})
		})
		pollRefused(func(ctx context.Context) error {
			_, err := c.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "w"},
				Spec: v1alpha1.ClusterInventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "x", Namespace: victim}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}, "referenceNamespaces")
		refusedReadNoSink(t, "ClusterInventories, a ClusterScope's referenceNamespaces", apierrors.IsInvalid, func(ctx context.Context, i int) error {
			_, err := c.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("c-%d", i)},
				Spec: v1alpha1.ClusterInventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "hidden-a", Namespace: victim}, {Name: "hidden-b", Namespace: victim}}}}, metav1.CreateOptions{})
			return err
		})
	})

	// `use` refused on one sink of the user's own namespace
	// (resourceNames).
	t.Run("use-inventory", func(t *testing.T) {
		const ns = "adm-use"
		createNamespace(ctx, t, ns)
		bind(ns, "peggy", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventories"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks"}, Verbs: []string{"use"}, ResourceNames: []string{"mine"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"eventsinks"}, Verbs: []string{"use"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventoryitems"}, Verbs: []string{"list"}},
		})
		c := as("peggy").KollectV1alpha1()
		waitFirstEntries(ctx, t, c, ns)
		refusedReadNoSink(t, "no `use` on one sink", apierrors.IsForbidden, func(ctx context.Context, i int) error {
			_, err := c.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("d-%d", i)},
				Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "mine"}, {Name: "theirs"}}}}, metav1.CreateOptions{})
			return err
		})
	})

	// A ClusterInventory naming sinks in a namespace the user may use
	// nothing in.
	t.Run("use-cluster", func(t *testing.T) {
		const own, victim = "adm-carol", "adm-victim2"
		createNamespace(ctx, t, own)
		createNamespace(ctx, t, victim)
		bind(own, "carol", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks", "eventsinks"}, Verbs: []string{"use"}},
		})
		bindCluster("adm-carol", "carol", []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"clusterinventories"}, Verbs: []string{"create", "get"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"clusterinventoryitems"}, Verbs: []string{"list"}},
		})
		c := as("carol").KollectV1alpha1()
		pollRefused(func(ctx context.Context) error {
			_, err := c.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "w"},
				Spec: v1alpha1.ClusterInventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "x", Namespace: own}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err == nil {
				return fmt.Errorf("GRANTED")
			}
			return nil
		}, "GRANTED")
		refusedReadNoSink(t, "ClusterInventories, no `use` in "+victim, apierrors.IsForbidden, func(ctx context.Context, i int) error {
			_, err := c.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e-%d", i)},
				Spec: v1alpha1.ClusterInventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "a", Namespace: victim}, {Name: "b", Namespace: victim}}}}, metav1.CreateOptions{})
			return err
		})
	})
}
