package collect

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	clientv3 "go.etcd.io/etcd/client/v3"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// TestDeployments is acceptance points 1 and 2 of issue 4: 200 Deployments
// become 200 items with the right attributes; changing one image updates
// exactly that item; deleting a Deployment or relabelling it out of the
// selector deletes its item; a watch opened before those changes receives
// exactly their MODIFIED and DELETED events; after etcd compaction the same
// watch gets 410 Gone and a relist recovers.
func TestDeployments(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	const ns, n = "collect-deployments", 200
	createNamespace(ctx, t, ns, nil)
	createProfile(ctx, t, deploymentProfile(ns, "deployments"))
	createTarget(ctx, t, ns, "web", "deployments", map[string]string{"app": "web"})

	image := func(i int) string { return fmt.Sprintf("registry.example/web:1.%d", i%7) }
	want := map[string]string{}
	for i := range n {
		want[fmt.Sprintf("web-%03d", i)] = image(i)
	}
	begin := time.Now()
	parallel(t, n+5, func(i int) error {
		d := deploymentObject(ns, fmt.Sprintf("web-%03d", i), image(i), int32(i%4+1), map[string]string{"app": "web"})
		if i >= n {
			// Not selected by the Target.
			d = deploymentObject(ns, fmt.Sprintf("other-%d", i), "registry.example/other:1", 1, map[string]string{"app": "other"})
		}
		_, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	})
	items := expectDeploymentItems(ctx, t, ns, "web", want)
	t.Logf("%d Deployments to %d items: %s", n, len(items), time.Since(begin).Round(time.Millisecond))

	hexHash := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for name, it := range items {
		i := 0
		fmt.Sscanf(name, "web-%03d", &i)
		if got := attr(it.Attributes, "replicas"); got != float64(i%4+1) {
			t.Errorf("%s: replicas %v, want %d", name, got, i%4+1)
		}
		if it.Source.Kind != "Deployment" || it.Source.APIVersion != "apps/v1" || it.Source.Namespace != ns || it.Source.UID == "" {
			t.Errorf("%s: source %+v", name, it.Source)
		}
		if !hexHash.MatchString(it.Hash) {
			t.Errorf("%s: hash %q", name, it.Hash)
		}
		for k, v := range map[string]string{"kollect.dev/target": "web", "kollect.dev/profile": "deployments", "kollect.dev/source-kind": "Deployment", "kollect.dev/source-group": "apps"} {
			if it.Labels[k] != v {
				t.Errorf("%s: label %s=%q, want %q", name, k, it.Labels[k], v)
			}
		}
	}
	// Field selectors on the source.
	bySource, err := kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{FieldSelector: "source.name=web-042,source.kind=Deployment"})
	if err != nil || len(bySource.Items) != 1 || bySource.Items[0].Source.Name != "web-042" {
		t.Errorf("field selector source.name=web-042: %v, %v", bySource, err)
	}
	eventually(ctx, t, "Target Ready with 200 items", func(ctx context.Context) (bool, string) {
		tgt, err := kollect.KollectV1alpha1().Targets(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := condition(tgt.Status.Conditions, "Ready")
		c := tgt.Status.Collection
		if ready == nil || ready.Status != metav1.ConditionTrue || c == nil || c.ItemCount != n || c.LastFullSyncTime == nil {
			return false, fmt.Sprintf("status %+v", tgt.Status)
		}
		return true, ""
	})

	// The cursor: everything after it is the change set.
	before, rv0, err := targetItems(ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	updateDeployment(ctx, t, ns, "web-007", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/web:2.0" })
	if err := kube.AppsV1().Deployments(ns).Delete(ctx, "web-008", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	updateDeployment(ctx, t, ns, "web-009", func(d *appsv1.Deployment) { d.Labels["app"] = "retired" })
	// A change the Profile does not see: the item must not be rewritten.
	updateDeployment(ctx, t, ns, "web-010", func(d *appsv1.Deployment) {
		d.Annotations = map[string]string{"note": "not collected"}
	})
	want["web-007"] = "registry.example/web:2.0"
	delete(want, "web-008")
	delete(want, "web-009")
	after := expectDeploymentItems(ctx, t, ns, "web", want)
	// Give stray writes a chance to show before checking there are none.
	time.Sleep(2 * time.Second)
	after, _, err = targetItems(ctx, ns, "web")
	if err != nil {
		t.Fatal(err)
	}
	for name, it := range after {
		moved := it.ResourceVersion != before[name].ResourceVersion
		if moved != (name == "web-007") {
			t.Errorf("item of %s: resourceVersion %s -> %s", name, before[name].ResourceVersion, it.ResourceVersion)
		}
	}
	changed := after["web-007"]
	deleted := map[string]bool{before["web-008"].Name: true, before["web-009"].Name: true}

	// Acceptance 2: the changes since rv0, tombstones included.
	w, err := kollect.KollectV1alpha1().InventoryItems(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv0, LabelSelector: "kollect.dev/target=web"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(5 * time.Second)
collect:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				break collect
			}
			it, _ := ev.Object.(*v1alpha1.InventoryItem)
			if it == nil {
				t.Fatalf("watch event %s: %#v", ev.Type, ev.Object)
			}
			got = append(got, fmt.Sprintf("%s %s", ev.Type, it.Name))
			switch {
			case ev.Type == watch.Modified && it.Name == changed.Name && fmt.Sprint(attr(it.Attributes, "image")) == "[registry.example/web:2.0]":
			case ev.Type == watch.Deleted && deleted[it.Name]:
				delete(deleted, it.Name)
			default:
				t.Errorf("unexpected event %s %s (source %s)", ev.Type, it.Name, it.Source.Name)
			}
		case <-timeout:
			break collect
		}
	}
	w.Stop()
	if len(got) != 3 || len(deleted) != 0 {
		t.Errorf("events since %s: %v; want MODIFIED %s and DELETED of the items of web-008 and web-009", rv0, got, changed.Name)
	}

	// After compaction past rv0 the cursor is gone: 410, then a relist.
	// The watch cache serves recent history from memory whatever etcd
	// compacted (its own window, at least 75s, also ends in 410), so this
	// part asks a replica without the watch cache, which watches etcd
	// itself. It shares the etcd and serves the same items.
	noCache := startReplica(ctx, t, "kollect-nocache", "--watch-cache=false")
	direct := versioned.NewForConfigOrDie(cluster.KollectRESTConfig(noCache)).KollectV1alpha1().InventoryItems(ns)
	compactKollectEtcd(ctx, t)
	// Until the new replica has loaded the client CA it may refuse the
	// request; anything but 410 is retried.
	eventually(ctx, t, "410 Gone for a watch at the compacted resourceVersion "+rv0, func(ctx context.Context) (bool, string) {
		w, err := direct.Watch(ctx, metav1.ListOptions{ResourceVersion: rv0, LabelSelector: "kollect.dev/target=web"})
		if err == nil {
			select {
			case ev := <-w.ResultChan():
				if ev.Type == watch.Error {
					err = apierrors.FromObject(ev.Object)
				} else {
					err = fmt.Errorf("event %s", ev.Type)
				}
			case <-time.After(10 * time.Second):
				err = errors.New("no event")
			}
			w.Stop()
		}
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err), fmt.Sprint(err)
	})
	relisted, err := direct.List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=web"})
	if err != nil || len(relisted.Items) != n-2 {
		t.Fatalf("relist: %v, %v", relisted, err)
	}
	w, err = direct.Watch(ctx, metav1.ListOptions{ResourceVersion: relisted.ResourceVersion, LabelSelector: "kollect.dev/target=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	updateDeployment(ctx, t, ns, "web-011", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr(int32(9)) })
	select {
	case ev := <-w.ResultChan():
		it, _ := ev.Object.(*v1alpha1.InventoryItem)
		if ev.Type != watch.Modified || it == nil || it.Source.Name != "web-011" || attr(it.Attributes, "replicas") != float64(9) {
			t.Errorf("after relist: event %s %#v", ev.Type, ev.Object)
		}
	case <-ctx.Done():
		t.Fatal("no event after the relist")
	}
}

func ptr[T any](v T) *T { return &v }

// compactKollectEtcd compacts kollect-apiserver's etcd at its current revision.
func compactKollectEtcd(ctx context.Context, t *testing.T) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{kollectEtcd.URL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "compaction-probe")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
}
