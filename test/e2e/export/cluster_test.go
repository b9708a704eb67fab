package export

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// TestClusterInventory: a ClusterInventory exports the ClusterInventoryItems
// of a ClusterTarget to a sink in spec.sinkNamespace; the document lives
// at the default pathTemplate's <cluster>/_cluster/<name>.json, names the
// cluster, and holds the same checksum as the items.
func TestClusterInventory(t *testing.T) {
	ctx := testContext(t, 2*time.Minute)
	const cfgNS, appNS = "export-cluster-config", "export-cluster-apps"
	namespace(ctx, t, cfgNS)
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS,
		Labels: map[string]string{"export-e2e": "cluster"}}}, metav1.CreateOptions{})
	must(t, err, "namespace")
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), appNS, metav1.DeleteOptions{}) })
	for i := range 3 {
		_, err := kube.AppsV1().Deployments(appNS).Create(ctx, deployment(appNS, fmt.Sprintf("svc-%d", i), "registry.example/svc:1"), metav1.CreateOptions{})
		must(t, err, "deployment")
	}
	api := kollect.KollectV1alpha1()
	_, err = api.Profiles(cfgNS).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}}},
	}, metav1.CreateOptions{})
	must(t, err, "profile")
	_, err = api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "export-e2e-apps"},
		Spec: v1alpha1.ClusterTargetSpec{
			ProfileRef:        v1alpha1.NamespacedObjectReference{Namespace: cfgNS, Name: "deployments"},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"export-e2e": "cluster"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "cluster target")
	t.Cleanup(func() {
		_ = api.ClusterTargets().Delete(context.Background(), "export-e2e-apps", metav1.DeleteOptions{})
	})
	endpoint, dir := fileEndpoint(cfgNS)
	_, err = api.SnapshotSinks(cfgNS).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "rollup"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: endpoint},
	}, metav1.CreateOptions{})
	must(t, err, "sink")
	_, err = api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "export-e2e-rollup"},
		Spec: v1alpha1.ClusterInventorySpec{
			SinkNamespace:    cfgNS,
			TargetRefs:       []v1alpha1.LocalObjectReference{{Name: "export-e2e-apps"}},
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "rollup"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "cluster inventory")
	t.Cleanup(func() {
		_ = api.ClusterInventories().Delete(context.Background(), "export-e2e-rollup", metav1.DeleteOptions{})
	})

	eventually(ctx, t, "cluster inventory exported", func(ctx context.Context) (bool, string) {
		items, err := api.ClusterInventoryItems().List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelTarget + "=export-e2e-apps"})
		if err != nil {
			return false, err.Error()
		}
		var c sink.Checksum
		for _, it := range items.Items {
			c.Add(it.Name, it.Hash)
		}
		ci, err := api.ClusterInventories().Get(ctx, "export-e2e-rollup", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		synced := meta.FindStatusCondition(ci.Status.Conditions, v1alpha1.ConditionSynced)
		env, err := readFileEnvelope(filepath.Join(dir, clusterName, "_cluster", "export-e2e-rollup.json"))
		switch {
		case len(items.Items) != 3:
			return false, fmt.Sprintf("%d items", len(items.Items))
		case synced == nil || synced.Status != metav1.ConditionTrue:
			return false, fmt.Sprintf("Synced %+v", synced)
		case err != nil:
			return false, err.Error()
		case env.Checksum != c.String() || env.ItemCount != 3 || env.Inventory.Kind != "ClusterInventory":
			return false, fmt.Sprintf("document checksum %s count %d kind %s; items %s", env.Checksum, env.ItemCount, env.Inventory.Kind, c.String())
		case env.Cluster != clusterName || env.Inventory.Cluster != clusterName:
			return false, fmt.Sprintf("document of cluster %q (inventory's %q); want %q", env.Cluster, env.Inventory.Cluster, clusterName)
		}
		return true, ""
	})
}
