package export

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// view is one inventory's item set as the exporters see it: the items of
// the targets it selects, keyed by sink.Item.Key(), with the checksum kept
// up to date on every change. Each exporter of the inventory subscribes
// and collects the keys that changed since its last run (with the content
// the item had before), so a run costs O(changes).
type view struct {
	mu       sync.Mutex
	items    map[string]*sink.Item
	checksum sink.Checksum
	subs     map[*exporter]struct{}
}

func newView() *view {
	return &view{items: map[string]*sink.Item{}, subs: map[*exporter]struct{}{}}
}

// material reports whether b differs from a in what sinks hold.
func material(a, b *sink.Item) bool {
	return a == nil || b == nil || a.Hash != b.Hash || a.UID != b.UID
}

// upsert adds or replaces an item and tells the subscribers when its
// content changed. A new resourceVersion with the same hash (a label edit)
// updates the item without waking anyone.
func (v *view) upsert(it *sink.Item) {
	v.mu.Lock()
	defer v.mu.Unlock()
	key := it.Key()
	old := v.items[key]
	v.items[key] = it
	if !material(old, it) {
		return
	}
	if old != nil {
		v.checksum.Remove(key, old.Hash)
	}
	v.checksum.Add(key, it.Hash)
	v.notifyLocked(key, old)
}

// remove deletes an item; last is its final state (the delete event's
// object, whose resourceVersion is the deletion's), used for tombstones.
func (v *view) remove(key string, last *sink.Item) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.items[key]
	if !ok {
		return
	}
	delete(v.items, key)
	v.checksum.Remove(key, old.Hash)
	if last != nil && last.UID == old.UID {
		// The tombstone carries the deletion's resourceVersion: a delete
		// event's idempotency key then differs from the last upsert's.
		cp := *old
		cp.ResourceVersion = last.ResourceVersion
		old = &cp
	}
	v.notifyLocked(key, old)
}

// replace makes the view hold exactly items (after the inventory's target
// selection changed) and notifies only the keys that changed.
func (v *view) replace(items map[string]*sink.Item) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for key, old := range v.items {
		if _, ok := items[key]; !ok {
			delete(v.items, key)
			v.checksum.Remove(key, old.Hash)
			v.notifyLocked(key, old)
		}
	}
	for key, it := range items {
		old := v.items[key]
		v.items[key] = it
		if material(old, it) {
			if old != nil {
				v.checksum.Remove(key, old.Hash)
			}
			v.checksum.Add(key, it.Hash)
			v.notifyLocked(key, old)
		}
	}
}

func (v *view) notifyLocked(key string, before *sink.Item) {
	for e := range v.subs {
		e.markDirtyLocked(key, before)
	}
}

// state is a consistent read of the view for one exporter run.
type state struct {
	checksum string
	count    int
	// changed maps the keys changed since the exporter's last run to the
	// item as it was before (nil for new items).
	changed map[string]*sink.Item
}

// take returns the view's checksum and count, and hands e its changed keys.
func (v *view) take(e *exporter) state {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := state{checksum: v.checksum.String(), count: len(v.items), changed: e.dirty}
	e.dirty = map[string]*sink.Item{}
	return s
}

// giveBack returns changed keys to e after a failed run, keeping for each
// key the oldest "before" (what the sink may still hold).
func (v *view) giveBack(e *exporter, changed map[string]*sink.Item) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for key, before := range changed {
		e.dirty[key] = before // an older before wins over one recorded during the run
	}
}

// get returns the current item under key, or nil.
func (v *view) get(key string) *sink.Item {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.items[key]
}

// sorted returns the items in canonical order (ascending key) and the
// checksum of exactly that set.
func (v *view) sorted() ([]*sink.Item, string) {
	v.mu.Lock()
	items := make([]*sink.Item, 0, len(v.items))
	for _, it := range v.items {
		items = append(items, it)
	}
	sum := v.checksum.String()
	v.mu.Unlock()
	slices.SortFunc(items, func(a, b *sink.Item) int { return strings.Compare(a.Key(), b.Key()) })
	return items, sum
}

func (v *view) subscribe(e *exporter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.subs[e] = struct{}{}
}

func (v *view) unsubscribe(e *exporter) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.subs, e)
}

// itemOf converts a stored item to its exported form.
func itemOf(meta itemMeta, source v1alpha1.ItemSource, attributes map[string]v1alpha1.Value, object *v1alpha1.Value, hash string) *sink.Item {
	it := &sink.Item{
		Namespace: meta.namespace,
		Name:      meta.name,
		Target:    meta.labels[v1alpha1.LabelTarget],
		Profile:   meta.labels[v1alpha1.LabelProfile],
		Source: sink.Source{
			APIVersion: source.APIVersion,
			Kind:       source.Kind,
			Namespace:  source.Namespace,
			Name:       source.Name,
			UID:        string(source.UID),
		},
		Hash:            hash,
		UID:             meta.uid,
		ResourceVersion: meta.resourceVersion,
	}
	if len(attributes) > 0 {
		// encoding/json sorts map keys: the same attributes give the same bytes.
		if b, err := json.Marshal(attributes); err == nil {
			it.Attributes = b
		}
	}
	if object != nil && len(object.Raw) > 0 {
		it.Object = json.RawMessage(object.Raw)
	}
	return it
}

type itemMeta struct {
	namespace, name, uid, resourceVersion string
	labels                                map[string]string
}

func fromItem(o *v1alpha1.InventoryItem) *sink.Item {
	return itemOf(itemMeta{o.Namespace, o.Name, string(o.UID), o.ResourceVersion, o.Labels}, o.Source, o.Attributes, o.Object, o.Hash)
}

func fromClusterItem(o *v1alpha1.ClusterInventoryItem) *sink.Item {
	return itemOf(itemMeta{"", o.Name, string(o.UID), o.ResourceVersion, o.Labels}, o.Source, o.Attributes, o.Object, o.Hash)
}
