package idlestatus

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/eventfold"
)

const (
	// watchdog is the export watchdog period the replica runs with (the
	// default, the seed's 30s).
	watchdog = 30 * time.Second
	// window is how long the Inventories are watched at rest.
	window = 2 * time.Minute
	// The exporter's backoff after a failed run: 1s doubling to 5m, each
	// delay drawn from [half, all] of its step (pkg/controllers/export).
	backoffMin, backoffMax = time.Second, 5 * time.Minute
)

// backoffSteps is the most failed runs after the first that fit in d: the
// shortest delays, from the first step on, each at half its step.
func backoffSteps(d time.Duration) int {
	n, total := 0, time.Duration(0)
	for step := backoffMin; ; step = min(2*step, backoffMax) {
		if total += step / 2; total > d {
			return n
		}
		n++
	}
}

// TestStatusWritesAtRest is issue 11's acceptance point 5: at rest, for
// 2 minutes, the watch events of four Inventories (each one a status
// write) are counted: with interval 0s at most one per watchdog period
// (+1), with 30s at most one per 30s (+1); one whose sink is missing only
// on transitions (≤ 2); one whose sink fails (the receiver answers 500)
// only on transitions and backoff steps (≤ the steps that fit + 2).
func TestStatusWritesAtRest(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	const ns = "idle"
	collectConfigMaps(ctx, t, ns, 3)
	api := kollect.KollectV1alpha1()
	var err error
	for _, name := range []string{"zero", "thirty"} {
		_, err = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: "files-" + name},
			Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///" + name},
		}, metav1.CreateOptions{})
		must(t, err, "file sink "+name)
	}
	receiver := eventfold.StartWebhook(t, "")
	receiver.Fail(http.StatusInternalServerError)
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "failing"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: receiver.URL + "/events",
			TLS:     &v1alpha1.TLSConfig{CABundle: receiver.CA},
			Webhook: &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 2 * time.Second}, MaxAttempts: 1}},
	}, metav1.CreateOptions{})
	must(t, err, "failing webhook sink")

	zero, thirty := metav1.Duration{}, metav1.Duration{Duration: 30 * time.Second}
	for _, inv := range []v1alpha1.Inventory{
		{ObjectMeta: metav1.ObjectMeta{Name: "zero"}, Spec: v1alpha1.InventorySpec{ExportMinInterval: &zero,
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "files-zero"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "thirty"}, Spec: v1alpha1.InventorySpec{ExportMinInterval: &thirty,
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "files-thirty"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "missing"}, Spec: v1alpha1.InventorySpec{ExportMinInterval: &zero,
			EventSinkRefs: []v1alpha1.SinkReference{{Name: "absent"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "failing"}, Spec: v1alpha1.InventorySpec{ExportMinInterval: &zero,
			EventSinkRefs: []v1alpha1.SinkReference{{Name: "failing"}}}},
	} {
		_, err = api.Inventories(ns).Create(ctx, &inv, metav1.CreateOptions{})
		must(t, err, "inventory "+inv.Name)
	}

	// At rest: the two working ones synced with the three items, the
	// missing sink reported, the failing one failed at least once.
	var last string
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := api.Inventories(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		for _, inv := range list.Items {
			if len(inv.Status.SinkExports) != 1 {
				last = fmt.Sprintf("%s: %d entries", inv.Name, len(inv.Status.SinkExports))
				return false, nil
			}
			e := inv.Status.SinkExports[0]
			synced := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionSynced)
			var ok bool
			switch inv.Name {
			case "zero", "thirty":
				ok = e.Outcome != v1alpha1.OutcomeFailed && e.ItemCount == 3 && synced != nil && synced.Status == metav1.ConditionTrue
			case "missing":
				ok = e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonSinkNotFound
			case "failing":
				ok = e.Outcome == v1alpha1.OutcomeFailed
			}
			if !ok {
				last = fmt.Sprintf("%s: %s %s %d items: %s", inv.Name, e.Outcome, e.Reason, e.ItemCount, e.Message)
				return false, nil
			}
		}
		return len(list.Items) == 4, nil
	})
	if err != nil {
		t.Fatalf("the Inventories never came to rest; last: %s", last)
	}

	writes := countWrites(ctx, t, ns, window)
	steps := backoffSteps(window)
	t.Logf("status writes in %s at rest: zero (0s, watchdog %s) %d, thirty (30s) %d, missing sink %d, failing sink %d (backoff steps that fit: %d); the failing receiver got %d requests",
		window, watchdog, writes["zero"], writes["thirty"], writes["missing"], writes["failing"], steps, receiver.Requests())
	for _, c := range []struct {
		name     string
		min, max int
	}{
		// The watchdog and the re-export are due 4 times in 2 minutes:
		// at least 2 shows the count sees them.
		{"zero", 2, int(window/watchdog) + 1},
		{"thirty", 2, int(window/(30*time.Second)) + 1},
		{"missing", 0, 2},
		// A failing sink is tried again, and says so, at each step.
		{"failing", 1, steps + 2},
	} {
		if n := writes[c.name]; n < c.min || n > c.max {
			t.Errorf("%s: %d status writes in %s at rest; want %d to %d", c.name, n, window, c.min, c.max)
		}
	}
}

// countWrites counts the MODIFIED watch events of each Inventory of ns
// during d: each one is a status write, since no spec changes.
func countWrites(ctx context.Context, t *testing.T, ns string, d time.Duration) map[string]int {
	t.Helper()
	api := kollect.KollectV1alpha1().Inventories(ns)
	list, err := api.List(ctx, metav1.ListOptions{})
	must(t, err, "list inventories")
	rv := list.ResourceVersion
	counts := map[string]int{}
	end := time.After(d)
	for {
		w, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		must(t, err, "watch inventories")
		for open := true; open; {
			select {
			case <-end:
				w.Stop()
				return counts
			case ev, ok := <-w.ResultChan():
				if !ok {
					open = false // the server ended the watch: resume from rv
					break
				}
				inv, isInv := ev.Object.(*v1alpha1.Inventory)
				if !isInv {
					if ev.Type == watch.Error {
						t.Fatalf("watching inventories: %v", ev.Object)
					}
					continue
				}
				rv = inv.ResourceVersion
				if ev.Type == watch.Modified {
					counts[inv.Name]++
				}
			}
		}
	}
}

// collectConfigMaps creates the namespace ns (deleted after the test),
// n ConfigMaps labelled app=web in it and the Profile and Target that
// collect them.
func collectConfigMaps(ctx context.Context, t *testing.T, ns string, n int) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err, "namespace")
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	for i := range n {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"app": "web"}},
			Data:       map[string]string{"value": fmt.Sprint(i)},
		}, metav1.CreateOptions{})
		must(t, err, "configmap")
	}
	api := kollect.KollectV1alpha1()
	_, err = api.Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "value", Path: "{.data.value}"}}},
	}, metav1.CreateOptions{})
	must(t, err, "profile")
	_, err = api.Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, "target")
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
