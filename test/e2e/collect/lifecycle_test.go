package collect

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestTargetLifecycle: the finalizer, suspend (items kept, no changes),
// resume (catches up), a Profile change (every item re-extracted), and
// deleting the Target (items deleted, then the Target).
func TestTargetLifecycle(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const ns = "collect-lifecycle"
	createNamespace(ctx, t, ns, nil)
	createProfile(ctx, t, deploymentProfile(ns, "deployments"))
	createTarget(ctx, t, ns, "t", "deployments", nil)
	want := map[string]string{}
	for i := range 3 {
		name := fmt.Sprintf("app-%d", i)
		if _, err := kube.AppsV1().Deployments(ns).Create(ctx, deploymentObject(ns, name, "registry.example/app:1", 1, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want[name] = "registry.example/app:1"
	}
	expectDeploymentItems(ctx, t, ns, "t", want)
	targets := kollect.KollectV1alpha1().Targets(ns)
	if tgt, err := targets.Get(ctx, "t", metav1.GetOptions{}); err != nil || !slices.Contains(tgt.Finalizers, "kollect.dev/items") {
		t.Fatalf("finalizers: %v, %v", tgt, err)
	}

	setSuspend := func(suspend bool) {
		t.Helper()
		patch := fmt.Sprintf(`{"spec":{"suspend":%t}}`, suspend)
		if _, err := targets.Patch(ctx, "t", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setSuspend(true)
	eventually(ctx, t, "Ready=False Suspended", func(ctx context.Context) (bool, string) {
		tgt, err := targets.Get(ctx, "t", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r := condition(tgt.Status.Conditions, "Ready")
		return r != nil && r.Reason == "Suspended" && tgt.Status.Collection != nil && tgt.Status.Collection.ObservedGeneration == tgt.Generation, fmt.Sprintf("%+v", tgt.Status)
	})
	frozen, _, err := targetItems(ctx, ns, "t")
	if err != nil {
		t.Fatal(err)
	}
	updateDeployment(ctx, t, ns, "app-0", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/app:2" })
	if err := kube.AppsV1().Deployments(ns).Delete(ctx, "app-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if now, _, err := targetItems(ctx, ns, "t"); err != nil || len(now) != 3 || now["app-0"].ResourceVersion != frozen["app-0"].ResourceVersion {
		t.Errorf("suspended target changed its items: %d items, %v", len(now), err)
	}

	setSuspend(false)
	want["app-0"] = "registry.example/app:2"
	delete(want, "app-1")
	expectDeploymentItems(ctx, t, ns, "t", want)

	// A Profile change re-extracts every item.
	p, err := kollect.KollectV1alpha1().Profiles(ns).Get(ctx, "deployments", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.Attributes = append(p.Spec.Attributes, v1alpha1.Attribute{Name: "name", Path: "cel:object.metadata.name"})
	if _, err := kollect.KollectV1alpha1().Profiles(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "items carry the new attribute", func(ctx context.Context) (bool, string) {
		items, _, err := targetItems(ctx, ns, "t")
		if err != nil {
			return false, err.Error()
		}
		for name, it := range items {
			if attr(it.Attributes, "name") != name {
				return false, fmt.Sprintf("%s: %v", name, it.Attributes)
			}
		}
		return len(items) == 2, fmt.Sprintf("%d items", len(items))
	})

	// Deleting the Target deletes its items (finalizer), then the Target.
	if err := targets.Delete(ctx, "t", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "Target and items deleted", func(ctx context.Context) (bool, string) {
		items, _, err := targetItems(ctx, ns, "t")
		if err != nil || len(items) > 0 {
			return false, fmt.Sprintf("%d items, %v", len(items), err)
		}
		_, err = targets.Get(ctx, "t", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

// TestKindNotFoundRecovers: a Target for a kind the cluster does not serve
// is Degraded with KindNotFound (and one Warning Event); once the CRD is
// installed the collector finds the kind through discovery and collects.
func TestKindNotFoundRecovers(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const ns = "collect-crd"
	createNamespace(ctx, t, ns, nil)
	createProfile(ctx, t, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: ns},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK:  v1alpha1.GroupVersionKind{Group: "e2e.kollect.dev", Version: "v1", Kind: "Widget"},
			Attributes: []v1alpha1.Attribute{{Name: "size", Path: "{.spec.size}"}},
		},
	})
	createTarget(ctx, t, ns, "widgets", "widgets", nil)
	targets := kollect.KollectV1alpha1().Targets(ns)
	eventually(ctx, t, "Degraded KindNotFound", func(ctx context.Context) (bool, string) {
		tgt, err := targets.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		d, r := condition(tgt.Status.Conditions, "Degraded"), condition(tgt.Status.Conditions, "Ready")
		return d != nil && d.Status == metav1.ConditionTrue && d.Reason == "KindNotFound" && r != nil && r.Status == metav1.ConditionFalse,
			fmt.Sprintf("%+v", tgt.Status)
	})
	eventually(ctx, t, "a KindNotFound Warning Event", func(ctx context.Context) (bool, string) {
		n, err := warnings(ctx, ns, "widgets", "KindNotFound")
		return n == 1, fmt.Sprintf("%d events, %v", n, err)
	})

	dyn := dynamic.NewForConfigOrDie(cluster.RESTConfig())
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": "widgets.e2e.kollect.dev"},
		"spec": map[string]any{
			"group": "e2e.kollect.dev", "scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	begin := time.Now()
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = crds.Delete(context.Background(), "widgets.e2e.kollect.dev", metav1.DeleteOptions{}) })
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "e2e.kollect.dev", Version: "v1", Resource: "widgets"}).Namespace(ns)
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "e2e.kollect.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"size": int64(3)},
	}}
	eventually(ctx, t, "a Widget created", func(ctx context.Context) (bool, string) {
		_, err := widgets.Create(ctx, widget, metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})
	eventually(ctx, t, "the Widget collected, the Target Ready", func(ctx context.Context) (bool, string) {
		items, _, err := targetItems(ctx, ns, "widgets")
		if err != nil || len(items) != 1 || attr(items["w1"].Attributes, "size") != float64(3) {
			return false, fmt.Sprintf("items %v, %v", items, err)
		}
		tgt, err := targets.Get(ctx, "widgets", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r := condition(tgt.Status.Conditions, "Ready")
		return r != nil && r.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", tgt.Status)
	})
	t.Logf("collected %s after the CRD was created", time.Since(begin).Round(time.Millisecond))
}
