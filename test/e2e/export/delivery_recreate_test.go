package export

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// TestDeliveryDeleteRecreate is issue 11's acceptance point 4: a deleted
// and recreated item reaches each event sink as a delete of the old item
// UID and an upsert of the new one, and Postgres swaps the row. Each
// recreation follows the item's deletion at once (as soon as a watch sees
// it), within the exporter's batching window, in two forms:
//   - a ConfigMap unlabelled and labelled again: its item comes back
//     under the same name and key, with a new UID and identical content
//     (the same hash), the case a change test on keys and hashes alone
//     misses; the delete must come first;
//   - a ConfigMap deleted and recreated with the same name and data: its
//     item comes back under another name (item names, and the hash, derive
//     from the object's uid), so both events must arrive, in any order.
func TestDeliveryDeleteRecreate(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	r := newRig(ctx, t, "delivery-recreate", rigOptions{})
	base := r.stats()
	type swap struct {
		what     string
		old, new *v1alpha1.InventoryItem
	}
	var swaps []swap

	// The object deleted and recreated.
	old := r.recreateItem(ctx, t, "cm-001",
		func(cm *corev1.ConfigMap) {
			must(t, kube.CoreV1().ConfigMaps(r.ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}), "delete ConfigMap")
		},
		func(cm *corev1.ConfigMap) {
			_, err := kube.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: cm.Name, Labels: cm.Labels}, Data: cm.Data,
			}, metav1.CreateOptions{})
			must(t, err, "recreate ConfigMap")
		})
	swaps = append(swaps, swap{"object deleted and recreated", old, r.itemOf(ctx, t, "cm-001", old.UID)})

	// The object leaving the selector and coming back.
	old = r.recreateItem(ctx, t, "cm-002",
		func(cm *corev1.ConfigMap) {
			r.edit(ctx, t, cm.Name, func(cm *corev1.ConfigMap) { delete(cm.Labels, "app") })
		},
		func(cm *corev1.ConfigMap) {
			r.edit(ctx, t, cm.Name, func(cm *corev1.ConfigMap) { cm.Labels = map[string]string{"app": "web"} })
		})
	recreated := r.itemOf(ctx, t, "cm-002", old.UID)
	if recreated.Name != old.Name || recreated.Hash != old.Hash {
		t.Fatalf("the relabelled object's item is %s (hash %.12s); want the old name %s and hash %.12s: the test's premise fails",
			recreated.Name, recreated.Hash, old.Name, old.Hash)
	}
	swaps = append(swaps, swap{"object unlabelled and labelled again", old, recreated})

	r.converge(ctx, t, "after the recreations")
	// The relabelled item has the key and hash of the one it replaces, so
	// the sinks looked converged before the exporter saw it: wait for
	// every sink to acknowledge the item changes up to the recreations.
	for _, inv := range r.invs {
		for _, s := range swaps {
			waitCursor(ctx, t, r.ns, inv, s.new.ResourceVersion)
		}
	}
	r.verify(ctx, t, base)
	rows, err := pgRows(ctx, r.schema, "inventory", r.ns, r.invs[0])
	must(t, err, "postgres rows")
	for _, s := range swaps {
		t.Logf("%s: item %s/%s uid %s, hash %.12s -> %s/%s uid %s, hash %.12s", s.what, s.old.Namespace, s.old.Name, s.old.UID, s.old.Hash,
			s.new.Namespace, s.new.Name, s.new.UID, s.new.Hash)
		for sinkName, events := range map[string][]sink.Event{"nats": streamEvents(ctx, t, r.stream), "webhook": r.relay.accepted()} {
			if err := deleteThenUpsert(events, string(s.old.UID), string(s.new.UID), s.old.Name == s.new.Name); err != nil {
				t.Errorf("%s: %s: %v", s.what, sinkName, err)
			}
		}
		if _, ok := rows[string(s.old.UID)]; ok {
			t.Errorf("%s: postgres: the row of the old item %s is still there", s.what, s.old.UID)
		}
		if row, ok := rows[string(s.new.UID)]; !ok || row.hash != s.new.Hash {
			t.Errorf("%s: postgres: the row of the new item %s: %+v, present %v", s.what, s.new.UID, row, ok)
		}
	}
}

// waitCursor waits until every sink entry of inventory name says its sink
// acknowledged every item change up to resourceVersion rv (kollect's etcd
// revisions: integers).
func waitCursor(ctx context.Context, t *testing.T, ns, name, rv string) {
	t.Helper()
	want, err := strconv.ParseUint(rv, 10, 64)
	must(t, err, "item resourceVersion")
	eventually(ctx, t, fmt.Sprintf("inventory %s's sinks acknowledged item changes up to %s", name, rv), func(ctx context.Context) (bool, string) {
		inv, err := kollect.KollectV1alpha1().Inventories(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range inv.Status.SinkExports {
			if got, err := strconv.ParseUint(e.Cursor, 10, 64); err != nil || got < want {
				return false, fmt.Sprintf("%s/%s: cursor %q", e.Family, e.Name, e.Cursor)
			}
		}
		return true, ""
	})
}

// recreateItem calls remove on ConfigMap name, and restore as soon as a
// watch sees its item deleted; it returns the item as it was.
func (r *rig) recreateItem(ctx context.Context, t *testing.T, name string, remove, restore func(*corev1.ConfigMap)) *v1alpha1.InventoryItem {
	t.Helper()
	items := kollect.KollectV1alpha1().InventoryItems(r.ns)
	list, err := items.List(ctx, metav1.ListOptions{})
	must(t, err, "list items")
	var old *v1alpha1.InventoryItem
	for i := range list.Items {
		if list.Items[i].Source.Name == name {
			old = &list.Items[i]
		}
	}
	if old == nil {
		t.Fatalf("no item for ConfigMap %s", name)
	}
	cm, err := kube.CoreV1().ConfigMaps(r.ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err, "get ConfigMap "+name)
	w, err := items.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	must(t, err, "watch items")
	defer w.Stop()
	remove(cm)
	for deleted := false; !deleted; {
		select {
		case <-ctx.Done():
			t.Fatalf("the item of %s was not deleted: %v", name, ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch on items ended before the item of %s was deleted", name)
			}
			it, isItem := ev.Object.(*v1alpha1.InventoryItem)
			deleted = isItem && ev.Type == watch.Deleted && it.UID == old.UID
		}
	}
	restore(cm)
	return old
}

// itemOf waits for the item of ConfigMap name whose UID is not oldUID.
func (r *rig) itemOf(ctx context.Context, t *testing.T, name string, oldUID types.UID) *v1alpha1.InventoryItem {
	t.Helper()
	var found *v1alpha1.InventoryItem
	eventually(ctx, t, "the new item of "+name, func(ctx context.Context) (bool, string) {
		list, err := kollect.KollectV1alpha1().InventoryItems(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			if it := &list.Items[i]; it.Source.Name == name && it.UID != oldUID {
				found = it
				return true, ""
			}
		}
		return false, "no new item yet"
	})
	return found
}

// deleteThenUpsert checks a sink's events (outside resyncs) of an item
// replaced by another: the old item's delete and the new item's upsert,
// nothing of the old item after its delete, and, when both share a key
// (ordered), the delete first. Events of different keys may come in any
// order (a batch is sorted by key); a consumer's fold does not depend on it.
func deleteThenUpsert(events []sink.Event, oldUID, newUID string, ordered bool) error {
	deleted, upserted := -1, -1
	for i, ev := range events {
		if ev.Resync != "" {
			continue
		}
		switch uid := ev.Data.ItemUID; {
		case uid == oldUID && ev.Type == sink.EventTypeDeleted:
			if deleted < 0 {
				deleted = i
			}
		case uid == oldUID && deleted >= 0:
			return fmt.Errorf("event %s of the old item after its delete", ev.ID)
		case uid == newUID && ev.Type != sink.EventTypeUpserted:
			return fmt.Errorf("event %s: a %s of the new item", ev.ID, ev.Type)
		case uid == newUID && ordered && deleted < 0:
			return fmt.Errorf("the new item's upsert %s came before the old item's delete, under the same key", ev.ID)
		case uid == newUID:
			upserted = i
		}
	}
	switch {
	case deleted < 0:
		return fmt.Errorf("no delete event of the old item %s", oldUID)
	case upserted < 0:
		return fmt.Errorf("no upsert event of the new item %s", newUID)
	}
	return nil
}
