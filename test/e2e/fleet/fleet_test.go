// Package fleet is the end-to-end suite of member clusters (issue 14): a
// hub (kube-apiserver, kube-controller-manager and kollect-apiserver, each
// with its own etcd) and three members (each its own etcd and
// kube-apiserver), all real processes on 127.0.0.1.
package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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

// The members: two in env=prod, one in env=dev, and the Deployments each
// starts with. The same name and image in every member shows that items
// are told apart by their member, and that a selector across members
// leaves out the member the ClusterTarget does not select.
var (
	memberEnv   = map[string]string{"east": "prod", "west": "prod", "north": "dev"}
	deployments = map[string]map[string]string{
		"east":  {"web": "nginx:1.27", "api": "busybox:1.36"},
		"west":  {"web": "nginx:1.27", "cache": "redis:7.4"},
		"north": {"web": "nginx:1.27"},
	}
)

// fleet is what the subtests share.
type fleet struct {
	hub     *collectenv.Env
	members map[string]*localcluster.Cluster
}

func (f *fleet) memberKube(name string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(f.members[name].RESTConfig())
}

// TestMemberCollection runs issue 14's acceptance points against one hub
// and three members (each member costs an etcd and a kube-apiserver, so
// they are shared by the subtests, which run in order).
func TestMemberCollection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	f := startFleet(ctx, t)

	// A subtest that fails leaves the fleet in a state the next ones do
	// not expect: stop there.
	for _, st := range []struct {
		name string
		run  func(context.Context, *testing.T, *fleet)
	}{
		{"selecting a member needs use on it", testUseNeeded},
		{"items across members", testItemsAcrossMembers},
		{"a stopped member and changes made meanwhile", testStoppedMember},
		{"hostile member kubeconfigs", testHostileMembers},
		{"a selected member's kubeconfig turned unusable", testUnusableKubeconfig},
		{"a deleted member's items go", testDeletedMember},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.run(ctx, t, f) }) {
			t.FailNow()
		}
	}
}

// startFleet starts the hub and the three members in parallel, registers
// the members and waits until each is Reachable, and creates the
// Deployments and the Profile with a selectable image.
func startFleet(ctx context.Context, t *testing.T) *fleet {
	t.Helper()
	log := os.Stderr
	dir, err := os.MkdirTemp("", "kollect-fleet-")
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{members: map[string]*localcluster.Cluster{}}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
	}
	wg.Go(func() {
		hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: log,
			// Loopback only, not --allow-private-sink-endpoints: the members
			// listen on 127.0.0.1, and the hostile cases need private and
			// metadata addresses still refused.
			KollectArgs: []string{"--allowed-sink-cidrs=127.0.0.0/8", "--cluster-name=hub", "-v=2"}})
		if err != nil {
			fail(fmt.Errorf("hub: %w", err))
			return
		}
		mu.Lock()
		f.hub = hub
		mu.Unlock()
	})
	for name := range memberEnv {
		wg.Go(func() {
			m, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(dir, name), NoControllerManager: true, FastEtcd: true, Log: log})
			if err != nil {
				fail(fmt.Errorf("member %s: %w", name, err))
				return
			}
			mu.Lock()
			f.members[name] = m
			mu.Unlock()
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, m := range f.members {
			_ = m.Stop()
		}
		if f.hub != nil {
			_ = f.hub.Stop(t.Failed())
		}
		if !t.Failed() {
			_ = os.RemoveAll(dir)
			return
		}
		if f.hub != nil {
			t.Logf("logs kept: the hub's in %s/logs", f.hub.Dir)
		}
		t.Logf("logs kept: the members' in %s/<member>/logs", dir)
	})
	if len(errs) > 0 {
		t.Fatal(errs)
	}

	hub := f.hub
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	api := hub.Client.KollectV1alpha1()
	for name, env := range memberEnv {
		if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name + "-kubeconfig"},
			Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, f.members[name].RESTConfig())}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": env}},
			Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: name + "-kubeconfig"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for dep, image := range deployments[name] {
			if _, err := f.memberKube(name).AppsV1().Deployments("default").Create(ctx, deployment(dep, image), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name := range memberEnv {
		waitMember(ctx, t, hub, name, metav1.ConditionTrue)
	}
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[0].image}", Selectable: true}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return f
}

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
	return writeKubeconfig(t, &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: read(cfg.CAData, cfg.CAFile)},
		&clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: read(cfg.CertData, cfg.CertFile), ClientKeyData: read(cfg.KeyData, cfg.KeyFile)})
}

// writeKubeconfig is a kubeconfig whose current context is cluster and user.
func writeKubeconfig(t *testing.T, cluster *clientcmdapi.Cluster, user *clientcmdapi.AuthInfo) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["member"] = cluster
	kc.AuthInfos["member"] = user
	kc.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "member"}
	kc.CurrentContext = "member"
	out, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// testItemsAcrossMembers: the ClusterTarget over env=prod collects the
// Deployments of east and west and none of north (env=dev); kubectl's
// field selectors source.cluster and attributes.image, and the label
// kollect.dev/cluster, find each member's items.
func testItemsAcrossMembers(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	// Every item of the hub: the prod members' Deployments, nothing of north's.
	waitItems(ctx, t, hub, "", "east/api busybox:1.36", "east/web nginx:1.27", "west/cache redis:7.4", "west/web nginx:1.27")
	for member, want := range map[string][]string{
		"east":  {"east/api busybox:1.36", "east/web nginx:1.27"},
		"west":  {"west/cache redis:7.4", "west/web nginx:1.27"},
		"north": nil,
		"hub":   nil, // the host: the ClusterTarget selects members only
	} {
		got := kubectlItems(ctx, t, hub, "--field-selector", "source.cluster="+member)
		if !slices.Equal(got, want) {
			t.Errorf("kubectl get clusterinventoryitems --field-selector source.cluster=%s: %q, want %q", member, got, want)
		}
		got = kubectlItems(ctx, t, hub, "-l", kollect.LabelCluster+"="+member)
		if !slices.Equal(got, want) {
			t.Errorf("kubectl get clusterinventoryitems -l %s=%s: %q, want %q", kollect.LabelCluster, member, got, want)
		}
	}
	// One image in all three members: the selector finds it in both prod
	// members, and in north not at all.
	got := kubectlItems(ctx, t, hub, "--field-selector", "attributes.image=nginx:1.27")
	if want := []string{"east/web nginx:1.27", "west/web nginx:1.27"}; !slices.Equal(got, want) {
		t.Errorf("kubectl get clusterinventoryitems --field-selector attributes.image=nginx:1.27: %q, want %q", got, want)
	}
	got = kubectlItems(ctx, t, hub, "--field-selector", "source.cluster=west,attributes.image=nginx:1.27")
	if want := []string{"west/web nginx:1.27"}; !slices.Equal(got, want) {
		t.Errorf("kubectl get clusterinventoryitems --field-selector source.cluster=west,attributes.image=nginx:1.27: %q, want %q", got, want)
	}
	// The ClusterTarget reports each prod member, sorted by name.
	waitClusterTarget(ctx, t, hub, "prod-deployments", "status.clusters east and west with 2 items each", func(ct *v1alpha1.ClusterTarget) bool {
		var got []string
		for _, c := range ct.Status.Clusters {
			got = append(got, fmt.Sprintf("%s:%d", c.Name, c.Collection.ItemCount))
		}
		return slices.Equal(got, []string{"east:2", "west:2"})
	})
	// Each member reports how many items the hub holds from it.
	for member, want := range map[string]int64{"east": 2, "west": 2, "north": 0} {
		waitMemberStatus(ctx, t, hub, member, fmt.Sprintf("itemCount %d", want), func(m *v1alpha1.MemberCluster) bool {
			return m.Status.Collection != nil && m.Status.Collection.ItemCount == want
		})
	}
}

// testStoppedMember: east's kube-apiserver is killed; east turns
// Reachable=False within 30 s and its items stay. Meanwhile, through a
// second kube-apiserver on east's etcd (on another port, which the hub
// does not know), a Deployment is created, one updated and one deleted.
// When east's kube-apiserver is back the items converge exactly to east's
// Deployments, and west's items are never touched.
func testStoppedMember(ctx context.Context, t *testing.T, f *fleet) {
	hub, east := f.hub, f.members["east"]
	before := []string{"east/api busybox:1.36", "east/web nginx:1.27"}
	westItems := []string{"west/cache redis:7.4", "west/web nginx:1.27"}

	// Killed, not stopped: on SIGTERM kube-apiserver drains for a while
	// (the harness sends SIGKILL after 15 s), so the moment it stops
	// answering would be unknown.
	if err := east.KubeAPIServer().Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	m := waitMember(ctx, t, hub, "east", metav1.ConditionFalse)
	took := time.Since(killed) // the acceptance figure
	c := m.Status.Collection
	if c == nil || c.ErrorClass != "Unreachable" || !strings.Contains(c.LastError, "connection refused") || c.UnreachableSince == nil {
		t.Fatalf("east's status.collection while stopped: %+v, want errorClass Unreachable, a lastError saying connection refused, unreachableSince", c)
	}
	t.Logf("Reachable=False %.1fs after east's kube-apiserver was killed (unreachableSince %.0fs after it)", took.Seconds(), c.UnreachableSince.Sub(killed.Truncate(time.Second)).Seconds())
	if took > 30*time.Second {
		t.Errorf("Reachable=False took %s, want at most 30s", took.Round(100*time.Millisecond))
	}
	checkItems(ctx, t, hub, "source.cluster=east", before...)
	checkItems(ctx, t, hub, "source.cluster=west", westItems...)
	// The ClusterTarget says which member it cannot reach.
	waitClusterTarget(ctx, t, hub, "prod-deployments", "Degraded=True naming east", func(ct *v1alpha1.ClusterTarget) bool {
		c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "Unreachable" && strings.Contains(c.Message, "east") && !strings.Contains(c.Message, "west")
	})

	// The changes, made while the hub cannot see east.
	side, stopSide := startSideAPIServer(ctx, t, east)
	sideKube := kubernetes.NewForConfigOrDie(side)
	if _, err := sideKube.AppsV1().Deployments("default").Create(ctx, deployment("db", "nginx:1.27"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web, err := sideKube.AppsV1().Deployments("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.Template.Spec.Containers[0].Image = "nginx:1.28"
	if _, err := sideKube.AppsV1().Deployments("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := sideKube.AppsV1().Deployments("default").Delete(ctx, "api", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stopSide()
	// Nothing of them reached the hub: east is still unreachable and its
	// items are what they were.
	checkMember(ctx, t, hub, "east", metav1.ConditionFalse)
	checkItems(ctx, t, hub, "source.cluster=east", before...)

	restarting := time.Now()
	if err := east.KubeAPIServer().Start(ctx); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	waitMember(ctx, t, hub, "east", metav1.ConditionTrue)
	reachable := time.Now()
	// Exactly east's Deployments as east's kube-apiserver lists them.
	list, err := f.memberKube("east").AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, d := range list.Items {
		want = append(want, "east/"+d.Name+" "+d.Spec.Template.Spec.Containers[0].Image)
	}
	if after := []string{"east/db nginx:1.27", "east/web nginx:1.28"}; !slices.Equal(slices.Sorted(slices.Values(want)), after) {
		t.Fatalf("east's Deployments after the changes: %q, want %q", want, after)
	}
	waitItems(ctx, t, hub, "source.cluster=east", want...)
	// From the restart: the hub may see east before /readyz answers.
	t.Logf("after east's kube-apiserver was started again: ready in %.1fs, Reachable=True in %.1fs, items converged in %.1fs",
		started.Sub(restarting).Seconds(), reachable.Sub(restarting).Seconds(), time.Since(restarting).Seconds())
	waitMemberStatus(ctx, t, hub, "east", "itemCount 2", func(m *v1alpha1.MemberCluster) bool {
		return m.Status.Collection != nil && m.Status.Collection.ItemCount == 2
	})
	// The updated image is what the selectable attribute finds.
	for selector, want := range map[string][]string{
		"attributes.image=nginx:1.28":   {"east/web nginx:1.28"},
		"attributes.image=nginx:1.27":   {"east/db nginx:1.27", "west/web nginx:1.27"},
		"attributes.image=busybox:1.36": nil,
	} {
		if got := kubectlItems(ctx, t, hub, "--field-selector", selector); !slices.Equal(got, want) {
			t.Errorf("kubectl get clusterinventoryitems --field-selector %s: %q, want %q", selector, got, want)
		}
	}
	checkItems(ctx, t, hub, "source.cluster=west", westItems...)
	waitClusterTarget(ctx, t, hub, "prod-deployments", "Degraded not True", func(ct *v1alpha1.ClusterTarget) bool {
		c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
		return c == nil || c.Status != metav1.ConditionTrue
	})
}

// testDeletedMember: a deleted MemberCluster's items go with it, and the
// other members' stay.
func testDeletedMember(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	api := hub.Client.KollectV1alpha1()
	if err := api.MemberClusters().Delete(ctx, "east", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitItems(ctx, t, hub, "source.cluster=east")
	waitGone(ctx, t, hub, "east")
	checkItems(ctx, t, hub, "", "west/cache redis:7.4", "west/web nginx:1.27")
	// Nor does the ClusterTarget report it any more.
	waitClusterTarget(ctx, t, hub, "prod-deployments", "east's entry withdrawn", func(ct *v1alpha1.ClusterTarget) bool {
		return len(ct.Status.Clusters) == 1 && ct.Status.Clusters[0].Name == "west"
	})
}

// testUnusableKubeconfig: a selected member whose Secret turns into a
// kubeconfig the hub refuses stops being collected; its items stay, and
// the ClusterTarget says so (Degraded naming it), until the Secret is fixed.
func testUnusableKubeconfig(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	secrets := hub.Kube.CoreV1().Secrets("fleet")
	good, err := secrets.Get(ctx, "west-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(good.Data["kubeconfig"])
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.InsecureSkipTLSVerify, c.CertificateAuthorityData = true, nil
	}
	insecure, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	bad := good.DeepCopy()
	bad.Data = map[string][]byte{"kubeconfig": insecure}
	if _, err := secrets.Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMemberStatus(ctx, t, hub, "west", "errorClass KubeconfigInvalid", func(m *v1alpha1.MemberCluster) bool {
		return m.Status.Collection != nil && m.Status.Collection.ErrorClass == "KubeconfigInvalid"
	})
	waitClusterTarget(ctx, t, hub, "prod-deployments", "Degraded=True naming west", func(ct *v1alpha1.ClusterTarget) bool {
		c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, "west")
	})
	checkItems(ctx, t, hub, "source.cluster=west", "west/cache redis:7.4", "west/web nginx:1.27")

	fixed, err := secrets.Get(ctx, "west-kubeconfig", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fixed.Data = good.Data
	if _, err := secrets.Update(ctx, fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMember(ctx, t, hub, "west", metav1.ConditionTrue)
	waitClusterTarget(ctx, t, hub, "prod-deployments", "Degraded not True", func(ct *v1alpha1.ClusterTarget) bool {
		c := meta.FindStatusCondition(ct.Status.Conditions, kollect.ConditionDegraded)
		return c == nil || c.Status != metav1.ConditionTrue
	})
}

func deployment(name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: image}}}}}}
}

// waitMember waits for the MemberCluster's Reachable condition and returns
// the MemberCluster as it then was.
func waitMember(ctx context.Context, t *testing.T, hub *collectenv.Env, name string, want metav1.ConditionStatus) *v1alpha1.MemberCluster {
	t.Helper()
	return waitMemberStatus(ctx, t, hub, name, "Reachable="+string(want), func(m *v1alpha1.MemberCluster) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, kollect.ConditionReachable)
		return c != nil && c.Status == want
	})
}

// checkMember fails unless the MemberCluster's Reachable condition is want now.
func checkMember(ctx context.Context, t *testing.T, hub *collectenv.Env, name string, want metav1.ConditionStatus) {
	t.Helper()
	m, err := hub.Client.KollectV1alpha1().MemberClusters().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(m.Status.Conditions, kollect.ConditionReachable); c == nil || c.Status != want {
		t.Errorf("MemberCluster %s: Reachable %+v, want %s", name, c, want)
	}
}

// waitMemberStatus waits until ok holds for the MemberCluster, described
// by what in the failure.
func waitMemberStatus(ctx context.Context, t *testing.T, hub *collectenv.Env, name, what string, ok func(*v1alpha1.MemberCluster) bool) *v1alpha1.MemberCluster {
	t.Helper()
	var last *v1alpha1.MemberCluster
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		m, err := hub.Client.KollectV1alpha1().MemberClusters().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = m
		return ok(m), nil
	})
	if err != nil {
		t.Fatalf("MemberCluster %s never %s: status %+v", name, what, statusOf(last))
	}
	return last
}

func statusOf(m *v1alpha1.MemberCluster) any {
	if m == nil {
		return nil
	}
	return struct {
		Conditions []metav1.Condition
		Collection *v1alpha1.MemberObservation
	}{m.Status.Conditions, m.Status.Collection}
}

// waitClusterTarget waits until ok holds for the ClusterTarget.
func waitClusterTarget(ctx context.Context, t *testing.T, hub *collectenv.Env, name, what string, ok func(*v1alpha1.ClusterTarget) bool) {
	t.Helper()
	var last *v1alpha1.ClusterTarget
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		ct, err := hub.Client.KollectV1alpha1().ClusterTargets().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = ct
		return ok(ct), nil
	})
	if err != nil {
		t.Fatalf("ClusterTarget %s never %s: status %+v", name, what, last.Status)
	}
}

// waitGone waits until the MemberCluster is deleted (its finalizer gone).
func waitGone(ctx context.Context, t *testing.T, hub *collectenv.Env, name string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := hub.Client.KollectV1alpha1().MemberClusters().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the MemberCluster %s was not deleted: %v", name, err)
	}
}

// items lists the ClusterInventoryItems the field selector selects, each
// as "<cluster>/<name> <image>", sorted.
func items(ctx context.Context, hub *collectenv.Env, selector string) ([]string, error) {
	list, err := hub.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{FieldSelector: selector})
	if err != nil {
		return nil, err
	}
	var got []string
	for _, it := range list.Items {
		got = append(got, fmt.Sprintf("%s/%s %s", it.Source.Cluster, it.Source.Name, strings.Trim(string(it.Attributes["image"].Raw), `"`)))
	}
	slices.Sort(got)
	return got, nil
}

// waitItems waits until the items the field selector selects are exactly
// want ("<cluster>/<name> <image>").
func waitItems(ctx context.Context, t *testing.T, hub *collectenv.Env, selector string, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		var err error
		if got, err = items(ctx, hub, selector); err != nil {
			t.Logf("listing items with %q: %v", selector, err)
			return false, nil
		}
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("items with %q: %q, want %q", selector, got, want)
	}
}

// checkItems fails unless the items the field selector selects are
// exactly want now.
func checkItems(ctx context.Context, t *testing.T, hub *collectenv.Env, selector string, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	got, err := items(ctx, hub, selector)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("items with %q: %q, want %q", selector, got, want)
	}
}

// kubectlItems runs `kubectl get clusterinventoryitems` with args and
// returns the items as "<cluster>/<name> <image>", sorted.
func kubectlItems(ctx context.Context, t *testing.T, hub *collectenv.Env, args ...string) []string {
	t.Helper()
	out := kubectl(ctx, t, hub, append([]string{"get", "clusterinventoryitems", "-o",
		`jsonpath={range .items[*]}{.source.cluster}/{.source.name} {.attributes.image}{"\n"}{end}`}, args...)...)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] == "" {
		return nil
	}
	slices.Sort(lines)
	return lines
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

// kubectlStdin runs kubectl against the hub with stdin, as admin unless
// args say otherwise (--as).
func kubectlStdin(ctx context.Context, hub *collectenv.Env, stdin string, args ...string) (string, error) {
	cmd := hub.Cluster.KubectlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// apply applies YAML as admin.
func apply(ctx context.Context, t *testing.T, hub *collectenv.Env, manifest string) {
	t.Helper()
	if out, err := kubectlStdin(ctx, hub, manifest, "apply", "-f", "-"); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nmanifest:\n%s", err, out, manifest)
	}
}
