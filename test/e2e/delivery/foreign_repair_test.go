package delivery

// The collector's repair of item writes it did not make (foreign.go), each
// case written into the replicas' etcd the way a paused former leader's
// late writes land: the items are put back within moments, not at the next
// full walk (10 minutes here), and the quotas stay exact.

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/test/e2e/framework"
)

func etcdClient(t *testing.T, c *kcluster) *clientv3.Client {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 10 * time.Second})
	must(t, err, "connect to the replicas' etcd")
	t.Cleanup(func() { _ = etcd.Close() })
	return etcd
}

// onEast starts a test on east: a namespace named prefix and a random
// suffix whose Target web collects the ConfigMaps of w, and a client of
// the replicas' etcd.
func onEast(t *testing.T, prefix string, w world) (context.Context, *kcluster, string, *clientv3.Client) {
	t.Helper()
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := prefix + randomSuffix()
	c.namespace(ctx, t, ns)
	c.workload(ctx, t, ns, w)
	return ctx, c, ns, etcdClient(t, c)
}

// itemsByKey reads every InventoryItem of ns straight from etcd, by key.
func itemsByKey(ctx context.Context, t *testing.T, etcd *clientv3.Client, ns string) map[string]map[string]any {
	t.Helper()
	resp, err := etcd.Get(ctx, "/", clientv3.WithPrefix())
	must(t, err, "read etcd")
	out := map[string]map[string]any{}
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Key), "/inventoryitems/"+ns+"/") {
			continue
		}
		var obj map[string]any
		must(t, json.Unmarshal(kv.Value, &obj), "decode "+string(kv.Key))
		out[string(kv.Key)] = obj
	}
	return out
}

// itemOf finds the etcd item of a target and source name.
func itemOf(items map[string]map[string]any, target, source string) (string, map[string]any) {
	for k, obj := range items {
		labels, _ := obj["metadata"].(map[string]any)["labels"].(map[string]any)
		src, _ := obj["source"].(map[string]any)
		if labels[kollect.LabelTarget] == target && src["name"] == source {
			return k, obj
		}
	}
	return "", nil
}

// settle polls cond for up to d, with the test's (longer) ctx, so that the
// failure shows the last state rather than a deadline error.
func settle(ctx context.Context, t *testing.T, d time.Duration, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	end := time.Now().Add(d)
	last := ""
	for {
		ok, why := cond(ctx)
		if ok {
			return
		}
		last = why
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s; last: %s", what, d, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// state describes the items of ns (source: value [target]) and the
// collection status of the Target web.
func state(ctx context.Context, c *kcluster, ns string) string {
	list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for i := range list.Items {
		it := &list.Items[i]
		parts = append(parts, fmt.Sprintf("%s=%q[%s]", it.Source.Name, attrString(it, "value"), it.Labels[kollect.LabelTarget]))
	}
	sort.Strings(parts)
	obs, err := targetCollection(ctx, c, ns, "web")
	return fmt.Sprintf("items {%s}; web status itemCount %d overQuotaCount %d (%v)", strings.Join(parts, " "), obs.ItemCount, obs.OverQuotaCount, err)
}

// settleItems waits up to d until the items of ns are exactly w.
func settleItems(ctx context.Context, t *testing.T, c *kcluster, ns string, w world, d time.Duration) {
	t.Helper()
	settle(ctx, t, d, "items of "+ns+" exactly the ConfigMaps", func(ctx context.Context) (bool, string) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ok := len(list.Items) == len(w)
		for i := range list.Items {
			it := &list.Items[i]
			if want, present := w[it.Source.Name]; !present || attrString(it, "value") != want {
				ok = false
			}
		}
		return ok, state(ctx, c, ns)
	})
}

func createScope(ctx context.Context, t *testing.T, c *kcluster, ns string, maxItems int64) {
	t.Helper()
	_, err := c.kollect.KollectV1alpha1().Scopes(ns).Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxItems: &maxItems}}, metav1.CreateOptions{})
	must(t, err, "scope")
}

// targetStatus is the collection observation of the Target web.
func targetCollection(ctx context.Context, c *kcluster, ns, name string) (v1alpha1.CollectionObservation, error) {
	tgt, err := c.kollect.KollectV1alpha1().Targets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || tgt.Status.Collection == nil {
		return v1alpha1.CollectionObservation{}, err
	}
	return *tgt.Status.Collection, nil
}

func updateCM(ctx context.Context, t *testing.T, c *kcluster, ns, name, value string) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["value"] = value
		_, err = c.kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	}), "update "+name)
}

// quotaSetup: a Scope maxItems 2, ConfigMaps cm-a and cm-b collected by
// the Target web, then cm-c created, which must wait.
func quotaSetup(ctx context.Context, t *testing.T, c *kcluster, ns string) world {
	t.Helper()
	c.namespace(ctx, t, ns)
	createScope(ctx, t, c, ns, 2)
	w := world{"cm-a": "a1", "cm-b": "b1"}
	c.workload(ctx, t, ns, w)
	_, err := c.kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("cm-c", "c1"), metav1.CreateOptions{})
	must(t, err, "cm-c")
	eventually(ctx, t, "cm-c waits for a place", func(ctx context.Context) (bool, string) {
		obs, err := targetCollection(ctx, c, ns, "web")
		return err == nil && obs.ItemCount == 2 && obs.OverQuotaCount == 1, fmt.Sprintf("%+v %v", obs, err)
	})
	return w
}

// TestForeignItemForWaitingObject: the namespace is at its maxItems
// (2) and cm-c waits. A former leader, which had given cm-c a place,
// resumes and creates cm-c's item. The leader must undo it: 2 items, cm-c
// waiting (it used to be adopted: 3 items for a limit of 2, for good).
func TestForeignItemForWaitingObject(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "fq-wait-" + randomSuffix()
	quotaSetup(ctx, t, c, ns)
	etcd := etcdClient(t, c)

	cmc, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, "cm-c", metav1.GetOptions{})
	must(t, err, "get cm-c")
	items := itemsByKey(ctx, t, etcd, ns)
	key, item := itemOf(items, "web", "cm-a")
	if key == "" {
		t.Fatal("cm-a's item not in etcd")
	}
	src := kollect.ItemSource{Namespace: ns, Name: "cm-c", UID: cmc.UID}
	name := extract.ItemName("web", src)
	meta := item["metadata"].(map[string]any)
	meta["name"] = name
	meta["uid"] = "00000000-0000-0000-0000-0000000000c1"
	s := item["source"].(map[string]any)
	s["name"], s["uid"], s["resourceVersion"] = "cm-c", string(cmc.UID), cmc.ResourceVersion
	item["attributes"].(map[string]any)["value"] = "c1"
	item["hash"] = fakeHash("former leader's cm-c")
	put(ctx, t, etcd, key[:strings.LastIndex(key, "/")+1]+name, item)

	// Give the collector time to react, then the state must be exact.
	time.Sleep(10 * time.Second)
	settle(ctx, t, 50*time.Second, "the namespace back at its maxItems 2, cm-c waiting", func(ctx context.Context) (bool, string) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		obs, err := targetCollection(ctx, c, ns, "web")
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) <= 2 && obs.ItemCount == int64(len(list.Items)) && obs.ItemCount+obs.OverQuotaCount == 3, state(ctx, c, ns)
	})
}

// TestForeignOldItemOfRecreatedObject: maxItems 2, cm-a and cm-b
// collected. cm-a is deleted and created again (a new uid, so a new item
// name); a former leader then stores cm-a's old item back (its write from
// before the deletion). The leader must delete it and keep collecting
// cm-a: a later change of cm-a must reach its item.
func TestForeignOldItemOfRecreatedObject(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "fq-recreate-" + randomSuffix()
	c.namespace(ctx, t, ns)
	createScope(ctx, t, c, ns, 2)
	w := world{"cm-a": "a1", "cm-b": "b1"}
	c.workload(ctx, t, ns, w)
	etcd := etcdClient(t, c)
	recreateUnderLateOldItem(ctx, t, c, ns, etcd, w)
	settle(ctx, t, 10*time.Second, "status exact", func(ctx context.Context) (bool, string) {
		obs, err := targetCollection(ctx, c, ns, "web")
		return err == nil && obs.ItemCount == 2 && obs.OverQuotaCount == 0, state(ctx, c, ns)
	})
}

// TestForeignOldItemOfRecreatedObjectNoQuota: as above without a
// quota.
func TestForeignOldItemOfRecreatedObjectNoQuota(t *testing.T) {
	w := world{"cm-a": "a1", "cm-b": "b1"}
	ctx, c, ns, etcd := onEast(t, "f-recreate-", w)
	recreateUnderLateOldItem(ctx, t, c, ns, etcd, w)
}

// TestForeignItemClaimsAnotherSource: cm-a's item rewritten to claim
// cm-b as its source. Both objects must end with their own item.
func TestForeignItemClaimsAnotherSource(t *testing.T) {
	w := world{"cm-a": "a1", "cm-b": "b1", "cm-c": "c1"}
	ctx, c, ns, etcd := onEast(t, "f-claim-", w)
	cmb, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, "cm-b", metav1.GetOptions{})
	must(t, err, "get cm-b")
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	s := item["source"].(map[string]any)
	s["name"], s["uid"], s["resourceVersion"] = "cm-b", string(cmb.UID), cmb.ResourceVersion
	item["attributes"].(map[string]any)["value"] = "b1"
	item["hash"] = fakeHash("claims cm-b")
	put(ctx, t, etcd, key, item)

	time.Sleep(5 * time.Second)
	settleItems(ctx, t, c, ns, w, time.Minute)
}

// TestForeignWriteWhileSuspended: a former leader's stale write of
// an item lands while its Target is suspended. Suspension keeps the items
// as they were; when the Target resumes the stale item must be put back.
func TestForeignWriteWhileSuspended(t *testing.T) {
	w := world{"cm-a": "a1", "cm-b": "b1"}
	ctx, c, ns, etcd := onEast(t, "f-suspend-", w)
	setSuspend := func(v bool) {
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			tgt, err := c.kollect.KollectV1alpha1().Targets(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			tgt.Spec.Suspend = v
			_, err = c.kollect.KollectV1alpha1().Targets(ns).Update(ctx, tgt, metav1.UpdateOptions{})
			return err
		}), "suspend")
	}
	setSuspend(true)
	time.Sleep(3 * time.Second)
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	item["attributes"].(map[string]any)["value"] = "stale"
	item["hash"] = fakeHash("stale")
	put(ctx, t, etcd, key, item)
	time.Sleep(3 * time.Second)
	setSuspend(false)
	settleItems(ctx, t, c, ns, w, time.Minute)
}

// TestForeignTargetLabel: cm-a's item relabelled to a target that
// does not exist. The leader must put the label back (or the item is
// invisible to kollect.dev/target=web selections, and deleteAllItems).
func TestForeignTargetLabel(t *testing.T) {
	ctx, c, ns, etcd := onEast(t, "f-label-", world{"cm-a": "a1", "cm-b": "b1"})
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	item["metadata"].(map[string]any)["labels"].(map[string]any)[kollect.LabelTarget] = "nobody"
	put(ctx, t, etcd, key, item)
	settle(ctx, t, time.Minute, "cm-a's item labelled web again", func(ctx context.Context) (bool, string) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{LabelSelector: kollect.LabelTarget + "=web"})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 2, fmt.Sprintf("%d items labelled web; %s", len(list.Items), state(ctx, c, ns))
	})
}

// TestForeignTargetLabelOtherTarget: two Targets web and web2 collect
// the same ConfigMaps; web's item of cm-a is relabelled web2. Each target
// must end with its 2 items.
func TestForeignTargetLabelOtherTarget(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "f-label2-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := world{"cm-a": "a1", "cm-b": "b1"}
	c.workload(ctx, t, ns, w)
	_, err := c.kollect.KollectV1alpha1().Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "web2"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{selectLabel: "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, "target web2")
	count := func(ctx context.Context, target string) (int, error) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{LabelSelector: kollect.LabelTarget + "=" + target})
		if err != nil {
			return 0, err
		}
		return len(list.Items), nil
	}
	eventually(ctx, t, "web2 collected", func(ctx context.Context) (bool, string) {
		n, err := count(ctx, "web2")
		return n == 2, fmt.Sprint(n, err)
	})
	etcd := etcdClient(t, c)
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	item["metadata"].(map[string]any)["labels"].(map[string]any)[kollect.LabelTarget] = "web2"
	put(ctx, t, etcd, key, item)
	time.Sleep(5 * time.Second)
	settle(ctx, t, time.Minute, "each target with its 2 items", func(ctx context.Context) (bool, string) {
		a, err1 := count(ctx, "web")
		b, err2 := count(ctx, "web2")
		obs, _ := targetCollection(ctx, c, ns, "web")
		return a == 2 && b == 2 && obs.ItemCount == 2, fmt.Sprintf("web %d web2 %d (%v %v), web status itemCount %d", a, b, err1, err2, obs.ItemCount)
	})
}

// TestForeignLongTargetName: a Target whose name is longer than a
// label value (the kollect.dev/target label is shortened): a stale write,
// a deletion and a ghost are undone.
func TestForeignLongTargetName(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "f-long-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := world{"cm-a": "a1", "cm-b": "b1", "cm-c": "c1"}
	for name, v := range w {
		_, err := c.kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(name, v), metav1.CreateOptions{})
		must(t, err, name)
	}
	c.configMapProfile(ctx, t, ns)
	api := c.kollect.KollectV1alpha1()
	long := "web-" + strings.Repeat("x", 80)
	_, err := api.Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: long},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{selectLabel: "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, "target")
	c.waitItems(ctx, t, ns, w)
	etcd := etcdClient(t, c)
	items := itemsByKey(ctx, t, etcd, ns)
	var label string
	for _, obj := range items {
		label, _ = obj["metadata"].(map[string]any)["labels"].(map[string]any)[kollect.LabelTarget].(string)
	}
	t.Logf("target label %q", label)
	key, item := itemOf(items, label, "cm-a")
	item["attributes"].(map[string]any)["value"] = "stale"
	item["hash"] = fakeHash("stale")
	put(ctx, t, etcd, key, item)
	keyB, _ := itemOf(items, label, "cm-b")
	_, err = etcd.Delete(ctx, keyB)
	must(t, err, "delete")
	keyC, itemC := itemOf(items, label, "cm-c")
	itemC["metadata"].(map[string]any)["name"] = itemC["metadata"].(map[string]any)["name"].(string) + "g"
	itemC["metadata"].(map[string]any)["uid"] = "00000000-0000-0000-0000-000000000009"
	itemC["source"].(map[string]any)["name"] = "cm-ghost"
	itemC["source"].(map[string]any)["uid"] = "00000000-0000-0000-0000-00000000000a"
	put(ctx, t, etcd, keyC+"g", itemC)
	settleItems(ctx, t, c, ns, w, time.Minute)
}

// TestForeignClusterItems: ClusterTarget (long name) and
// ClusterInventoryItems: stale, deleted and ghost items are undone.
func TestForeignClusterItems(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "f-cluster-" + randomSuffix()
	c.namespace(ctx, t, ns)
	tag := randomSuffix()
	w := world{"cm-a": "a1", "cm-b": "b1", "cm-c": "c1"}
	for name, v := range w {
		cm := configMap(name, v)
		cm.Labels = map[string]string{"ftag": tag}
		_, err := c.kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		must(t, err, name)
	}
	c.configMapProfile(ctx, t, ns)
	api := c.kollect.KollectV1alpha1()
	name := "ct-" + tag + "-" + strings.Repeat("y", 70)
	_, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: ns, Name: "configmaps"},
			IncludeNamespaces: []string{ns},
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"ftag": tag}}},
	}, metav1.CreateOptions{})
	must(t, err, "clustertarget")
	t.Cleanup(func() { _ = api.ClusterTargets().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	label := ""
	clusterItems := func(ctx context.Context) (map[string]v1alpha1.ClusterInventoryItem, error) {
		list, err := api.ClusterInventoryItems().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := map[string]v1alpha1.ClusterInventoryItem{}
		for _, it := range list.Items {
			if it.Source.Namespace == ns {
				out[it.Source.Name] = it
				label = it.Labels[kollect.LabelTarget]
			}
		}
		return out, nil
	}
	ok := func(ctx context.Context) (bool, string) {
		got, err := clusterItems(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(got) != len(w) {
			return false, fmt.Sprintf("%d cluster items, want %d", len(got), len(w))
		}
		for n, it := range got {
			var v string
			_ = json.Unmarshal(it.Attributes["value"].Raw, &v)
			if w[n] != v {
				return false, fmt.Sprintf("%s: %q want %q", n, v, w[n])
			}
		}
		return true, ""
	}
	eventually(ctx, t, "cluster items", ok)
	etcd := etcdClient(t, c)
	resp, err := etcd.Get(ctx, "/", clientv3.WithPrefix())
	must(t, err, "read etcd")
	byName := map[string]struct {
		key string
		obj map[string]any
	}{}
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Key), "/clusterinventoryitems/") {
			continue
		}
		var obj map[string]any
		must(t, json.Unmarshal(kv.Value, &obj), "decode")
		src := obj["source"].(map[string]any)
		if src["namespace"] == ns {
			byName[src["name"].(string)] = struct {
				key string
				obj map[string]any
			}{string(kv.Key), obj}
		}
	}
	t.Logf("label %q, %d etcd items", label, len(byName))
	a := byName["cm-a"]
	a.obj["attributes"].(map[string]any)["value"] = "stale"
	a.obj["hash"] = fakeHash("stale")
	put(ctx, t, etcd, a.key, a.obj)
	_, err = etcd.Delete(ctx, byName["cm-b"].key)
	must(t, err, "delete")
	g := byName["cm-c"]
	g.obj["metadata"].(map[string]any)["name"] = g.obj["metadata"].(map[string]any)["name"].(string) + "g"
	g.obj["metadata"].(map[string]any)["uid"] = "00000000-0000-0000-0000-00000000000b"
	g.obj["source"].(map[string]any)["name"] = "cm-ghost"
	g.obj["source"].(map[string]any)["uid"] = "00000000-0000-0000-0000-00000000000c"
	put(ctx, t, etcd, g.key+"g", g.obj)
	settle(ctx, t, time.Minute, "cluster items healed", ok)
}

// TestForeignFlapping: a foreign writer rewrites cm-a's item with
// stale content 30 times, 100ms apart, while cm-b changes. The items must
// converge, and the leader must not write much more than once per foreign
// write (count the item's Modified events).
func TestForeignFlapping(t *testing.T) {
	w := world{"cm-a": "a1", "cm-b": "b1"}
	ctx, c, ns, etcd := onEast(t, "f-flap-", w)
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
	must(t, err, "list")
	wa, err := c.kollect.KollectV1alpha1().InventoryItems(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	must(t, err, "watch")
	defer wa.Stop()
	events := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wa.ResultChan() {
			if it, ok := ev.Object.(*v1alpha1.InventoryItem); ok {
				events[it.Source.Name+"/"+string(ev.Type)]++
			}
		}
	}()
	const n = 30
	for i := range n {
		item["attributes"].(map[string]any)["value"] = fmt.Sprintf("stale-%d", i)
		item["hash"] = fakeHash(fmt.Sprintf("stale-%d", i))
		put(ctx, t, etcd, key, item)
		if i%10 == 0 {
			updateCM(ctx, t, c, ns, "cm-b", fmt.Sprintf("b-%d", i))
			w["cm-b"] = fmt.Sprintf("b-%d", i)
		}
		time.Sleep(100 * time.Millisecond)
	}
	settleItems(ctx, t, c, ns, w, time.Minute)
	time.Sleep(5 * time.Second)
	wa.Stop()
	<-done
	t.Logf("item events: %v", events)
	if m := events["cm-a/MODIFIED"]; m > 2*n+2 {
		t.Errorf("%d MODIFIED events of cm-a's item for %d foreign writes: write amplification", m, n)
	}
}

var _ = corev1.ConfigMap{}

// TestForeignDeleteUnderFullQuota: maxItems 2, cm-a and cm-b
// collected, cm-c waiting. A former leader deletes cm-a's item. Items keep
// their places (docs: "an object's item, once written, keeps its place for
// as long as the object matches"): cm-a's item must come back, cm-c keep
// waiting.
func TestForeignDeleteUnderFullQuota(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "fq-del-" + randomSuffix()
	quotaSetup(ctx, t, c, ns)
	etcd := etcdClient(t, c)
	key, _ := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	if key == "" {
		t.Fatal("cm-a's item not in etcd")
	}
	_, err := etcd.Delete(ctx, key)
	must(t, err, "delete cm-a's item")
	time.Sleep(5 * time.Second)
	settleItems(ctx, t, c, ns, world{"cm-a": "a1", "cm-b": "b1"}, 30*time.Second)
}

// TestPausedLeaderResumesWritesNothing: the leader is paused (SIGSTOP), the
// follower takes over and updates every item; the old leader resumes and
// runs until it notices the lost lease. Its own watch of the stored items
// sees its successor's writes as foreign, and its informers are behind: it
// must write no item (its lease is not confirmed), the new leader must see
// no foreign change of these items, and the items must be the ConfigMaps.
func TestPausedLeaderResumesWritesNothing(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	c := east
	ns := "f-pause-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := numbered(40, "cm-%03d", "v1-%d")
	c.workload(ctx, t, ns, w)
	old, l0 := c.leader(ctx, t)
	follower := c.other(old)
	c.serveFrom(ctx, t, follower) // the API stays up while the leader is paused
	time.Sleep(6 * time.Second)   // klog flushes every 5 s: setup lines are out
	m, err := c.replicaMetrics(ctx, old)
	must(t, err, "metrics")
	writes := func(m string) float64 {
		return framework.SampleSum(m, "kollect_item_writes_total", `op="create"`) + framework.SampleSum(m, "kollect_item_writes_total", `op="update"`) +
			framework.SampleSum(m, "kollect_item_writes_total", `op="delete"`)
	}
	before := writes(m)
	must(t, signal(old, syscall.SIGSTOP), "SIGSTOP the leader")
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = signal(old, syscall.SIGCONT)
		}
	})
	c.takeOver(ctx, t, old, l0)
	var changes []change
	for name := range w {
		changes = append(changes, updateOf(name, "v2-"+name))
	}
	c.apply(ctx, t, ns, w, changes)
	c.waitItems(ctx, t, ns, w)
	time.Sleep(6 * time.Second)

	offset, newOffset := logSize(old), logSize(follower)
	must(t, signal(old, syscall.SIGCONT), "SIGCONT")
	paused = false
	eventually(ctx, t, "the old leader stops its controllers", func(context.Context) (bool, string) {
		return len(linesWith(logSince(old, offset), "Controllers stopped")) > 0, "not yet"
	})
	c.waitItems(testContext(t, time.Minute), t, ns, w)
	time.Sleep(6 * time.Second)
	m, err = c.replicaMetrics(ctx, old)
	must(t, err, "metrics")
	after := writes(m)
	oldSaw := linesWith(logSince(old, offset), "A stored item changed without this collector", ns)
	newSaw := linesWith(logSince(follower, newOffset), "A stored item changed without this collector", ns)
	t.Logf("old leader after SIGCONT: %v item writes, %d 'changed without this collector' lines; new leader: %d such lines for %s",
		after-before, len(oldSaw), len(newSaw), ns)
	if len(newSaw) > 0 {
		t.Errorf("the resumed former leader stored %d item changes its successor had to undo, e.g. %.300s", len(newSaw), newSaw[0])
	}
	if after > before {
		t.Errorf("the resumed former leader wrote %v items after SIGCONT; its lease was not confirmed", after-before)
	}
}

// TestForeignItemOfDeletedTarget: a former leader, paused while
// writing an item of Target web, resumes after web was deleted (and its
// items with it) and stores that item. Nothing collects it: it must go
// "within moments", not at the next full walk (10 minutes).
func TestForeignItemOfDeletedTarget(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "f-deltgt-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := world{"cm-a": "a1"}
	c.workload(ctx, t, ns, w)
	etcd := etcdClient(t, c)
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	must(t, c.kollect.KollectV1alpha1().Targets(ns).Delete(ctx, "web", metav1.DeleteOptions{}), "delete web")
	eventually(ctx, t, "web and its items gone", func(ctx context.Context) (bool, string) {
		_, err := c.kollect.KollectV1alpha1().Targets(ns).Get(ctx, "web", metav1.GetOptions{})
		list, lerr := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		return err != nil && lerr == nil && len(list.Items) == 0, fmt.Sprint(err, lerr)
	})
	put(ctx, t, etcd, key, item)
	settle(ctx, t, time.Minute, "the late item of the deleted target removed", func(ctx context.Context) (bool, string) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d items", len(list.Items))
	})
}

// TestForeignItemClaimsAnotherSourceMany: as
// TestForeignItemClaimsAnotherSource, for 10 pairs at once (the item
// of cm-2i claims cm-2i+1), so that the race between the sync that deletes
// the "old name" and the watch's deletion event is tried 10 times.
func TestForeignItemClaimsAnotherSourceMany(t *testing.T) {
	w := numbered(20, "cm-%02d", "v%d")
	ctx, c, ns, etcd := onEast(t, "f-claims-", w)
	items := itemsByKey(ctx, t, etcd, ns)
	for i := 0; i < 20; i += 2 {
		other, err := c.kube.CoreV1().ConfigMaps(ns).Get(ctx, fmt.Sprintf("cm-%02d", i+1), metav1.GetOptions{})
		must(t, err, "get")
		key, item := itemOf(items, "web", fmt.Sprintf("cm-%02d", i))
		s := item["source"].(map[string]any)
		s["name"], s["uid"], s["resourceVersion"] = other.Name, string(other.UID), other.ResourceVersion
		item["hash"] = fakeHash("claims " + other.Name)
		put(ctx, t, etcd, key, item)
	}
	time.Sleep(5 * time.Second)
	settleItems(ctx, t, c, ns, w, time.Minute)
}

// recreateUnderLateOldItem deletes cm-a and creates it again (a new uid, so
// a new item name), then stores cm-a's old item back, as a former leader's
// late write would, and checks that a later change of cm-a still reaches
// its item: the old one is deleted, not taken for cm-a's.
func recreateUnderLateOldItem(ctx context.Context, t *testing.T, c *kcluster, ns string, etcd *clientv3.Client, w world) {
	t.Helper()
	oldKey, oldItem := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	if oldKey == "" {
		t.Fatal("cm-a's item not in etcd")
	}
	must(t, c.kube.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-a", metav1.DeleteOptions{}), "delete cm-a")
	delete(w, "cm-a")
	c.waitItems(ctx, t, ns, w)
	_, err := c.kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap("cm-a", "a2"), metav1.CreateOptions{})
	must(t, err, "create cm-a again")
	w["cm-a"] = "a2"
	c.waitItems(ctx, t, ns, w)

	put(ctx, t, etcd, oldKey, oldItem) // the former leader's late write
	time.Sleep(5 * time.Second)

	updateCM(ctx, t, c, ns, "cm-a", "a3")
	w["cm-a"] = "a3"
	settleItems(ctx, t, c, ns, w, time.Minute)
}
