package fleet

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
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
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: os.Stderr,
		KollectArgs: []string{"--allowed-sink-cidrs=127.0.0.0/8", "--cluster-name=hub", "-v=2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop(t.Failed()) }()
	for _, ns := range []string{"fleet", "shop"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"collect": ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := hub.Kube.CoreV1().ConfigMaps("shop").Create(ctx, configMap(fmt.Sprintf("cm-%d", i), "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
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
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "v", Path: "{.data.v}", Optional: true}}}}, metav1.CreateOptions{}); err != nil {
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
