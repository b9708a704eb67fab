package export

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

const targetIndex = "target"

// exportedItem is what the item informers keep of an InventoryItem or a
// ClusterInventoryItem: the metadata the informer's keys and relists need,
// and the item in its exported form, converted once as it arrives rather
// than at every reconcile, then shared read-only by every item set holding it.
type exportedItem struct {
	metav1.ObjectMeta
	item *sink.Item
	// key is item.Key(), built once: item sets are keyed by it.
	key string
	// digest is the item's share of a set's checksum: hashed once here,
	// not by each set at each (re)build, where it was most of the time
	// a first export of 10,000 items spent before its first write.
	digest sink.Digest
}

// exported wraps an item in its exported form as the informers keep it.
func exported(it *sink.Item) *exportedItem {
	key := it.Key()
	return &exportedItem{ObjectMeta: metav1.ObjectMeta{Namespace: it.Namespace, Name: it.Name,
		UID: types.UID(it.UID), ResourceVersion: it.ResourceVersion}, item: it, key: key, digest: sink.DigestOf(key, it.Hash)}
}

// itemOrNil is the entry's item, nil for no entry.
func (e *exportedItem) itemOrNil() *sink.Item {
	if e == nil {
		return nil
	}
	return e.item
}

// toExported is the item informers' transform.
func toExported(obj any) (any, error) {
	var it *sink.Item
	switch o := obj.(type) {
	case *v1alpha1.InventoryItem:
		it = fromItem(o)
	case *v1alpha1.ClusterInventoryItem:
		it = fromClusterItem(o)
	default:
		return obj, nil
	}
	return exported(it), nil
}

// byTarget indexes the item informers by "namespace/target".
func byTarget(obj any) ([]string, error) {
	e, ok := obj.(*exportedItem)
	if !ok {
		return nil, nil
	}
	return []string{e.Namespace + "/" + e.item.Target}, nil
}

// itemHandler applies item events to the item sets that include the item.
func (c *Controller) itemHandler() cache.ResourceEventHandlerFuncs {
	upsert := func(obj any) {
		if e, ok := unwrap(obj).(*exportedItem); ok {
			c.running.upsert(e)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if e, ok := unwrap(obj).(*exportedItem); ok {
				_, unknown := obj.(cache.DeletedFinalStateUnknown)
				c.running.remove(e.item, !unknown)
			}
		},
	}
}

// startItemInformers starts the item informers and waits for their caches,
// once: with the first inventory, so that a server that only collects
// keeps no second copy of the items. Only the inventory worker calls it.
func (c *Controller) startItemInformers(ctx context.Context) error {
	if c.itemsStarted {
		return nil
	}
	c.itemFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.items.HasSynced, c.clusterItems.HasSynced) {
		return ctx.Err()
	}
	c.itemsStarted = true
	return nil
}

// itemsOf reads the items of the selected targets from the informer cache.
func (c *Controller) itemsOf(key plumbing.InventoryKey, targets map[string]bool) map[string]*exportedItem {
	inf, ns := c.items, key.ItemNamespace()
	if key.Cluster {
		inf = c.clusterItems
	}
	per := make([][]any, 0, len(targets))
	n := 0
	for t := range targets {
		objs, _ := inf.GetIndexer().ByIndex(targetIndex, ns+"/"+t)
		per = append(per, objs)
		n += len(objs)
	}
	out := make(map[string]*exportedItem, n)
	for _, objs := range per {
		for _, obj := range objs {
			if e, ok := obj.(*exportedItem); ok {
				out[e.key] = e
			}
		}
	}
	return out
}

// itemsOfInventory reads the items of the targets an inventory selects
// from the informer cache.
func (c *Controller) itemsOfInventory(key plumbing.InventoryKey, inv *inventory) ([]*sink.Item, error) {
	selected, err := c.selectedTargets(key, inv)
	if err != nil {
		return nil, err
	}
	m := c.itemsOf(key, selected)
	out := make([]*sink.Item, 0, len(m))
	for _, e := range m {
		out = append(out, e.item)
	}
	return out, nil
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
