// Package fleet is the end-to-end suite of member clusters (issue 14): a
// hub (kube-apiserver, kube-controller-manager and kollect-apiserver, each
// with its own etcd) and a member (its own etcd and kube-apiserver), all
// real processes on 127.0.0.1.
package fleet

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

// inlineKubeconfig is a kubeconfig of cfg with every credential inline:
// the hub refuses kubeconfigs that name files on its disk.
func inlineKubeconfig(t *testing.T, cfg *rest.Config) []byte {
	t.Helper()
	read := func(data []byte, file string) []byte {
		if len(data) > 0 || file == "" {
			return data
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["member"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: read(cfg.CAData, cfg.CAFile)}
	kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken,
		ClientCertificateData: read(cfg.CertData, cfg.CertFile), ClientKeyData: read(cfg.KeyData, cfg.KeyFile)}
	kc.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "member"}
	kc.CurrentContext = "member"
	out, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMemberCollection: a ClusterTarget over env=prod members collects the
// member's Deployments into items that name the member; the field
// selectors source.cluster and a selectable image attribute find them; a
// stopped member is reported unreachable while its items stay, and the
// changes made while it was down arrive once it is back.
func TestMemberCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	log := os.Stderr
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: log,
		// The member listens on 127.0.0.1, which the endpoint policy
		// refuses by default.
		KollectArgs: []string{"--allow-private-sink-endpoints", "--cluster-name=hub", "-v=2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop(false) }()
	memberDir := filepath.Join(hub.Dir, "member-east")
	member, err := localcluster.Start(ctx, localcluster.Options{Dir: memberDir, NoControllerManager: true, FastEtcd: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = member.Stop() }()
	memberKube := kubernetes.NewForConfigOrDie(member.RESTConfig())

	// Register the member: its kubeconfig in a Secret, and the MemberCluster.
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "east-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, member.RESTConfig())}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := hub.Client.KollectV1alpha1()
	if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "east", Labels: map[string]string{"env": "prod"}},
		Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: "east-kubeconfig"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMember(ctx, t, hub, "east", metav1.ConditionTrue)

	// Deployments in the member, a Profile with a selectable image, a
	// ClusterTarget over env=prod members.
	for name, image := range map[string]string{"web": "nginx:1.27", "api": "busybox:1.36"} {
		if _, err := memberKube.AppsV1().Deployments("default").Create(ctx, deployment(name, image), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[0].image}", Selectable: true}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "prod-deployments"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "deployments"},
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitItems(ctx, t, hub, "source.cluster=east", "api", "web")
	waitItems(ctx, t, hub, "source.cluster=east,attributes.image=nginx:1.27", "web")
	// The host collects nothing for it: no item names the hub.
	waitItems(ctx, t, hub, "source.cluster=hub")
	out := kubectl(ctx, t, hub, "get", "clusterinventoryitems", "--field-selector", "source.cluster=east,attributes.image=nginx:1.27", "-o", "name")
	if strings.Count(strings.TrimSpace(out), "\n") != 0 || !strings.HasPrefix(out, "clusterinventoryitem.kollect.dev/prod-deployments-") {
		t.Fatalf("kubectl with the field selectors: %q", out)
	}

	// The member stops: Reachable turns False, the items stay.
	stopped := time.Now()
	if err := member.KubeAPIServer().Stop(); err != nil {
		t.Fatal(err)
	}
	waitMember(ctx, t, hub, "east", metav1.ConditionFalse)
	t.Logf("Reachable=False %.1fs after the member's kube-apiserver stopped", time.Since(stopped).Seconds())
	waitItems(ctx, t, hub, "source.cluster=east", "api", "web")

	// Back: a delete and a create made after it returned converge exactly.
	if err := member.KubeAPIServer().Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitMember(ctx, t, hub, "east", metav1.ConditionTrue)
	if err := memberKube.AppsV1().Deployments("default").Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := memberKube.AppsV1().Deployments("default").Create(ctx, deployment("db", "nginx:1.27"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitItems(ctx, t, hub, "source.cluster=east", "db", "web")
	waitItems(ctx, t, hub, "source.cluster=east,attributes.image=nginx:1.27", "db", "web")

	// The MemberCluster goes: its items go with it.
	if err := api.MemberClusters().Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitItems(ctx, t, hub, "source.cluster=east")
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := api.MemberClusters().Get(ctx, "east", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatal("the MemberCluster was not deleted:", err)
	}
}

func deployment(name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}}}
}

// waitMember waits for the MemberCluster's Reachable condition.
func waitMember(ctx context.Context, t *testing.T, hub *collectenv.Env, name string, want metav1.ConditionStatus) {
	t.Helper()
	var last *v1alpha1.MemberCluster
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := hub.Client.KollectV1alpha1().MemberClusters().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = m
		c := meta.FindStatusCondition(m.Status.Conditions, kollect.ConditionReachable)
		return c != nil && c.Status == want, nil
	})
	if err != nil {
		t.Fatalf("MemberCluster %s never Reachable=%s: %+v", name, want, last)
	}
}

// waitItems waits until the ClusterInventoryItems the field selector
// selects are exactly the Deployments named.
func waitItems(ctx context.Context, t *testing.T, hub *collectenv.Env, selector string, names ...string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := hub.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			t.Logf("listing items with %s: %v", selector, err)
			return false, nil
		}
		got = got[:0]
		for _, it := range list.Items {
			got = append(got, it.Source.Name)
		}
		return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(names))), nil
	})
	if err != nil {
		t.Fatalf("items with %s: %v, want %v", selector, got, names)
	}
}

// kubectl runs kubectl against the hub as admin.
func kubectl(ctx context.Context, t *testing.T, hub *collectenv.Env, args ...string) string {
	t.Helper()
	out, stderr, err := hub.Cluster.Kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, stderr)
	}
	return out
}
