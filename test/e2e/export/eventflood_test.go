package export

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// TestEventsDoNotDelayExports: the Warning Events of one tenant's many
// inventories do not hold back another tenant's export. Events and the
// sinks' Secret reads shared one client and its 20 requests/s, so 360
// inventories naming missing sinks delayed an unrelated sink's first
// export from 0.26 s to 15 s, and a storm of spec updates for minutes
// (found by review, helper 65). Measured by order, not time: the victim,
// created once the flood's Events have begun, is exported while fewer
// than half of them have been posted.
func TestEventsDoNotDelayExports(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	suffix := randomSuffix()
	const floodNamespaces, perNamespace = 4, 90 // within the default quota of 100
	cfg := rest.CopyConfig(cluster.RESTConfig())
	cfg.QPS, cfg.Burst = -1, 0
	fast, err := versioned.NewForConfig(cfg)
	must(t, err, "client")
	var flood []string
	for i := range floodNamespaces {
		ns := fmt.Sprintf("flood-%d-%s", i, suffix)
		namespace(ctx, t, ns)
		flood = append(flood, ns)
	}
	var wg sync.WaitGroup
	for _, ns := range flood {
		for c := range 3 {
			wg.Go(func() {
				for i := c; i < perNamespace; i += 3 {
					_, err := fast.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inv-%02d", i)},
						Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "missing"}}}}, metav1.CreateOptions{})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	posted := func(ctx context.Context) (int, error) {
		n := 0
		for _, ns := range flood {
			l, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return 0, err
			}
			for _, e := range l.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonSinkNotFound {
					n++
				}
			}
		}
		return n, nil
	}
	eventually(ctx, t, "the flood's first Warning Event", func(ctx context.Context) (bool, string) {
		n, err := posted(ctx)
		return err == nil && n > 0, fmt.Sprintf("%d posted, err %v", n, err)
	})

	// The victim: a webhook sink whose Secret the exporter must read.
	ns := "victim-" + suffix
	namespace(ctx, t, ns)
	receiver := startTokenReceiver(t)
	secret(ctx, t, ns, "hook-token", map[string]string{"token": "victim-token"})
	collectDeployments(ctx, t, ns, 1)
	_, err = kollect.KollectV1alpha1().EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: receiver.srv.URL + "/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-token"},
			TLS:       &v1alpha1.TLSConfig{CABundle: caBundle(receiver.srv)}},
	}, metav1.CreateOptions{})
	must(t, err, "the victim's sink")
	_, err = kollect.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "victim"},
		Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "hook"}}}}, metav1.CreateOptions{})
	must(t, err, "the victim's inventory")
	eventually(ctx, t, "the victim exported with the Secret's token", func(ctx context.Context) (bool, string) {
		inv, err := kollect.KollectV1alpha1().Inventories(ns).Get(ctx, "victim", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		_, with := receiver.seen("victim-token")
		for _, e := range inv.Status.SinkExports {
			if e.Outcome == v1alpha1.OutcomeExported && with > 0 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("entries %+v, %d deliveries with the token", inv.Status.SinkExports, with)
	})
	n, err := posted(ctx)
	must(t, err, "counting the flood's Events")
	t.Logf("the victim was exported with %d of the flood's %d Warning Events posted", n, floodNamespaces*perNamespace)
	if n >= floodNamespaces*perNamespace/2 {
		t.Errorf("the victim was exported only once %d of the flood's %d Warning Events had been posted: its Secret read waited behind them", n, floodNamespaces*perNamespace)
	}
}
