package export

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or ctx ends; the failure shows the
// last reason cond gave.
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

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// namespace creates a namespace deleted after the test.
func namespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err, "namespace "+name)
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func secret(ctx context.Context, t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	_, err := kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	must(t, err, "secret "+name)
}

func deployment(ns, name, image string) *appsv1.Deployment {
	replicas := int32(1)
	sel := map[string]string{"pod": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "web"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: sel},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// collectDeployments creates n Deployments, a Profile (image by JSONPath,
// replicas by CEL) and a Target "web" selecting them, and waits for the items.
func collectDeployments(ctx context.Context, t *testing.T, ns string, n int) {
	t.Helper()
	for i := range n {
		_, err := kube.AppsV1().Deployments(ns).Create(ctx, deployment(ns, fmt.Sprintf("app-%02d", i), "registry.example/app:1"), metav1.CreateOptions{})
		must(t, err, "deployment")
	}
	_, err := kollect.KollectV1alpha1().Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments", Namespace: ns},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{
				{Name: "image", Path: "{.spec.template.spec.containers[*].image}"},
				{Name: "replicas", Path: "cel:object.spec.replicas"},
			},
		},
	}, metav1.CreateOptions{})
	must(t, err, "profile")
	_, err = kollect.KollectV1alpha1().Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "deployments"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, "target")
	eventually(ctx, t, "items collected", func(ctx context.Context) (bool, string) {
		items, err := kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(items.Items) == n, fmt.Sprintf("%d items, want %d", len(items.Items), n)
	})
}

func setImage(ctx context.Context, t *testing.T, ns, name, image string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		_, err = kube.AppsV1().Deployments(ns).Update(ctx, d, metav1.UpdateOptions{})
		return err
	})
	must(t, err, "update deployment "+name)
}

// itemSet is the namespace's items in exported form, by key, and their checksum.
func itemSet(ctx context.Context, t *testing.T, ns string) (map[string]string, string) {
	t.Helper()
	list, err := kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
	must(t, err, "list items")
	set := map[string]string{}
	var c sink.Checksum
	for _, it := range list.Items {
		set[it.Namespace+"/"+it.Name] = it.Hash
		c.Add(it.Namespace+"/"+it.Name, it.Hash)
	}
	return set, c.String()
}

func getInventory(ctx context.Context, t *testing.T, ns, name string) *v1alpha1.Inventory {
	t.Helper()
	inv, err := kollect.KollectV1alpha1().Inventories(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err, "get inventory")
	return inv
}

func entry(inv *v1alpha1.Inventory, family v1alpha1.SinkFamily, name string) *v1alpha1.SinkExportStatus {
	for i := range inv.Status.SinkExports {
		if e := &inv.Status.SinkExports[i]; e.Family == family && e.Name == name {
			return e
		}
	}
	return nil
}

// waitSynced waits until every sink entry holds checksum at the current
// generation and Synced is True.
func waitSynced(ctx context.Context, t *testing.T, ns, name, checksum string, sinks int) *v1alpha1.Inventory {
	t.Helper()
	var inv *v1alpha1.Inventory
	eventually(ctx, t, "inventory "+name+" synced at "+checksum, func(ctx context.Context) (bool, string) {
		var err error
		inv, err = kollect.KollectV1alpha1().Inventories(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(inv.Status.SinkExports) != sinks {
			return false, fmt.Sprintf("%d entries: %+v", len(inv.Status.SinkExports), inv.Status.SinkExports)
		}
		for _, e := range inv.Status.SinkExports {
			if e.LastChecksum != checksum || e.ObservedGeneration != inv.Generation || e.Outcome == v1alpha1.OutcomeFailed {
				return false, fmt.Sprintf("%s/%s: outcome %s checksum %s gen %d: %s", e.Family, e.Name, e.Outcome, e.LastChecksum, e.ObservedGeneration, e.Message)
			}
		}
		c := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionSynced)
		if c == nil || c.Status != metav1.ConditionTrue || c.ObservedGeneration != inv.Generation {
			return false, fmt.Sprintf("Synced %+v", c)
		}
		return true, ""
	})
	return inv
}

func ptr[T any](v T) *T { return &v }
