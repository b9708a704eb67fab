package collect

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestClusterTargetNamespaces is acceptance point 5: a ClusterTarget over
// the namespaces labelled team=a; labelling a namespace adds its objects,
// removing the label removes them. The kollect.dev/watch labels apply too
// (disabled on a namespace, enabled on an object in it wins), and deleting
// the ClusterTarget deletes its items.
func TestClusterTargetNamespaces(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	createNamespace(ctx, t, "ct-config", nil)
	createNamespace(ctx, t, "ct-1", map[string]string{"team": "a"})
	createNamespace(ctx, t, "ct-2", nil)
	createNamespace(ctx, t, "ct-3", map[string]string{"team": "a", "kollect.dev/watch": "disabled"})
	createProfile(ctx, t, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: "ct-config"},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK:  v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "color", Path: "{.data.color}"}},
		},
	})
	configMap := func(ns, name string, labels map[string]string) {
		t.Helper()
		labels["app"] = "ct"
		if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
			Data:       map[string]string{"color": ns + "-" + name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMap("ct-1", "cm-a", map[string]string{})
	configMap("ct-1", "cm-b", map[string]string{"kollect.dev/watch": "disabled"})
	configMap("ct-2", "cm-a", map[string]string{})
	configMap("ct-3", "cm-a", map[string]string{})
	configMap("ct-3", "cm-c", map[string]string{"kollect.dev/watch": "enabled"})

	ct := &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a-configmaps"},
		Spec: v1alpha1.ClusterTargetSpec{
			ProfileRef:        v1alpha1.NamespacedObjectReference{Namespace: "ct-config", Name: "configmaps"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"app": "ct"}},
		},
	}
	cts := kollect.KollectV1alpha1().ClusterTargets()
	if _, err := cts.Create(ctx, ct, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cts.Delete(context.Background(), ct.Name, metav1.DeleteOptions{}) })

	expect := func(what string, wantItems, wantNamespaces []string) {
		t.Helper()
		eventually(ctx, t, what, func(ctx context.Context) (bool, string) {
			got, err := clusterItems(ctx, ct.Name)
			if err != nil {
				return false, err.Error()
			}
			if !slices.Equal(got, wantItems) {
				return false, fmt.Sprintf("items %v, want %v", got, wantItems)
			}
			cur, err := cts.Get(ctx, ct.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if !slices.Equal(cur.Status.MatchedNamespaces, wantNamespaces) || cur.Status.Collection == nil || cur.Status.Collection.ItemCount != int64(len(wantItems)) {
				return false, fmt.Sprintf("status %+v", cur.Status)
			}
			return true, ""
		})
	}
	expect("namespaces labelled team=a", []string{"ct-1/cm-a=ct-1-cm-a", "ct-3/cm-c=ct-3-cm-c"}, []string{"ct-1", "ct-3"})

	// Item labels name the profile's namespace too.
	list, err := kollect.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=" + ct.Name})
	if err != nil || len(list.Items) == 0 {
		t.Fatalf("items: %v", err)
	}
	if l := list.Items[0].Labels; l["kollect.dev/profile-namespace"] != "ct-config" || l["kollect.dev/profile"] != "configmaps" || l["kollect.dev/source-group"] != "core" {
		t.Errorf("labels %v", l)
	}

	labelNamespace(ctx, t, "ct-2", `{"metadata":{"labels":{"team":"a"}}}`)
	expect("after labelling ct-2", []string{"ct-1/cm-a=ct-1-cm-a", "ct-2/cm-a=ct-2-cm-a", "ct-3/cm-c=ct-3-cm-c"}, []string{"ct-1", "ct-2", "ct-3"})
	labelNamespace(ctx, t, "ct-1", `{"metadata":{"labels":{"team":null}}}`)
	expect("after unlabelling ct-1", []string{"ct-2/cm-a=ct-2-cm-a", "ct-3/cm-c=ct-3-cm-c"}, []string{"ct-2", "ct-3"})
	labelNamespace(ctx, t, "ct-3", `{"metadata":{"labels":{"kollect.dev/watch":null}}}`)
	expect("after enabling ct-3", []string{"ct-2/cm-a=ct-2-cm-a", "ct-3/cm-a=ct-3-cm-a", "ct-3/cm-c=ct-3-cm-c"}, []string{"ct-2", "ct-3"})

	// Deleting the ClusterTarget deletes its items, then the object goes.
	if err := cts.Delete(ctx, ct.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "ClusterTarget and items deleted", func(ctx context.Context) (bool, string) {
		got, err := clusterItems(ctx, ct.Name)
		if err != nil || len(got) > 0 {
			return false, fmt.Sprintf("items %v, %v", got, err)
		}
		_, err = cts.Get(ctx, ct.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
}

func labelNamespace(ctx context.Context, t *testing.T, ns, patch string) {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clusterItems lists a ClusterTarget's items as "namespace/name=color", sorted.
func clusterItems(ctx context.Context, target string) ([]string, error) {
	list, err := kollect.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=" + target})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range list.Items {
		var color string
		_ = json.Unmarshal(it.Attributes["color"].Raw, &color)
		out = append(out, it.Source.Namespace+"/"+it.Source.Name+"="+color)
	}
	sort.Strings(out)
	return out, nil
}
