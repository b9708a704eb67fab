package fleet

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/collectenv"
)

// TestMemberNamedLikeTheHost (review): the host cluster is the implicit
// member named --cluster-name. A MemberCluster of the same name (an
// operator registering the hub as a member of itself, so that
// clusterSelector: {} spans it too, names it as the hub is named) must
// not make the member's collector and the host's take each other's items
// for stale ones: the host's items keep their identity, and each target's
// items stay exactly the ConfigMaps collected. Either the MemberCluster
// is refused, or it is not collected, or it is collected beside the host
// without touching its items.
func TestMemberNamedLikeTheHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	hub := selfHub(ctx, t, 5)
	defer func() { _ = hub.Stop(t.Failed()) }()
	api := hub.Client.KollectV1alpha1()
	shop := &metav1.LabelSelector{MatchLabels: map[string]string{"collect": "shop"}}
	// The host's ClusterTarget (no clusterSelector).
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "host-cms"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"}, NamespaceSelector: shop}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// shop's ConfigMaps and kube-root-ca.crt.
	hostItems := waitTargetItems(ctx, t, hub, "host-cms", 6)
	t.Logf("the host's items: %d", len(hostItems))

	// The hub registered as a member of itself, under the host's name.
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "self-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, hub.Cluster.RESTConfig())}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "hub", Labels: map[string]string{"env": "self"}},
		Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: "self-kubeconfig"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Logf("a MemberCluster named like the host is refused: %v", err)
	}
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "member-cms"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"}, NamespaceSelector: shop,
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "self"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// For 40 s: the host's items never change identity or number.
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		got, err := targetItems(ctx, hub, "host-cms")
		if err != nil {
			t.Logf("listing: %v", err)
		} else if !maps.Equal(got, hostItems) {
			t.Fatalf("the host's items changed while a member named like the host was collected: %d items %v, before %d %v", len(got), got, len(hostItems), hostItems)
		}
		time.Sleep(500 * time.Millisecond)
	}
	member, _ := targetItems(ctx, hub, "member-cms")
	t.Logf("the member's items: %d", len(member))

	// Deleting that MemberCluster deletes the member's items, not the host's.
	if err := api.MemberClusters().Delete(ctx, "hub", metav1.DeleteOptions{}); err == nil {
		waitGone(ctx, t, hub, "hub")
	}
	deadline = time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := targetItems(ctx, hub, "host-cms"); err == nil && !maps.Equal(got, hostItems) {
			t.Fatalf("the host's items changed when a member named like the host was deleted: %d items %v, before %d %v", len(got), got, len(hostItems), hostItems)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// targetItems are a ClusterTarget's items: item name → uid.
func targetItems(ctx context.Context, hub *collectenv.Env, target string) (map[string]string, error) {
	list, err := hub.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{LabelSelector: kollect.LabelTarget + "=" + target})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, it := range list.Items {
		out[it.Name] = string(it.UID)
	}
	return out, nil
}

// waitTargetItems waits until a ClusterTarget has n items.
func waitTargetItems(ctx context.Context, t *testing.T, hub *collectenv.Env, target string, n int) map[string]string {
	t.Helper()
	var (
		got  map[string]string
		last error
	)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		g, err := targetItems(ctx, hub, target)
		if err != nil {
			last = err
			return false, nil
		}
		got = g
		return len(got) == n, nil
	}); err != nil {
		t.Logf("last list error: %v", last)
		ct, _ := hub.Client.KollectV1alpha1().ClusterTargets().Get(ctx, target, metav1.GetOptions{})
		t.Fatalf("ClusterTarget %s: %d items %v, want %d; status %+v", target, len(got), got, n, ct.Status)
	}
	return got
}

// TestSlowDNSMembersDelayNoOther (review): a member whose API server's
// name the DNS never answers for (a registrant's domain with a
// black-holed name server) must not hold up the other members. The hub
// resolves through --sink-dns-server, here a UDP port that never answers;
// four MemberClusters name servers under it. A fifth, reachable by IP
// (the hub's own kube-apiserver), must be reported Reachable as quickly as
// with no slow member: a probe and a status write, a few seconds.
func TestSlowDNSMembersDelayNoOther(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	blackhole, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer blackhole.Close()
	go func() { // read and never answer
		buf := make([]byte, 2048)
		for {
			if _, _, err := blackhole.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: os.Stderr,
		KollectArgs: []string{"--allowed-sink-cidrs=127.0.0.0/8", "--cluster-name=hub", "-v=2", "--sink-dns-server=" + blackhole.LocalAddr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop(t.Failed()) }()
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := hub.Client.KollectV1alpha1()
	register := func(name string, cfg *rest.Config) {
		t.Helper()
		if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"},
			Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, cfg)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: name + "-kubeconfig"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		cfg := hub.Cluster.RESTConfig()
		cfg.Host = fmt.Sprintf("https://slow-%d.kollect-review.example:6443", i)
		register(fmt.Sprintf("slow-%d", i), cfg)
	}
	// Let the slow members' syncs and probes come round.
	time.Sleep(30 * time.Second)
	start := time.Now()
	register("self", hub.Cluster.RESTConfig())
	waitMember(ctx, t, hub, "self", metav1.ConditionTrue)
	took := time.Since(start)
	t.Logf("the reachable member was reported Reachable %.1fs after its creation", took.Seconds())
	if took > 10*time.Second {
		t.Errorf("a reachable member took %.1fs to be reported Reachable behind four members whose names do not resolve (fleet workers blocked on DNS)", took.Seconds())
	}
}

// TestUnusableMemberLabelledOut (review): docs/fleet.md — labelling a
// member out of a ClusterTarget's selector deletes that member's items of
// the target. A member whose kubeconfig Secret is gone keeps its items
// (SecretNotFound) while it is selected; labelled out, they must go all
// the same (and its status.clusters entry with them), not stay until the
// Secret is fixed.
func TestUnusableMemberLabelledOut(t *testing.T) {
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
	waitTargetItems(ctx, t, hub, "prod-cms", 4) // shop's three and kube-root-ca.crt

	// The Secret goes: the member is unusable, its items stay.
	if err := hub.Kube.CoreV1().Secrets("fleet").Delete(ctx, "self-kubeconfig", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMemberStatus(ctx, t, hub, "self", "SecretNotFound", func(m *v1alpha1.MemberCluster) bool {
		return m.Status.Collection != nil && m.Status.Collection.ErrorClass == "SecretNotFound"
	})
	waitTargetItems(ctx, t, hub, "prod-cms", 4)

	// Labelled out of the selector: its items of the target go.
	mc, err := api.MemberClusters().Get(ctx, "self", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mc.Labels["env"] = "dev"
	if _, err := api.MemberClusters().Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 45*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err = targetItems(ctx, hub, "prod-cms")
		return err == nil && len(got) == 0, nil
	}); err != nil {
		t.Errorf("45 s after the unusable member was labelled out of the ClusterTarget's selector, its items of the target are still there: %d %v", len(got), got)
	}
	waitClusterTarget(ctx, t, hub, "prod-cms", "without the member labelled out in status.clusters", func(ct *v1alpha1.ClusterTarget) bool {
		return len(ct.Status.Clusters) == 0
	})
}

// selfHub starts a hub (--cluster-name=hub, loopback endpoints allowed)
// with the namespaces fleet and shop (labelled collect=<name>),
// configMaps ConfigMaps in shop and the Profile fleet/configmaps (its
// attribute v optional: kube-root-ca.crt has no data.v). The caller stops
// it.
func selfHub(ctx context.Context, t *testing.T, configMaps int) *collectenv.Env {
	t.Helper()
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: os.Stderr,
		KollectArgs: []string{"--allowed-sink-cidrs=127.0.0.0/8", "--cluster-name=hub", "-v=2"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"fleet", "shop"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"collect": ns}}}, metav1.CreateOptions{}); err != nil {
			_ = hub.Stop(true)
			t.Fatal(err)
		}
	}
	for i := range configMaps {
		if _, err := hub.Kube.CoreV1().ConfigMaps("shop").Create(ctx, configMap(fmt.Sprintf("cm-%d", i), "v1"), metav1.CreateOptions{}); err != nil {
			_ = hub.Stop(true)
			t.Fatal(err)
		}
	}
	if _, err := hub.Client.KollectV1alpha1().Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "v", Path: "{.data.v}", Optional: true}}}}, metav1.CreateOptions{}); err != nil {
		_ = hub.Stop(true)
		t.Fatal(err)
	}
	return hub
}
