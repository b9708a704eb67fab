package collect

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// configMapProfile collects the value of ConfigMaps.
func configMapProfile(ns string) *v1alpha1.Profile {
	return &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK:  v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "value", Path: "{.data.value}"}},
		},
	}
}

// createConfigMaps creates ConfigMaps cm-<from> to cm-<to-1> labelled quota=yes.
func createConfigMaps(ctx context.Context, t *testing.T, ns string, from, to int, value string) {
	t.Helper()
	parallel(t, to-from, func(i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", from+i), Labels: map[string]string{"quota": "yes"}},
			Data:       map[string]string{"value": value},
		}, metav1.CreateOptions{})
		return err
	})
}

// collection is what a test reads of a Target: its items by source name,
// its observation and its Degraded condition.
type collection struct {
	items    map[string]v1alpha1.InventoryItem
	obs      v1alpha1.CollectionObservation
	degraded metav1.Condition
}

func (c collection) String() string {
	return fmt.Sprintf("%d items, overQuotaCount %d, Degraded %s %s %q", len(c.items), c.obs.OverQuotaCount, c.degraded.Status, c.degraded.Reason, c.degraded.Message)
}

func readCollection(ctx context.Context, ns, name string) (collection, error) {
	var c collection
	tgt, err := kollect.KollectV1alpha1().Targets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return c, err
	}
	if tgt.Status.Collection != nil {
		c.obs = *tgt.Status.Collection
	}
	if d := condition(tgt.Status.Conditions, "Degraded"); d != nil {
		c.degraded = *d
	}
	c.items, _, err = targetItems(ctx, ns, name)
	return c, err
}

// waitCollection waits until the collection of the Target "cms" of ns
// satisfies ok.
func waitCollection(ctx context.Context, t *testing.T, ns, what string, ok func(collection) bool) collection {
	t.Helper()
	var c collection
	eventually(ctx, t, fmt.Sprintf("%s/cms: %s", ns, what), func(ctx context.Context) (bool, string) {
		var err error
		if c, err = readCollection(ctx, ns, "cms"); err != nil {
			return false, err.Error()
		}
		return ok(c), c.String()
	})
	return c
}

// overQuota is a Target holding items items and reporting over objects
// over its quota, Degraded with QuotaExceeded and a message with each of want.
func overQuota(items int, over int64, want ...string) func(collection) bool {
	return func(c collection) bool {
		if len(c.items) != items || c.obs.ItemCount != int64(items) || c.obs.OverQuotaCount != over ||
			c.degraded.Status != metav1.ConditionTrue || c.degraded.Reason != "QuotaExceeded" || c.obs.Reason != "QuotaExceeded" {
			return false
		}
		for _, w := range want {
			if !strings.Contains(c.degraded.Message, w) {
				return false
			}
		}
		return true
	}
}

// collectedAll is a Target holding items items, nothing over quota.
func collectedAll(items int) func(collection) bool {
	return func(c collection) bool {
		return len(c.items) == items && c.obs.ItemCount == int64(items) && c.obs.OverQuotaCount == 0 &&
			c.degraded.Status == metav1.ConditionFalse
	}
}

// TestItemQuota (issue 12, acceptance 5): a Scope with maxItems 100 over a
// Target matching 150 ConfigMaps gives exactly 100 items and reports the
// other 50 (Degraded, QuotaExceeded, overQuotaCount, the count and the
// limit in the message), while another namespace keeps collecting. Items
// keep their places; freed places go to waiting objects; raising the limit
// collects the rest. An object whose item would exceed maxItemBytes is not
// collected, and counted.
func TestItemQuota(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	const full, other = "quota-full", "quota-other"
	createNamespace(ctx, t, full, nil)
	createNamespace(ctx, t, other, nil)
	scopes := kollect.KollectV1alpha1().Scopes(full)
	if _, err := scopes.Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxItems: ptr(int64(100))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createConfigMaps(ctx, t, full, 0, 150, "v")
	createConfigMaps(ctx, t, other, 0, 30, "v")
	for _, ns := range []string{full, other} {
		createProfile(ctx, t, configMapProfile(ns))
		createTarget(ctx, t, ns, "cms", "configmaps", map[string]string{"quota": "yes"})
	}

	first := waitCollection(ctx, t, full, "100 items, 50 over the quota", overQuota(100, 50,
		"50 matching objects not collected", `hold 100 items and the limit is 100, the maxItems of Scope "quota" in namespace "quota-full"`))
	t.Logf("over quota: %s", first.degraded.Message)
	eventually(ctx, t, "a Warning Event QuotaExceeded", func(ctx context.Context) (bool, string) {
		n, err := warnings(ctx, full, "cms", "QuotaExceeded")
		return err == nil && n > 0, fmt.Sprintf("%d events, %v", n, err)
	})
	// The other namespace collects everything, and keeps collecting.
	waitCollection(ctx, t, other, "all 30 collected", collectedAll(30))
	createConfigMaps(ctx, t, other, 30, 40, "v")
	waitCollection(ctx, t, other, "the 10 new ones collected", collectedAll(40))

	// Items keep their places: the same 100, after a wait.
	time.Sleep(3 * time.Second)
	same, err := readCollection(ctx, full, "cms")
	if err != nil {
		t.Fatal(err)
	}
	for name := range first.items {
		if _, ok := same.items[name]; !ok || len(same.items) != 100 {
			t.Fatalf("collected items changed without a change of objects: %s gone, %s", name, same)
		}
	}

	// Deleting 10 collected objects frees 10 places for waiting objects.
	var deleted []string
	for name := range first.items {
		if len(deleted) == 10 {
			break
		}
		if err := kube.CoreV1().ConfigMaps(full).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, name)
	}
	refilled := waitCollection(ctx, t, full, "10 waiting objects take the freed places", overQuota(100, 40, "40 matching objects not collected"))
	kept := 0
	for name := range first.items {
		if _, ok := refilled.items[name]; ok {
			kept++
		}
	}
	if kept != 90 {
		t.Errorf("%d of the 90 remaining items kept their places, want all", kept)
	}

	// Raising the limit collects the rest.
	scope, err := scopes.Get(ctx, "quota", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scope.Spec.MaxItems = ptr(int64(1000))
	if scope, err = scopes.Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCollection(ctx, t, full, "the limit raised, all 140 collected", collectedAll(140))

	// maxItemBytes: an item over 1Ki is not collected, and counted; the
	// others stay.
	scope.Spec.MaxItemBytes = ptr(resource.MustParse("1Ki"))
	if _, err := scopes.Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	createConfigMaps(ctx, t, full, 150, 151, strings.Repeat("x", 2048))
	createConfigMaps(ctx, t, full, 151, 152, "small")
	big := waitCollection(ctx, t, full, "the large object left out", overQuota(141, 1,
		"1 matching object not collected: each item would be larger than 1Ki", `maxItemBytes of Scope "quota" in namespace "quota-full"`))
	if _, ok := big.items["cm-150"]; ok {
		t.Error("the object over maxItemBytes was collected")
	}
	if _, ok := big.items["cm-151"]; !ok {
		t.Error("the small object after it was not collected")
	}
	// Shrunk under the limit, it is collected.
	cm, err := kube.CoreV1().ConfigMaps(full).Get(ctx, "cm-150", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["value"] = "small now"
	if _, err := kube.CoreV1().ConfigMaps(full).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCollection(ctx, t, full, "the shrunk object collected", collectedAll(142))
}

// TestClusterItemQuota: a ClusterScope's maxItemBytes applies to the
// ClusterTargets' items: a ConfigMap over it is left out and counted, the
// ClusterTarget Degraded with QuotaExceeded naming the ClusterScope; with
// the ClusterScope gone it is collected. (maxItems counts every
// ClusterTarget of the cluster together, which tests sharing this cluster
// also create; the collector counts both quotas alike, see TestItemQuota.)
func TestClusterItemQuota(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const ns = "quota-cluster"
	createNamespace(ctx, t, ns, nil)
	createConfigMaps(ctx, t, ns, 0, 2, "small")
	createConfigMaps(ctx, t, ns, 2, 3, strings.Repeat("x", 2048))
	createProfile(ctx, t, configMapProfile(ns))
	scopes := kollect.KollectV1alpha1().ClusterScopes()
	if _, err := scopes.Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "quota-item-bytes"},
		Spec: v1alpha1.ClusterScopeSpec{MaxItemBytes: ptr(resource.MustParse("1Ki"))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = scopes.Delete(context.Background(), "quota-item-bytes", metav1.DeleteOptions{}) })
	cts := kollect.KollectV1alpha1().ClusterTargets()
	if _, err := cts.Create(ctx, &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "quota-configmaps"},
		Spec: v1alpha1.ClusterTargetSpec{
			ProfileRef:        v1alpha1.NamespacedObjectReference{Namespace: ns, Name: "configmaps"},
			IncludeNamespaces: []string{ns},
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"quota": "yes"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cts.Delete(context.Background(), "quota-configmaps", metav1.DeleteOptions{}) })

	expect := func(what string, items []string, over int64, reason string, message ...string) {
		t.Helper()
		eventually(ctx, t, what, func(ctx context.Context) (bool, string) {
			got, err := clusterItemNames(ctx, "quota-configmaps")
			if err != nil {
				return false, err.Error()
			}
			ct, err := cts.Get(ctx, "quota-configmaps", metav1.GetOptions{})
			if err != nil || ct.Status.Collection == nil {
				return false, fmt.Sprintf("%v, %+v", err, ct.Status)
			}
			d := condition(ct.Status.Conditions, "Degraded")
			state := fmt.Sprintf("items %v, overQuotaCount %d, Degraded %+v", got, ct.Status.Collection.OverQuotaCount, d)
			if strings.Join(got, ",") != strings.Join(items, ",") || ct.Status.Collection.OverQuotaCount != over || d == nil || d.Reason != reason {
				return false, state
			}
			for _, m := range message {
				if !strings.Contains(d.Message, m) {
					return false, state
				}
			}
			return true, ""
		})
	}
	expect("the large ConfigMap left out", []string{"cm-000", "cm-001"}, 1, "QuotaExceeded",
		"1 matching object not collected: each item would be larger than 1Ki", `maxItemBytes of ClusterScope "quota-item-bytes"`)
	if err := scopes.Delete(ctx, "quota-item-bytes", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("all collected without the ClusterScope", []string{"cm-000", "cm-001", "cm-002"}, 0, "AsExpected")
}

// clusterItemNames lists the source names of a ClusterTarget's items, sorted.
func clusterItemNames(ctx context.Context, target string) ([]string, error) {
	list, err := kollect.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=" + target})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range list.Items {
		out = append(out, it.Source.Name)
	}
	sort.Strings(out)
	return out, nil
}
