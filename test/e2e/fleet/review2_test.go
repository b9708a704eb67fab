package fleet

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	fleetctl "kollect.dev/kollect/pkg/controllers/fleet"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

// TestUnusableMemberLabelledBackIn (review 2): docs/fleet.md — while a
// member's kubeconfig is unusable, "the ClusterTargets that select the
// member mark its status.clusters entry unreachableSince (their Degraded
// names it)". Since an unusable member labelled out of a ClusterTarget has
// its entry withdrawn (leaveUnselected), labelling it back in must mark it
// again: otherwise the ClusterTarget selects a member it cannot collect
// and says nothing of it (Degraded=False, Ready=True "... from 0 of 0").
// The same holds for a ClusterTarget created while the member is unusable.
// Fixing the Secret then brings the items back and clears the mark.
func TestUnusableMemberLabelledBackIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	hub := selfHub(ctx, t, 3)
	defer func() { _ = hub.Stop(t.Failed()) }()
	api := hub.Client.KollectV1alpha1()
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "self-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, hub.Cluster.RESTConfig())}}
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "self", Labels: map[string]string{"env": "prod"}},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: "self-kubeconfig"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	prodTarget := func(name string) *v1alpha1.ClusterTarget {
		return &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"},
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"collect": "shop"}},
				ClusterSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}
	}
	if _, err := api.ClusterTargets().Create(ctx, prodTarget("prod-cms"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargetItems(ctx, t, hub, "prod-cms", 4) // shop's three and kube-root-ca.crt

	namesSelf := func(ct *v1alpha1.ClusterTarget) bool {
		c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
		marked := false
		for _, e := range ct.Status.Clusters {
			marked = marked || (e.Name == "self" && e.UnreachableSince != nil)
		}
		return marked && c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "self")
	}

	// The Secret goes: the member is unusable, prod-cms names it.
	if err := hub.Kube.CoreV1().Secrets("fleet").Delete(ctx, "self-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMemberStatus(ctx, t, hub, "self", "SecretNotFound", func(m *v1alpha1.MemberCluster) bool {
		return m.Status.Collection != nil && m.Status.Collection.ErrorClass == "SecretNotFound"
	})
	waitClusterTarget(ctx, t, hub, "prod-cms", "Degraded naming the unusable member", namesSelf)

	// Labelled out: its items and entry go (TestUnusableMemberLabelledOut).
	relabel := func(env string) {
		t.Helper()
		mc, err := api.MemberClusters().Get(ctx, "self", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mc.Labels["env"] = env
		if _, err := api.MemberClusters().Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("dev")
	waitClusterTarget(ctx, t, hub, "prod-cms", "without the member labelled out", func(ct *v1alpha1.ClusterTarget) bool {
		return len(ct.Status.Clusters) == 0
	})

	// Labelled back in, still unusable: prod-cms selects it again and
	// must say it cannot collect it; so must a ClusterTarget created now.
	relabel("prod")
	if _, err := api.ClusterTargets().Create(ctx, prodTarget("late-cms"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"prod-cms", "late-cms"} {
		var last *v1alpha1.ClusterTarget
		if err := wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
			ct, err := api.ClusterTargets().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			last = ct
			return namesSelf(ct), nil
		}); err != nil {
			t.Errorf("45 s after the unusable member (SecretNotFound) was selected by ClusterTarget %s, the target does not name it: clusters %+v, conditions %+v",
				name, last.Status.Clusters, last.Status.Conditions)
		}
	}

	// The Secret fixed: both collect from the member, the mark is gone.
	secret.ResourceVersion = ""
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"prod-cms", "late-cms"} {
		waitTargetItems(ctx, t, hub, name, 4)
		waitClusterTarget(ctx, t, hub, name, "collecting from the member, not Degraded", func(ct *v1alpha1.ClusterTarget) bool {
			c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
			return len(ct.Status.Clusters) == 1 && ct.Status.Clusters[0].UnreachableSince == nil && ct.Status.Clusters[0].Collection.ItemCount == 4 &&
				c != nil && c.Status == metav1.ConditionFalse
		})
	}
}

// TestDeletedMemberLeaseAfterAFailedDelete (review 2): docs/fleet.md — once
// a deleted MemberCluster's finalizer is removed, its owner "releases the
// member's Lease and deletes it". When that one deletion fails (here a
// ValidatingAdmissionPolicy refuses it for a while; in production an
// apiserver timeout, a 429, an etcd leader change), it must be tried
// again: no replica owns the member any more, so nothing else ever
// deletes kollect-member-<name>.
func TestDeletedMemberLeaseAfterAFailedDelete(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: os.Stderr,
		KollectArgs: append([]string{"--allow-private-sink-endpoints", "--cluster-name=hub", "-v=2"}, leaseTimings...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop(t.Failed()) }()
	waitReplicas(ctx, t, hub, nil)
	register(ctx, t, hub, hub.Cluster, []string{"doomed"})
	leases := hub.Kube.CoordinationV1().Leases(localcluster.KollectNamespace)
	const leaseName = fleetctl.MemberLeasePrefix + "doomed"
	holder := func() (string, error) {
		l, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return ptr.Deref(l.Spec.HolderIdentity, ""), nil
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		h, err := holder()
		return err == nil && h != "", nil
	}); err != nil {
		t.Fatalf("the member's Lease is never held: %v", err)
	}
	waitMember(ctx, t, hub, "doomed", metav1.ConditionTrue)

	// The member Leases' deletions are refused for a while.
	adm := hub.Kube.AdmissionregistrationV1()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: "review-no-member-lease-delete"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule: admissionregistrationv1.Rule{APIGroups: []string{"coordination.k8s.io"}, APIVersions: []string{"v1"}, Resources: []string{"leases"}}}}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "!oldObject.metadata.name.startsWith('kollect-member-')", Message: "review: refused for now"}}}}
	if _, err := adm.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const probe = fleetctl.MemberLeasePrefix + "review-probe"
	if _, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: probe}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := leases.Delete(ctx, probe, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "review: refused"), nil
	}); err != nil {
		t.Fatal("the policy never refused a member Lease's deletion")
	}

	if err := hub.Client.KollectV1alpha1().MemberClusters().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, hub, "doomed")
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		h, err := holder()
		return err == nil && h == "", nil
	}); err != nil {
		h, err := holder()
		t.Fatalf("the deleted member's Lease is not released: holder %q, %v", h, err)
	}
	time.Sleep(5 * time.Second) // the owner's deletion was refused meanwhile

	// The refusals end: the released Lease must go.
	if err := adm.ValidatingAdmissionPolicyBindings().Delete(ctx, policy.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := adm.ValidatingAdmissionPolicies().Delete(ctx, policy.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := leases.Delete(ctx, probe, metav1.DeleteOptions{})
		return err == nil || apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the policy still refuses")
	}
	start := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := leases.Get(ctx, leaseName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		h, err := holder()
		t.Errorf("%.0f s after the Lease deletions are allowed again, the deleted member's Lease %s is still there (holder %q, %v): nothing tries again",
			time.Since(start).Seconds(), leaseName, h, err)
	}
}

// TestHostRenamedLikeAMember (review 2): a MemberCluster collected under
// its name becomes NameTaken when the hub restarts with that name as its
// --cluster-name (an operator's rename, or an upgrade from a version that
// collected such a member). The member is not collected any more; the
// ClusterTargets that selected it must not go on reporting, in
// status.clusters, items of it that are not there.
func TestHostRenamedLikeAMember(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	hub := selfHub(ctx, t, 3)
	defer func() { _ = hub.Stop(t.Failed()) }()
	api := hub.Client.KollectV1alpha1()
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "self-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, hub.Cluster.RESTConfig())}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: "self", Labels: map[string]string{"env": "prod"}},
		Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: "self-kubeconfig"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "prod-cms"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"collect": "shop"}},
			ClusterSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTargetItems(ctx, t, hub, "prod-cms", 4)
	waitClusterTarget(ctx, t, hub, "prod-cms", "reporting the member's 4 items", func(ct *v1alpha1.ClusterTarget) bool {
		return len(ct.Status.Clusters) == 1 && ct.Status.Clusters[0].Collection.ItemCount == 4
	})

	// The hub restarts named like the member (on its port: the
	// APIService's).
	opts := hub.Replica
	opts.Port = hub.Kollect.Port()
	if err := hub.Kollect.Stop(); err != nil {
		t.Fatal(err)
	}
	opts.Args = append(append([]string{}, opts.Args...), "--cluster-name=self")
	var err error
	if hub.Kollect, err = hub.Cluster.StartKollect(ctx, opts); err != nil {
		t.Fatal(err)
	}
	waitMemberStatus(ctx, t, hub, "self", "NameTaken", func(m *v1alpha1.MemberCluster) bool {
		return m.Status.Collection != nil && m.Status.Collection.ErrorClass == "NameTaken"
	})
	time.Sleep(20 * time.Second)
	ct, err := api.ClusterTargets().Get(ctx, "prod-cms", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := targetItems(ctx, hub, "prod-cms")
	if err != nil {
		t.Fatal(err)
	}
	var claimed int64
	for _, e := range ct.Status.Clusters {
		claimed += e.Collection.ItemCount
	}
	ready := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionReady)
	t.Logf("prod-cms: %d items; status.clusters %+v; Ready %+v", len(got), ct.Status.Clusters, ready)
	if claimed != int64(len(got)) {
		t.Errorf("after the hub took the member's name, ClusterTarget prod-cms reports %d items in status.clusters (%+v; Ready %+v) and holds %d",
			claimed, ct.Status.Clusters, ready, len(got))
	}
}
