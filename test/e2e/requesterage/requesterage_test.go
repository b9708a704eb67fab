package requesterage

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/tenancy"
)

const ns = "requester-age"

// TestRequesterMaxAge: with --requester-max-age, a Target, an Inventory
// and a sink whose requester was recorded longer ago stop acting
// (RequesterExpired: the target collects nothing more and keeps its items,
// nothing is exported, the sink is not used) until an update re-affirms
// the requester, after which they work again.
func TestRequesterMaxAge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	env.Kubectl(t, ctx, "create", "namespace", ns)
	apply(t, ctx, fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: first, namespace: %[1]s, labels: {app: age}}
data: {k: v}
---
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: configmaps, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes: [{name: data, path: "{.data}"}]
---
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: configmaps, namespace: %[1]s}
spec:
  profileRef: {name: configmaps}
  labelSelector: {matchLabels: {app: age}}
---
apiVersion: kollect.dev/v1alpha1
kind: SnapshotSink
metadata: {name: files, namespace: %[1]s}
spec: {type: file, endpoint: "file:///age"}
---
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: age, namespace: %[1]s}
spec:
  snapshotSinkRefs: [{name: files}]
`, ns))
	cfg := env.Admin()
	cfg.QPS, cfg.Burst = 50, 100 // three reads per poll
	api := versioned.NewForConfigOrDie(cfg).KollectV1alpha1()
	target := func(ctx context.Context) (ready, degraded *metav1.Condition, items int64) {
		tg, err := api.Targets(ns).Get(ctx, "configmaps", metav1.GetOptions{})
		if err != nil {
			return nil, nil, -1
		}
		if tg.Status.Collection != nil {
			items = tg.Status.Collection.ItemCount
		}
		return meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionReady), meta.FindStatusCondition(tg.Status.Conditions, v1alpha1.ConditionDegraded), items
	}
	entry := func(ctx context.Context) (*v1alpha1.SinkExportStatus, *metav1.Condition) {
		inv, err := api.Inventories(ns).Get(ctx, "age", metav1.GetOptions{})
		if err != nil || len(inv.Status.SinkExports) == 0 {
			return nil, nil
		}
		return &inv.Status.SinkExports[0], meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionDegraded)
	}
	sinkReady := func(ctx context.Context) *metav1.Condition {
		s, err := api.SnapshotSinks(ns).Get(ctx, "files", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
	}
	working := func(ctx context.Context, items int64) (bool, string) {
		ready, _, n := target(ctx)
		e, _ := entry(ctx)
		s := sinkReady(ctx)
		ok := ready != nil && ready.Status == metav1.ConditionTrue && n == items &&
			e != nil && e.Outcome != v1alpha1.OutcomeFailed && s != nil && s.Status == metav1.ConditionTrue
		return ok, fmt.Sprintf("target %+v (%d items); entry %+v; sink %+v", ready, n, e, s)
	}
	created := time.Now()
	eventually(ctx, t, "everything working", func(ctx context.Context) (bool, string) { return working(ctx, 1) })
	t.Logf("working %s after creation", time.Since(created).Round(100*time.Millisecond))

	// Expired: every object says so and stops.
	eventually(ctx, t, "RequesterExpired everywhere", func(ctx context.Context) (bool, string) {
		ready, degraded, _ := target(ctx)
		e, invDegraded := entry(ctx)
		s := sinkReady(ctx)
		ok := ready != nil && ready.Reason == v1alpha1.ReasonRequesterExpired && ready.Status == metav1.ConditionFalse &&
			degraded != nil && degraded.Reason == v1alpha1.ReasonRequesterExpired && degraded.Status == metav1.ConditionTrue &&
			e != nil && e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonRequesterExpired &&
			invDegraded != nil && invDegraded.Reason == v1alpha1.ReasonRequesterExpired &&
			s != nil && s.Status == metav1.ConditionFalse && s.Reason == v1alpha1.ReasonRequesterExpired
		return ok, fmt.Sprintf("target %+v %+v; entry %+v; sink %+v", ready, degraded, e, s)
	})
	t.Logf("RequesterExpired everywhere %s after creation (--requester-max-age=%s)", time.Since(created).Round(100*time.Millisecond), maxAge)
	if _, degraded, _ := target(ctx); !strings.Contains(degraded.Message, "--requester-max-age="+maxAge.String()) || !strings.Contains(degraded.Message, tenancy.AnnotationReaffirm) {
		t.Errorf("the target's message should name the flag and how to re-affirm: %s", degraded.Message)
	}

	// An expired target collects nothing more and keeps its items.
	_, err := env.Kube(t).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "second", Labels: map[string]string{"app": "age"}},
		Data:       map[string]string{"k": "v2"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(5 * time.Second) // one full walk each
		list, err := api.InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Fatalf("items while expired: %v, err %v; want the 1 collected before", len(list.Items), err)
		}
	}

	// Re-affirmed, each works again.
	// recordedAt has whole seconds; each kubectl call below takes about a
	// second on a loaded machine, so the time is taken before the first.
	reaffirmed := time.Now().Truncate(time.Second)
	stamp := fmt.Sprint(time.Now().Unix())
	for _, obj := range []string{"targets.kollect.dev/configmaps", "inventories.kollect.dev/age", "snapshotsinks.kollect.dev/files"} {
		env.Kubectl(t, ctx, "annotate", "--overwrite", "-n", ns, obj, tenancy.AnnotationReaffirm+"="+stamp)
	}
	eventually(ctx, t, "working again after re-affirming", func(ctx context.Context) (bool, string) { return working(ctx, 2) })
	t.Logf("working again %s after re-affirming", time.Since(reaffirmed).Round(100*time.Millisecond))
	tg, err := api.Targets(ns).Get(ctx, "configmaps", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if at := tg.Status.Requester.RecordedAt; at == nil || at.Time.Before(reaffirmed) {
		t.Errorf("re-affirming left recordedAt at %v", at)
	}
}

func apply(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// eventually polls cond until it holds, for at most a minute and a half.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	// cond reads with ctx, not the poll's: the last reading is the one
	// that explains a timeout.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		ok, said := cond(ctx)
		last = said
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached within 90s; last: %s", what, last)
	}
}
