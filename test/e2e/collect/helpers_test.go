package collect

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/localcluster"
)

// testContext bounds a test.
func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// createNamespace creates a namespace with labels; it is deleted after the test.
func createNamespace(ctx context.Context, t *testing.T, name string, labels map[string]string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// eventually polls cond every 200ms until it holds or ctx ends; the last
// reason cond gave is in the failure.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached before the deadline; last: %s", what, last)
	}
}

func deploymentObject(ns, name, image string, replicas int32, labels map[string]string) *appsv1.Deployment {
	sel := map[string]string{"pod": name}
	podLabels := map[string]string{"pod": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// parallel runs f(i) for i in [0, n) on 8 goroutines and fails on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// updateDeployment applies edit to a fresh read, retrying conflicts.
func updateDeployment(ctx context.Context, t *testing.T, ns, name string, edit func(*appsv1.Deployment)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(d)
		_, err = kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("update deployment %s/%s: %v", ns, name, err)
	}
}

// deploymentProfile collects the image (JSONPath) and replicas (CEL) of Deployments.
func deploymentProfile(ns, name string) *v1alpha1.Profile {
	return &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{
				{Name: "image", Path: "{.spec.template.spec.containers[*].image}"},
				{Name: "replicas", Path: "cel:object.spec.replicas"},
			},
		},
	}
}

func createProfile(ctx context.Context, t *testing.T, p *v1alpha1.Profile) {
	t.Helper()
	if _, err := kollect.KollectV1alpha1().Profiles(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("profile %s/%s: %v", p.Namespace, p.Name, err)
	}
}

func createTarget(ctx context.Context, t *testing.T, ns, name, profile string, selector map[string]string) {
	t.Helper()
	tgt := &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: profile}},
	}
	if selector != nil {
		tgt.Spec.LabelSelector = &metav1.LabelSelector{MatchLabels: selector}
	}
	if _, err := kollect.KollectV1alpha1().Targets(ns).Create(ctx, tgt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("target %s/%s: %v", ns, name, err)
	}
}

// targetItems lists a target's items by source name.
func targetItems(ctx context.Context, ns, target string) (map[string]v1alpha1.InventoryItem, string, error) {
	list, err := kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=" + target})
	if err != nil {
		return nil, "", err
	}
	out := map[string]v1alpha1.InventoryItem{}
	for _, it := range list.Items {
		out[it.Source.Name] = it
	}
	return out, list.ResourceVersion, nil
}

// attr decodes one attribute of an item.
func attr(attrs map[string]v1alpha1.Value, name string) any {
	v, ok := attrs[name]
	if !ok {
		return nil
	}
	var out any
	if err := json.Unmarshal(v.Raw, &out); err != nil {
		return fmt.Sprintf("invalid JSON %q", v.Raw)
	}
	return out
}

// expectDeploymentItems waits until a target's items are exactly the given
// deployments (name → image), each with replicas from its spec.
func expectDeploymentItems(ctx context.Context, t *testing.T, ns, target string, want map[string]string) map[string]v1alpha1.InventoryItem {
	t.Helper()
	var items map[string]v1alpha1.InventoryItem
	eventually(ctx, t, fmt.Sprintf("items of %s/%s", ns, target), func(ctx context.Context) (bool, string) {
		var err error
		if items, _, err = targetItems(ctx, ns, target); err != nil {
			return false, err.Error()
		}
		if len(items) != len(want) {
			return false, fmt.Sprintf("%d items, want %d", len(items), len(want))
		}
		for name, image := range want {
			it, ok := items[name]
			if !ok {
				return false, "no item for " + name
			}
			if got := fmt.Sprint(attr(it.Attributes, "image")); got != fmt.Sprint([]any{image}) {
				return false, fmt.Sprintf("%s: image %s, want [%s]", name, got, image)
			}
		}
		return true, ""
	})
	return items
}

// condition returns a condition of a list, or nil.
func condition(conds []metav1.Condition, typ string) *metav1.Condition {
	return meta.FindStatusCondition(conds, typ)
}

// replicaMetrics reads the /metrics of one kollect-apiserver replica.
func replicaMetrics(ctx context.Context, p *localcluster.Process) (string, error) {
	cfg := cluster.KollectRESTConfig(p)
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(body), err
}

// startReplica starts one more kollect-apiserver replica on the suite's
// etcd, with extra flags; it is stopped after the test.
func startReplica(ctx context.Context, t *testing.T, name string, args ...string) *localcluster.Process {
	t.Helper()
	o := replicaOptions
	o.Name = name
	o.Args = append(append([]string{}, o.Args...), args...)
	p, err := cluster.StartKollect(ctx, o)
	if err != nil {
		t.Fatalf("replica %s: %v", name, err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}
