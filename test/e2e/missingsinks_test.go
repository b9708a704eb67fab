package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestMissingSinksNamedInWarnings: an Inventory whose three sinks do not
// exist gets a Failed SinkNotFound entry for each, and its Warning Events
// name every one of them (docs/export.md, "Failure reporting"). The
// exporters report together, so their Events share the object, its
// resourceVersion and the reason: recorded one per sink, the Events API's
// series kept the first sink's note and counted the others.
func TestMissingSinksNamedInWarnings(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const ns = "missing-sinks"
	env.Kubectl(t, ctx, "create", "namespace", ns)
	inv, err := env.KollectClient(t).KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "unsunk"},
		Spec: v1alpha1.InventorySpec{
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}},
			DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "portal"}},
			EventSinkRefs:    []v1alpha1.SinkReference{{Name: "changes"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "the inventory")

	eventually(ctx, t, "three SinkNotFound entries", func(ctx context.Context) (bool, string) {
		got, err := env.KollectClient(t).KollectV1alpha1().Inventories(ns).Get(ctx, inv.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		n := 0
		for _, e := range got.Status.SinkExports {
			if e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonSinkNotFound {
				n++
			}
		}
		return n == 3, fmt.Sprintf("%+v", got.Status.SinkExports)
	})
	want := []string{
		"SnapshotSink " + ns + "/audit does not exist",
		"DatabaseSink " + ns + "/portal does not exist",
		"EventSink " + ns + "/changes does not exist",
	}
	eventually(ctx, t, "Warning Events naming the three sinks", func(ctx context.Context) (bool, string) {
		list, err := env.Kube(t).EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var notes []string
		for _, e := range list.Items {
			if e.Regarding.Name == inv.Name && e.Regarding.UID == inv.UID && e.Reason == v1alpha1.ReasonSinkNotFound && e.Type == corev1.EventTypeWarning {
				notes = append(notes, e.Note)
			}
		}
		all := strings.Join(notes, "\n")
		for _, w := range want {
			if !strings.Contains(all, w) {
				return false, fmt.Sprintf("no note says %q; notes: %q", w, notes)
			}
		}
		return true, ""
	})
}
