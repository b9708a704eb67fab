package collect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"unique"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/registry/kollect/common"
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
	source          kollect.ItemSource
	content         extract.Content
	hash            string
}

// storedItem is what a full walk needs of a stored item: strings only, so
// that a walk over every item does not hold each one's label map.
type storedItem struct {
	namespace, name string
	target          string // the item's kollect.dev/target label
	labels          string // labelsKey of the item's labels
	objKey          string // namespace/name of the source object
	sourceRV        string
	hash            itemHash
	rv              uint64 // the item's resourceVersion
}

func storedOf(meta *metav1.ObjectMeta, source kollect.ItemSource, hash string) storedItem {
	return storedItem{
		rv:        rvOf(meta.ResourceVersion),
		namespace: meta.Namespace,
		name:      meta.Name,
		target:    meta.Labels[labelTarget],
		// The items of a target share their labels: one copy for all.
		labels:   unique.Make(labelsKey(meta.Labels)).Value(),
		objKey:   objectKeyOf(source.Namespace, source.Name),
		sourceRV: source.ResourceVersion,
		hash:     hashOf(hash),
	}
}

// rvOf reads a resourceVersion as the number etcd made it; 0 when it is
// not one.
func rvOf(rv string) uint64 {
	n, _ := strconv.ParseUint(rv, 10, 64)
	return n
}

// itemStore writes one item kind in process, through the registry.
type itemStore interface {
	kind() string
	// put stores an item and returns the resourceVersion it was stored at.
	put(ctx context.Context, item *desiredItem, exists bool) (created bool, rv uint64, err error)
	delete(ctx context.Context, namespace, name string) error
	// get reads one stored item, false when there is none.
	get(ctx context.Context, namespace, name string) (storedItem, bool, error)
	// list calls fn for every stored item matching selector in namespace
	// ("" for all), one page at a time.
	list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error
	// watch watches every stored item after resourceVersion rv ("" for
	// now), with bookmarks.
	watch(ctx context.Context, rv string) (watch.Interface, error)
	// stored reads what a watch event's object holds, false for what is
	// not an item.
	stored(obj runtime.Object) (storedItem, bool)
	// position is the stored items' resourceVersion now.
	position(ctx context.Context) (string, error)
}

// writerStore adapts the registry's Writer of one item type.
type writerStore[T runtime.Object] struct {
	itemKind string
	writer   *common.Writer[T]
	build    func(*desiredItem) T
	items    func(list runtime.Object) ([]storedItem, string)
	item     func(obj runtime.Object) (storedItem, bool)
}

func (s *writerStore[T]) kind() string { return s.itemKind }

// put creates or updates an item: it tries what the index suggests and
// falls back to the other, so a stale index costs one extra call, never a
// wrong result.
func (s *writerStore[T]) put(ctx context.Context, item *desiredItem, exists bool) (bool, uint64, error) {
	if exists {
		out, err := s.writer.Update(ctx, s.build(item))
		if !apierrors.IsNotFound(err) {
			return false, s.rv(out, err), err
		}
	}
	out, err := s.writer.Create(ctx, s.build(item))
	if apierrors.IsAlreadyExists(err) {
		out, err = s.writer.Update(ctx, s.build(item))
		return false, s.rv(out, err), err
	}
	return err == nil, s.rv(out, err), err
}

// rv is the resourceVersion of a written object.
func (s *writerStore[T]) rv(obj T, err error) uint64 {
	if err != nil {
		return 0
	}
	m, merr := meta.Accessor(obj)
	if merr != nil {
		return 0
	}
	return rvOf(m.GetResourceVersion())
}

func (s *writerStore[T]) watch(ctx context.Context, rv string) (watch.Interface, error) {
	return s.writer.Watch(ctx, "", &metainternalversion.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
}

func (s *writerStore[T]) stored(obj runtime.Object) (storedItem, bool) {
	return s.item(obj)
}

func (s *writerStore[T]) position(ctx context.Context) (string, error) {
	list, err := s.writer.List(ctx, "", &metainternalversion.ListOptions{Limit: 1})
	if err != nil {
		return "", err
	}
	m, err := meta.ListAccessor(list)
	if err != nil {
		return "", err
	}
	return m.GetResourceVersion(), nil
}

func (s *writerStore[T]) get(ctx context.Context, namespace, name string) (storedItem, bool, error) {
	obj, err := s.writer.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return storedItem{}, false, nil
	}
	if err != nil {
		return storedItem{}, false, err
	}
	item, ok := s.item(obj)
	return item, ok, nil
}

func (s *writerStore[T]) delete(ctx context.Context, namespace, name string) error {
	err := s.writer.Delete(ctx, namespace, name, nil)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (s *writerStore[T]) list(ctx context.Context, namespace string, selector labels.Selector, fn func(storedItem)) error {
	opts := &metainternalversion.ListOptions{LabelSelector: selector, Limit: listPageSize}
	for {
		list, err := s.writer.List(ctx, namespace, opts)
		if err != nil {
			return err
		}
		items, next := s.items(list)
		for _, item := range items {
			fn(item)
		}
		if next == "" {
			return nil
		}
		opts = &metainternalversion.ListOptions{LabelSelector: selector, Limit: listPageSize, Continue: next}
	}
}

func newItemStores(items *common.Writer[*kollect.InventoryItem], clusterItems *common.Writer[*kollect.ClusterInventoryItem]) (itemStore, itemStore) {
	namespaced := &writerStore[*kollect.InventoryItem]{
		itemKind: "InventoryItem",
		writer:   items,
		build: func(d *desiredItem) *kollect.InventoryItem {
			return &kollect.InventoryItem{
				ObjectMeta: metav1.ObjectMeta{Namespace: d.namespace, Name: d.name, Labels: d.labels},
				Source:     d.source, Attributes: d.content.Attributes, Object: d.content.Object, Hash: d.hash,
			}
		},
		items: func(list runtime.Object) ([]storedItem, string) {
			l := list.(*kollect.InventoryItemList)
			out := make([]storedItem, len(l.Items))
			for i := range l.Items {
				out[i] = storedOf(&l.Items[i].ObjectMeta, l.Items[i].Source, l.Items[i].Hash)
			}
			return out, l.Continue
		},
		item: func(obj runtime.Object) (storedItem, bool) {
			it, ok := obj.(*kollect.InventoryItem)
			if !ok {
				return storedItem{}, false
			}
			return storedOf(&it.ObjectMeta, it.Source, it.Hash), true
		},
	}
	cluster := &writerStore[*kollect.ClusterInventoryItem]{
		itemKind: "ClusterInventoryItem",
		writer:   clusterItems,
		build: func(d *desiredItem) *kollect.ClusterInventoryItem {
			return &kollect.ClusterInventoryItem{
				ObjectMeta: metav1.ObjectMeta{Name: d.name, Labels: d.labels},
				Source:     d.source, Attributes: d.content.Attributes, Object: d.content.Object, Hash: d.hash,
			}
		},
		items: func(list runtime.Object) ([]storedItem, string) {
			l := list.(*kollect.ClusterInventoryItemList)
			out := make([]storedItem, len(l.Items))
			for i := range l.Items {
				out[i] = storedOf(&l.Items[i].ObjectMeta, l.Items[i].Source, l.Items[i].Hash)
			}
			return out, l.Continue
		},
		item: func(obj runtime.Object) (storedItem, bool) {
			it, ok := obj.(*kollect.ClusterInventoryItem)
			if !ok {
				return storedItem{}, false
			}
			return storedOf(&it.ObjectMeta, it.Source, it.Hash), true
		},
	}
	return namespaced, cluster
}

func (c *Collector) storeFor(key targetKey) itemStore {
	if key.Cluster {
		return c.clusterItemStore
	}
	return c.itemStore
}

// itemEntry is the index's record of one stored item. It is kept small:
// there is one per item.
type itemEntry struct {
	objKey   string // namespace/name of the source object
	hash     itemHash
	labels   string // labelsKey of the item's labels, shared by the target's items
	sourceRV string
	// extractedWith is the configuration fingerprint the hash was computed
	// with; with an unchanged source resourceVersion it lets a walk skip
	// extraction. Empty when unknown (read back from storage).
	extractedWith string
	// rv is the item's resourceVersion when this collector last wrote or
	// read it: a watch event at or before it is not news (foreign.go).
	rv uint64
}

// itemHash is an item's content hash (extract.Hash) as bytes rather than
// 64 hex digits.
type itemHash [sha256.Size]byte

// hashOf parses a hash; one that does not parse (not written by this
// collector) is the zero hash, which no content has: the item is rewritten.
func hashOf(hexHash string) itemHash {
	var h itemHash
	if len(hexHash) != hex.EncodedLen(len(h)) {
		return itemHash{}
	}
	if _, err := hex.Decode(h[:], []byte(hexHash)); err != nil {
		return itemHash{}
	}
	return h
}

// objectKeyOf is the cache key of a source: namespace/name, or name.
func objectKeyOf(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// itemLabels are the labels of a target's items.
func itemLabels(key targetKey, cfg *targetConfig) map[string]string {
	l := map[string]string{
		labelTarget:     labelValue(key.Name),
		labelProfile:    labelValue(cfg.profile.Name),
		labelSourceKind: labelValue(cfg.gvk.Kind),
	}
	group := cfg.gvk.Group
	if group == "" {
		group = "core"
	}
	l[labelSourceGroup] = labelValue(group)
	if key.Cluster {
		l[labelProfileNamespace] = cfg.profile.Namespace
	}
	return l
}

// labelsKey is a canonical string of a label set, for comparisons.
func labelsKey(l map[string]string) string {
	return labels.Set(l).String()
}

// entryOf turns a stored item into an index entry.
func entryOf(s storedItem) *itemEntry {
	return &itemEntry{objKey: s.objKey, hash: s.hash, labels: s.labels, sourceRV: s.sourceRV, rv: s.rv}
}

// deleteAllItems deletes every stored item of a target, read from storage
// (not the index), a few at a time.
func (c *Collector) deleteAllItems(ctx context.Context, key targetKey) error {
	store := c.storeFor(key)
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
				c.countWrite(store.kind(), metrics.OpDelete)
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
