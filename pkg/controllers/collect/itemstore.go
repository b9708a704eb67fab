package collect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unique"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/itemstore"
)

const (
	labelTarget           = kollect.LabelTarget
	labelProfile          = kollect.LabelProfile
	labelProfileNamespace = kollect.LabelProfileNamespace
	labelSourceKind       = kollect.LabelSourceKind
	labelSourceGroup      = kollect.LabelSourceGroup
	labelWatch            = kollect.LabelWatch

	// listPageSize is how many items one list call of a full walk reads.
	listPageSize = 2000
)

// TargetLabelValue is the value of the label kollect.dev/target on the
// items of the target named name.
func TargetLabelValue(name string) string { return labelValue(name) }

// labelValue is s when it is a valid label value, else a deterministic
// shortening: its first 46 characters (cut back to an alphanumeric end)
// followed by "-" and 16 hex digits of its SHA-256. Object names may have
// 253 characters; label values only 63.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	prefix := s
	if len(prefix) > 46 {
		prefix = prefix[:46]
	}
	prefix = strings.TrimRightFunc(prefix, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	})
	if prefix == "" {
		return hex.EncodeToString(sum[:])[:16]
	}
	return prefix + "-" + hex.EncodeToString(sum[:])[:16]
}

// desiredItem is an item as the collector wants it stored.
type desiredItem struct {
	namespace, name string
	labels          map[string]string
	labelsKey       string // labelsKey(labels)
	source          kollect.ItemSource
	content         extract.Content
	selectable      []string
	hash            string
}

// storedItem is what a full walk needs of a stored item: strings only, so
// that a walk over every item does not hold each one's label map.
type storedItem struct {
	namespace, name string
	target          string // the item's kollect.dev/target label
	cluster         string // source.cluster; empty in items stored before it
	labels          string // labelsKey of the item's labels
	objKey          string // namespace/name of the source object
	sourceRV        string
	hash            itemHash
	rv              uint64 // the item's resourceVersion
}

func storedOf(st itemstore.Stored) storedItem {
	return storedItem{
		rv:        uint64(st.Revision),
		namespace: st.Namespace,
		name:      st.Name,
		target:    st.Labels[labelTarget],
		cluster:   st.Source.Cluster,
		// The items of a target share their labels: one copy for all.
		labels:   unique.Make(labelsKey(st.Labels)).Value(),
		objKey:   objectKeyOf(st.Source.Namespace, st.Source.Name),
		sourceRV: st.Source.ResourceVersion,
		hash:     hashOf(st.Hash),
	}
}

// itemStore is the collector's view of where one item kind is stored
// (itemstore.Store; an in-memory one in tests).
type itemStore interface {
	kind() string
	// put stores an item and returns the resourceVersion it was stored at.
	put(ctx context.Context, item *desiredItem, exists bool) (created bool, rv uint64, err error)
	delete(ctx context.Context, namespace, name string) error
	// get reads one stored item, false when there is none.
	get(ctx context.Context, namespace, name string) (storedItem, bool, error)
	// list calls fn for every stored item matching selector in namespace
	// ("" for all).
	list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error
	// watch follows every stored item's changes after resourceVersion rv.
	watch(ctx context.Context, rv uint64) <-chan itemstore.Event
	// position is the stored items' resourceVersion now.
	position(ctx context.Context) (uint64, error)
}

// etcdItems is the itemStore of an itemstore.Store.
type etcdItems struct{ store *itemstore.Store }

func (s etcdItems) kind() string { return s.store.Kind() }

// put creates or updates an item: it tries what the index suggests and
// falls back to the other, so a stale index costs one extra call, never a
// wrong result.
func (s etcdItems) put(ctx context.Context, item *desiredItem, exists bool) (bool, uint64, error) {
	it := &itemstore.Item{Namespace: item.namespace, Name: item.name, Labels: item.labels, LabelsKey: item.labelsKey, Source: item.source,
		Attributes: item.content.Attributes, Object: item.content.Object, SelectableAttributes: item.selectable, Hash: item.hash}
	if exists {
		rev, err := s.store.Update(ctx, it)
		if !apierrors.IsNotFound(err) {
			return false, uint64(rev), err
		}
	}
	rev, err := s.store.Create(ctx, it)
	if apierrors.IsAlreadyExists(err) {
		rev, err = s.store.Update(ctx, it)
		return false, uint64(rev), err
	}
	return err == nil, uint64(rev), err
}

func (s etcdItems) delete(ctx context.Context, namespace, name string) error {
	err := s.store.Delete(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (s etcdItems) get(ctx context.Context, namespace, name string) (storedItem, bool, error) {
	st, found, err := s.store.Get(ctx, namespace, name)
	if !found || err != nil {
		return storedItem{}, false, err
	}
	return storedOf(st), true, nil
}

func (s etcdItems) list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error {
	_, err := s.store.List(ctx, namespace, selector, func(st itemstore.Stored) { fn(storedOf(st)) })
	return err
}

func (s etcdItems) watch(ctx context.Context, rv uint64) <-chan itemstore.Event {
	return s.store.Watch(ctx, int64(rv))
}

func (s etcdItems) position(ctx context.Context) (uint64, error) {
	rev, err := s.store.Revision(ctx)
	return uint64(rev), err
}

func (c *Collector) storeFor(key targetKey) itemStore {
	if key.Cluster {
		return c.clusterItemStore
	}
	return c.itemStore
}

// objectKeyOf is the cache key of a source: namespace/name, or name.
func objectKeyOf(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// namespaceOf is the namespace of a source's cache key.
func namespaceOf(objKey string) string {
	ns, _, _ := cache.SplitMetaNamespaceKey(objKey)
	return ns
}

// itemLabels are the labels of a target's items.
func itemLabels(key targetKey, cluster string, spec *targetSpec) map[string]string {
	l := map[string]string{
		labelTarget:     labelValue(key.Name),
		labelProfile:    labelValue(spec.profile.Name),
		labelSourceKind: labelValue(spec.gvk.Kind),
	}
	group := spec.gvk.Group
	if group == "" {
		group = "core"
	}
	l[labelSourceGroup] = labelValue(group)
	if cluster != "" {
		l[kollect.LabelCluster] = cluster
	}
	if key.Cluster {
		l[labelProfileNamespace] = spec.profile.Namespace
	}
	return l
}

// labelsKey is a string only the same label set has, for comparisons.
func labelsKey(l map[string]string) string {
	return itemstore.LabelsKey(l)
}

// deleteAllItems deletes every stored item of a target, read from storage
// (not the index), a few at a time.
func (c *Collector) deleteAllItems(ctx context.Context, key targetKey) error {
	return c.deleteItemsOf(ctx, key, c.storeFor(key))
}

// deleteEveryClustersItems deletes the items of a target from every
// cluster: the host's collector holds the items finalizer for all.
func (c *Collector) deleteEveryClustersItems(ctx context.Context, key targetKey) error {
	return c.deleteItemsOf(ctx, key, everyCluster(c.storeFor(key)))
}

// collectorStore is a collector's view of store: its own cluster's items,
// written only while it holds its Lease.
func collectorStore(store *itemstore.Store, cfg Config) itemStore {
	return fencedItems{scopedItems{etcdItems{store}, cfg.Cluster, cfg.Member == nil}, cfg.Holding}
}

// everyCluster is store without its cluster scope, still fenced.
func everyCluster(store itemStore) itemStore {
	switch s := store.(type) {
	case fencedItems:
		return fencedItems{everyCluster(s.itemStore), s.holding}
	case scopedItems:
		return s.itemStore
	}
	return store
}

func (c *Collector) deleteItemsOf(ctx context.Context, key targetKey, store itemStore) error {
	selector := labels.SelectorFromSet(labels.Set{labelTarget: labelValue(key.Name)})
	var names []storedItem
	if err := store.list(ctx, key.Namespace, selector, func(s storedItem) { names = append(names, s) }); err != nil {
		return err
	}
	return c.deleteItems(ctx, store, names)
}

// deleteItems deletes stored items with a few concurrent calls.
func (c *Collector) deleteItems(ctx context.Context, store itemStore, items []storedItem) error {
	errs := make(chan error, len(items))
	sem := make(chan struct{}, c.workers)
	for _, it := range items {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			err := store.delete(ctx, it.namespace, it.name)
			if err == nil {
				countWrite(store.kind(), metrics.OpDelete)
			}
			errs <- err
		}()
	}
	var first error
	for range items {
		if err := <-errs; err != nil && first == nil {
			first = fmt.Errorf("deleting items: %w", err)
		}
	}
	return first
}
