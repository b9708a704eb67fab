package collect

// Tests of the repair of items another writer changed (foreign.go): they
// drive syncObject with an item store in memory whose write can let the
// watch deliver other events before it returns.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/source"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/itemstore"
	"kollect.dev/kollect/pkg/tenancy"
)

// fakeItems is an itemStore in memory; onPut runs inside put, after the
// write is stored and before put returns.
type fakeItems struct {
	mu    sync.Mutex
	rv    uint64
	items map[string]storedItem
	puts  int
	onPut func(stored storedItem)
}

func (f *fakeItems) kind() string { return "InventoryItem" }

func (f *fakeItems) put(ctx context.Context, item *desiredItem, exists bool) (bool, uint64, error) {
	f.mu.Lock()
	f.rv++
	_, had := f.items[item.name]
	s := storedItem{namespace: item.namespace, name: item.name, target: item.labels[labelTarget], labels: labelsKey(item.labels),
		objKey: objectKeyOf(item.source.Namespace, item.source.Name), sourceRV: item.source.ResourceVersion, hash: hashOf(item.hash), rv: f.rv}
	f.items[item.name] = s
	f.puts++
	hook := f.onPut
	f.onPut = nil
	f.mu.Unlock()
	if hook != nil {
		hook(s)
	}
	return !had, s.rv, nil
}

func (f *fakeItems) delete(ctx context.Context, namespace, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rv++
	delete(f.items, name)
	return nil
}

func (f *fakeItems) get(ctx context.Context, namespace, name string) (storedItem, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.items[name]
	return s, ok, nil
}

func (f *fakeItems) list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error {
	return nil
}
func (f *fakeItems) watch(ctx context.Context, rv uint64) <-chan itemstore.Event { return nil }
func (f *fakeItems) position(ctx context.Context) (uint64, error)                { return 0, nil }

// foreignFixture is a collector with one Target ns/web collecting the
// ConfigMap ns/cm-a (data.value "new"), whose index holds the item of
// cm-a's older content "old", stored at resourceVersion 10.
func foreignFixture(t *testing.T) (*Collector, *indexed, *fakeItems, objectKey, string) {
	t.Helper()
	c := quotaCollector(t)
	nsIndexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	_ = nsIndexer.Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	c.namespaces = corev1listers.NewNamespaceLister(nsIndexer)
	store := &fakeItems{rv: 10, items: map[string]storedItem{}}
	c.itemStore, c.clusterItemStore = store, store

	p := &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "configmaps"}, Spec: v1alpha1.ProfileSpec{
		TargetGVK:  v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
		Attributes: []v1alpha1.Attribute{{Name: "value", Path: "cel:object.data.value"}}}}
	ext, err := extract.New(p)
	if err != nil {
		t.Fatal(err)
	}
	key := targetKey{Namespace: "ns", Name: "web"}
	sel, err := newSelection(&targetObject{key: key}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &targetSpec{fingerprint: "fp", extractor: ext, profile: types.NamespacedName{Namespace: "ns", Name: "configmaps"},
		gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, namespaced: true, sel: sel}
	cfg.labels = itemLabels(key, "", cfg)
	cfg.labelsKey = labelsKey(cfg.labels)

	inf := cache.NewSharedIndexInformer(&cache.ListWatch{}, &source.Object{}, 0, cache.Indexers{cache.NamespaceIndex: source.NamespaceIndex})
	cm := func(value, rv string) *source.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"namespace": "ns", "name": "cm-a", "uid": "uid-a", "resourceVersion": rv},
			"data":     map[string]any{"value": value}}}
		return objectOf(t, u)
	}
	old := cm("old", "1")
	if err := inf.GetIndexer().Add(cm("new", "2")); err != nil {
		t.Fatal(err)
	}
	gi := &gvrInformer{gvr: cfg.gvr, informer: inf, users: map[targetKey]source.Shape{key: {}}}
	gi.synced.Store(true)
	c.informers.byGVR[cfg.gvr], c.informers.gvrOf[key] = gi, cfg.gvr
	c.targets.update(key, func(t *target) { t.spec = cfg })
	c.index.setLimits(key, true, tenancy.QuotaSet{})

	c.index.mu.Lock()
	tg := c.index.targetLocked(key)
	obj, _ := old.Decode()
	content, err := ext.Extract(context.Background(), obj)
	if err != nil {
		t.Fatal(err)
	}
	name := extract.ItemName("web", old.Source())
	s := storedItem{namespace: "ns", name: name, target: "web", labels: cfg.labelsKey, objKey: "ns/cm-a", sourceRV: "1",
		hash: hashOf(extract.Hash(old.Source(), content)), rv: 10}
	store.items[name] = s
	c.index.indexLocked(tg, name, &itemEntry{objKey: s.objKey, hash: s.hash, labels: s.labels, sourceRV: "1", extractedWith: "fp", rv: 10})
	c.index.mu.Unlock()
	return c, tg, store, objectKey{target: key, namespace: "ns", name: "cm-a"}, name
}

// drain runs syncObject for every queued object until the queue is empty
// (at most n rounds).
func drain(t *testing.T, c *Collector, n int) {
	t.Helper()
	for i := 0; i < n && c.objectQueue.Len() > 0; i++ {
		q, _ := c.objectQueue.Get()
		if err := c.syncObject(context.Background(), q.key()); err != nil {
			t.Fatal(err)
		}
		c.objectQueue.Done(q)
		c.objectQueue.Forget(q)
	}
}

// TestForeignStaleWriteDuringOwnWrite: the collector updates cm-a's
// item (rv 11); before its write returns, the watch delivers that write
// and then a former leader's stale write of the same item (rv 12). The
// stored item is the stale one; the collector must write it again.
func TestForeignStaleWriteDuringOwnWrite(t *testing.T) {
	c, _, store, k, name := foreignFixture(t)
	ctx := context.Background()
	store.onPut = func(own storedItem) {
		c.itemChanged(ctx, false, false, own) // the watch sees the own write first
		store.mu.Lock()
		store.rv++
		stale := own
		stale.hash = hashOf(fakeHashHex("stale"))
		stale.rv = store.rv
		store.items[name] = stale
		store.mu.Unlock()
		c.itemChanged(ctx, false, false, stale) // then the foreign write
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	drain(t, c, 10)
	store.mu.Lock()
	defer store.mu.Unlock()
	if got := store.items[name]; got.hash == hashOf(fakeHashHex("stale")) {
		t.Fatalf("the stale foreign write (rv %d) stays stored after %d puts: the index entry written after put returned (rv 11) replaced the watch's newer record", got.rv, store.puts)
	}
}

// TestForeignDeleteDuringOwnWrite: as above, but the foreign write
// deletes the item (rv 12) before the collector's write returns. The item
// must be stored again.
func TestForeignDeleteDuringOwnWrite(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	store.onPut = func(own storedItem) {
		store.mu.Lock()
		store.rv++
		gone := own
		gone.rv = store.rv
		delete(store.items, name)
		store.mu.Unlock()
		c.itemChanged(ctx, false, true, gone) // the watch sees the deletion before put returns
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	drain(t, c, 10)
	store.mu.Lock()
	_, ok := store.items[name]
	puts := store.puts
	store.mu.Unlock()
	c.index.mu.Lock()
	_, indexed := tg.items[name]
	c.index.mu.Unlock()
	if !ok {
		t.Fatalf("cm-a's item deleted by a foreign writer is not stored again after %d puts (indexed: %v): the collector's index says it exists", puts, indexed)
	}
}

func fakeHashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// configMap adds the ConfigMap ns/name (uid, data.value value) to the
// fixture's informer and returns its item's name for target web.
func configMap(t *testing.T, c *Collector, tg *indexed, name, uid, value string) string {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "5"},
		"data":     map[string]any{"value": value}}}
	obj := objectOf(t, u)
	if err := informerOf(c, tg).GetIndexer().Add(obj); err != nil {
		t.Fatal(err)
	}
	return extract.ItemName("web", obj.Source())
}

// nsQuota is a quota of limit items in namespace ns.
func nsQuota(limit int64) tenancy.QuotaSet {
	return tenancy.NamespaceQuotas("ns", []kollect.Scope{{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: "ns"},
		Spec: kollect.ScopeSpec{MaxItems: ptr.To(limit)}}}, tenancy.Quotas{})
}

// queued lists the objects queued, without running them.
func queued(c *Collector) []string {
	var out []string
	for c.objectQueue.Len() > 0 {
		q, _ := c.objectQueue.Get()
		out = append(out, q.name)
		c.objectQueue.Done(q)
		defer c.objectQueue.Add(q)
	}
	return out
}

// The collector's own writes come back through the watch, before and after
// the write returns: neither is a foreign change.
func TestForeignOwnWritesAreNotSuspect(t *testing.T) {
	c, tg, store, k, _ := foreignFixture(t)
	ctx := context.Background()
	var own storedItem
	store.onPut = func(s storedItem) {
		own = s
		c.itemChanged(ctx, false, false, s) // before the write returns
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	c.itemChanged(ctx, false, false, own) // after
	c.index.mu.Lock()
	suspects := len(tg.suspect)
	c.index.mu.Unlock()
	if suspects != 0 || c.objectQueue.Len() != 0 {
		t.Fatalf("own write: %d suspect items, %d objects queued, want none", suspects, c.objectQueue.Len())
	}
	// Its deletion likewise, when the object goes.
	if err := informerOf(c, tg).GetIndexer().Delete(&unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "ns", "name": "cm-a"}}}); err != nil {
		t.Fatal(err)
	}
	gone := own
	gone.rv = own.rv + 1
	store.onPut = nil
	c.index.mu.Lock()
	tg.inflight[own.name] = &inflightWrite{deleted: true} // as deleteItem sets it
	c.index.mu.Unlock()
	c.itemChanged(ctx, false, true, gone)
	if c.objectQueue.Len() != 0 {
		t.Fatalf("own deletion: %d objects queued, want none", c.objectQueue.Len())
	}
}

// A foreign deletion under a full quota keeps the item's place: no waiting
// object takes it, and the item is written again.
func TestForeignDeleteKeepsThePlace(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	fillQuotaOfOne(t, c, tg, k)
	configMap(t, c, tg, "cm-c", "uid-c", "c")
	if err := c.syncObject(ctx, objectKey{target: k.target, namespace: "ns", name: "cm-c"}); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	gone := store.items[name]
	delete(store.items, name)
	store.rv++
	gone.rv = store.rv
	store.mu.Unlock()
	c.itemChanged(ctx, false, true, gone)
	if q := queued(c); len(q) != 1 || q[0] != "cm-a" {
		t.Fatalf("queued %v after the foreign deletion, want [cm-a] (cm-c waits)", q)
	}
	drain(t, c, 10)
	store.mu.Lock()
	_, stored := store.items[name]
	n := len(store.items)
	store.mu.Unlock()
	c.index.mu.Lock()
	u, waiting := *c.index.usage["ns"], tg.overQuota["ns/cm-c"]
	c.index.mu.Unlock()
	if !stored || n != 1 || u.items != 1 || u.pending != 0 || waiting != overCount {
		t.Fatalf("after the repair: cm-a's item stored %v, %d items stored, usage %+v, cm-c waiting %v; want cm-a's item back, 1 item, cm-c waiting", stored, n, u, waiting)
	}
}

// Items no object holds are deleted: one created for an object waiting for
// a place (its own name), and an old item of a recreated object. Neither
// takes a place.
func TestForeignItemsNoObjectHoldsAreDeleted(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	fillQuotaOfOne(t, c, tg, k)
	cName := configMap(t, c, tg, "cm-c", "uid-c", "c")
	if err := c.syncObject(ctx, objectKey{target: k.target, namespace: "ns", name: "cm-c"}); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	ghost := store.items[name]
	ghost.name, ghost.objKey, ghost.rv = cName, "ns/cm-c", store.rv+1
	old := store.items[name]
	old.name, old.rv = extract.ItemName("web", kollect.ItemSource{UID: "uid-a-before"}), store.rv+2
	store.items[ghost.name], store.items[old.name] = ghost, old
	store.rv += 2
	store.mu.Unlock()
	c.itemChanged(ctx, false, false, ghost)
	c.itemChanged(ctx, false, false, old)
	drain(t, c, 10)
	store.mu.Lock()
	_, ghostStored := store.items[ghost.name]
	_, oldStored := store.items[old.name]
	_, ownStored := store.items[name]
	store.mu.Unlock()
	c.index.mu.Lock()
	u, waiting := *c.index.usage["ns"], tg.overQuota["ns/cm-c"]
	c.index.mu.Unlock()
	if ghostStored || oldStored || !ownStored || u.items != 1 || waiting != overCount {
		t.Fatalf("ghost stored %v, old item stored %v, cm-a's item stored %v, usage %+v, cm-c waiting %v; want only cm-a's item, 1 counted, cm-c waiting",
			ghostStored, oldStored, ownStored, u, waiting)
	}
}

// An item relabelled to another target is repaired by the target whose
// index holds it.
func TestForeignRelabelledItem(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	otherKey := targetKey{Namespace: "ns", Name: "other"}
	spec := c.targets.spec(tg.key)
	c.targets.update(otherKey, func(o *target) { o.spec = spec })
	c.index.setLimits(otherKey, true, tenancy.QuotaSet{})
	store.mu.Lock()
	moved := store.items[name]
	moved.target, moved.labels = "other", labelsKey(map[string]string{labelTarget: "other"})
	store.rv++
	moved.rv = store.rv
	store.items[name] = moved
	store.mu.Unlock()
	c.itemChanged(ctx, false, false, moved)
	drain(t, c, 10)
	store.mu.Lock()
	got := store.items[name]
	store.mu.Unlock()
	if got.target != "web" || got.labels != c.targets.spec(tg.key).labelsKey {
		t.Fatalf("the relabelled item is labelled %q (%s), want web's labels back", got.target, got.labels)
	}
}

// hookItems is fakeItems with a list (sorted by name, as etcd lists) and
// a hook inside delete, after the deletion is stored and before delete
// returns.
type hookItems struct {
	*fakeItems
	dmu      sync.Mutex
	onDelete func(name string)
	deletes  int
}

func (h *hookItems) delete(ctx context.Context, namespace, name string) error {
	if err := h.fakeItems.delete(ctx, namespace, name); err != nil {
		return err
	}
	h.dmu.Lock()
	h.deletes++
	hook := h.onDelete
	h.onDelete = nil
	h.dmu.Unlock()
	if hook != nil {
		hook(name)
	}
	return nil
}

func (h *hookItems) list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error {
	h.mu.Lock()
	var all []storedItem
	for _, s := range h.items {
		all = append(all, s)
	}
	h.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	for _, s := range all {
		fn(s)
	}
	return nil
}

// sortedList is what a full walk's list returns now (sorted by name).
func sortedList(store *fakeItems) []storedItem {
	store.mu.Lock()
	defer store.mu.Unlock()
	var all []storedItem
	for _, s := range store.items {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].name < all[j].name })
	return all
}

// oldUIDItem is a stored item of cm-a under another (older) uid whose name
// sorts before (before=true) or after name.
func oldUIDItem(t *testing.T, store *fakeItems, name string, before bool) storedItem {
	t.Helper()
	store.mu.Lock()
	defer store.mu.Unlock()
	for i := 0; i < 1000; i++ {
		n := extract.ItemName("web", kollect.ItemSource{Namespace: "ns", Name: "cm-a", UID: oldUID(i)})
		if (n < name) == before {
			s := store.items[name]
			store.rv++
			s.name, s.rv = n, store.rv
			store.items[n] = s
			return s
		}
	}
	t.Fatal("no uid found")
	return storedItem{}
}

func oldUID(i int) types.UID {
	return types.UID("uid-a-before-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)))
}

// A former leader's old-uid item of cm-a (a recreated object) is suspect;
// a full walk's rebuild lands before cm-a's sync and indexes it next to
// cm-a's real item. It is still deleted, and counted no more (it was kept
// for good, as "held", before).
func TestForeignSecondItemAfterRebuildIsDeleted(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	ghost := oldUIDItem(t, store, name, true)
	c.itemChanged(ctx, false, false, ghost) // suspect, cm-a queued
	// The periodic full walk lists and rebuilds before cm-a's sync runs.
	c.index.mu.Lock()
	c.index.rebuildLocked(tg, sortedList(store))
	c.index.mu.Unlock()
	drain(t, c, 10)
	// And the next full walks: rebuild, then every object synced.
	for round := 0; round < 2; round++ {
		c.index.mu.Lock()
		c.index.rebuildLocked(tg, sortedList(store))
		c.index.mu.Unlock()
		if err := c.syncObject(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	store.mu.Lock()
	_, ghostStored := store.items[ghost.name]
	store.mu.Unlock()
	c.index.mu.Lock()
	u := *c.index.usage["ns"]
	suspects := len(tg.suspect)
	c.index.mu.Unlock()
	if ghostStored || u.items != 1 {
		t.Fatalf("cm-a's old-uid item %s still stored: %v (usage %+v, suspects left %d); want it deleted and 1 item counted",
			ghost.name, ghostStored, u, suspects)
	}
}

// An item kept while its object fails extraction ("an item written
// earlier is kept as it was") is deleted by another writer: the suspect
// stays until a sync can write the item (it was dropped before), and the
// item keeps its place.
func TestForeignDeleteOfFailingObjectIsRepairedLater(t *testing.T) {
	c, tg, store, k, name := foreignFixture(t)
	ctx := context.Background()
	// cm-a loses data.value: extraction fails, the item is kept.
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"namespace": "ns", "name": "cm-a", "uid": "uid-a", "resourceVersion": "3"}}}
	if err := informerOf(c, tg).GetIndexer().Update(objectOf(t, u)); err != nil {
		t.Fatal(err)
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	c.index.mu.Lock()
	failed := len(tg.failed)
	c.index.mu.Unlock()
	if failed != 1 {
		t.Fatalf("setup: cm-a should fail extraction, failed=%d", failed)
	}
	store.mu.Lock()
	gone := store.items[name]
	delete(store.items, name)
	store.rv++
	gone.rv = store.rv
	store.mu.Unlock()
	c.itemChanged(ctx, false, true, gone)
	drain(t, c, 10)
	c.index.mu.Lock()
	_, indexed := tg.items[name]
	suspect := tg.suspect[name]
	usage := *c.index.usage["ns"]
	c.index.mu.Unlock()
	if !indexed || suspect != "ns/cm-a" || usage.items != 1 {
		t.Fatalf("while cm-a fails extraction: indexed %v, suspect %q, usage %+v; want the item's place kept and the suspect kept for cm-a", indexed, suspect, usage)
	}
	// cm-a extracts again: its item is written back.
	u.Object["data"] = map[string]any{"value": "new"}
	if err := informerOf(c, tg).GetIndexer().Update(objectOf(t, u)); err != nil {
		t.Fatal(err)
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	store.mu.Lock()
	_, stored := store.items[name]
	store.mu.Unlock()
	if !stored {
		t.Fatal("cm-a's item, deleted by another writer while cm-a failed extraction, is not written back once it extracts")
	}
}

// A foreign (re)creation of an item while the collector's own delete of
// it is in flight is repaired: the item of an object that is gone is
// deleted (the change was dropped before).
func TestForeignCreateDuringOwnDelete(t *testing.T) {
	c, tg, fake, k, name := foreignFixture(t)
	store := &hookItems{fakeItems: fake}
	c.itemStore, c.clusterItemStore = store, store
	ctx := context.Background()
	// cm-a is deleted: its sync deletes the item.
	if err := informerOf(c, tg).GetIndexer().Delete(&unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"namespace": "ns", "name": "cm-a"}}}); err != nil {
		t.Fatal(err)
	}
	store.onDelete = func(string) {
		// A former leader's stale write lands right after the delete (its
		// Update got NotFound and fell back to Create) and the watch
		// delivers it before this delete returns.
		fake.mu.Lock()
		fake.rv++
		s := storedItem{namespace: "ns", name: name, target: "web", labels: c.targets.spec(tg.key).labelsKey, objKey: "ns/cm-a",
			hash: hashOf(fakeHashHex("stale")), rv: fake.rv}
		fake.items[name] = s
		fake.mu.Unlock()
		c.itemChanged(ctx, false, false, s)
	}
	if err := c.syncObject(ctx, k); err != nil {
		t.Fatal(err)
	}
	drain(t, c, 10)
	fake.mu.Lock()
	_, stored := fake.items[name]
	fake.mu.Unlock()
	c.index.mu.Lock()
	suspects := len(tg.suspect)
	c.index.mu.Unlock()
	if stored {
		t.Fatalf("an item for the deleted cm-a, recreated by another writer during the collector's delete, stays stored (suspects %d, queued %d)",
			suspects, c.objectQueue.Len())
	}
}

// A full walk deletes nothing while the lease is unconfirmed: a former
// leader resumed after a pause may run the walk its timer fired during
// the pause, with listers that have not seen the targets created
// meanwhile, and would delete their items.
func TestResyncWaitsForTheLease(t *testing.T) {
	c, _, fake, _, _ := foreignFixture(t)
	store := &hookItems{fakeItems: fake}
	c.itemStore = store
	c.clusterItemStore = &hookItems{fakeItems: &fakeItems{items: map[string]storedItem{}}}
	c.workers = 2 // deleteItems' concurrency
	c.cfg.Holding = func() bool { return false }
	c.targetQueue = workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[targetKey]())
	t.Cleanup(c.targetQueue.ShutDown)
	ti := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	_ = ti.Add(&v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}})
	c.targetLister = kollectlisters.NewTargetLister(ti)
	c.clusterTargetLister = kollectlisters.NewClusterTargetLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	// The new leader collected a Target "new" created during the pause.
	fake.mu.Lock()
	fake.rv++
	fake.items["new-item"] = storedItem{namespace: "ns", name: "new-item", target: "new", objKey: "ns/x", rv: fake.rv}
	fake.mu.Unlock()
	if c.holding() {
		t.Fatal("setup: holding")
	}
	if err := c.resync(context.Background()); !errors.Is(err, errLeaseUnconfirmed) {
		t.Fatalf("resync with the lease unconfirmed: %v, want errLeaseUnconfirmed", err)
	}
	fake.mu.Lock()
	_, stored := fake.items["new-item"]
	fake.mu.Unlock()
	if !stored || store.deletes != 0 {
		t.Fatalf("resync with an unconfirmed lease deleted %d items (new-item stored: %v); item writes must wait for the lease", store.deletes, stored)
	}
}

// fillQuotaOfOne limits the fixture's namespace to one item and collects
// cm-a, which takes it.
func fillQuotaOfOne(t *testing.T, c *Collector, tg *indexed, k objectKey) {
	t.Helper()
	c.index.setLimits(tg.key, true, nsQuota(1))
	if err := c.syncObject(context.Background(), k); err != nil {
		t.Fatal(err)
	}
}

// objectOf is the informer's object of u.
func objectOf(t *testing.T, u *unstructured.Unstructured) *source.Object {
	t.Helper()
	data, err := json.Marshal(u.Object)
	if err != nil {
		t.Fatal(err)
	}
	o, err := source.Decode(data, source.Shape{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// informerOf is the informer the fixture's target collects from.
func informerOf(c *Collector, tg *indexed) cache.SharedIndexInformer {
	return c.informers.of(tg.key).informer
}

// TestObjectSyncAfterTargetEnd: a target's end (finish) removes it from
// the target set, then its index, then deletes its stored items. An object
// sync that read the target's spec before the end and looks its index up
// after it must not make the index again: that index would take the item
// it writes, the end's deletion would not see it, and full walks would
// keep it as the item of a target the index knows.
func TestObjectSyncAfterTargetEnd(t *testing.T) {
	c, _, store, k, name := foreignFixture(t)
	c.index.remove(k.target) // the end's second step; its spec is still read
	if err := c.syncObject(context.Background(), k); err != nil {
		t.Fatal(err)
	}
	if c.index.existing(k.target) != nil {
		t.Error("the object's sync made the ended target's index again")
	}
	if s, ok := store.items[name]; !ok || s.sourceRV != "1" {
		t.Errorf("the ended target's item was written again: %+v", s)
	}
}
