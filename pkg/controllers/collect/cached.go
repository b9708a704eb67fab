package collect

import (
	"fmt"
	"slices"
	"strings"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// cachedObject is what the informers of collected kinds keep of an object.
// An unstructured object costs about 2 KiB of small maps and boxed strings
// even for a small ConfigMap, and there is one per collected object: this
// keeps what matching and the index need decoded (interned where objects
// share values) and what extraction reads (fields.go) as CBOR, decoded
// again only to extract. CBOR,
// unlike JSON, keeps int64 and float64 apart, so the object extraction sees
// is the one the informer decoded, value for value.
type cachedObject struct {
	apiVersion, kind, namespace unique.Handle[string]
	name, resourceVersion       string
	uid                         types.UID
	labels                      objectLabels
	// raw is the CBOR encoding of the object as the informer's transform
	// left it; object is used instead in the unexpected case that it
	// could not be encoded.
	raw    []byte
	object map[string]any
}

// compact turns an unstructured object into a cachedObject whose CBOR
// keeps the fields of the tree (nil: all); anything else passes through
// (tombstones, objects already compacted). Matching reads the metadata of
// the whole object, extraction only the fields.
func compact(obj any, fields fieldTree) any {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj
	}
	o := &cachedObject{
		apiVersion:      unique.Make(u.GetAPIVersion()),
		kind:            unique.Make(u.GetKind()),
		namespace:       unique.Make(u.GetNamespace()),
		name:            u.GetName(),
		resourceVersion: u.GetResourceVersion(),
		uid:             u.GetUID(),
		labels:          labelsOf(u.GetLabels()),
	}
	fields.keep(u)
	raw, err := direct.Marshal(u.Object)
	if err != nil {
		o.object = u.Object
	} else {
		o.raw = raw
	}
	return o
}

// Object is the object to extract from, decoded anew each time.
func (o *cachedObject) Object() (map[string]any, error) {
	if o.raw == nil {
		return o.object, nil
	}
	var m map[string]any
	if err := direct.Unmarshal(o.raw, &m); err != nil {
		return nil, fmt.Errorf("decoding the cached object: %w", err)
	}
	return m, nil
}

// Source is the item source of the object, as extract.SourceOf would say.
func (o *cachedObject) Source() kollect.ItemSource {
	return kollect.ItemSource{
		APIVersion:      o.apiVersion.Value(),
		Kind:            o.kind.Value(),
		Namespace:       o.namespace.Value(),
		Name:            o.name,
		UID:             o.uid,
		ResourceVersion: o.resourceVersion,
	}
}

func (o *cachedObject) Namespace() string { return o.namespace.Value() }

// GetObjectMeta makes the object a metav1.ObjectMetaAccessor, so that the
// informer computes keys and resourceVersions of it; labels and the rest of
// the metadata are not part of it.
func (o *cachedObject) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: o.namespace.Value(), Name: o.name, UID: o.uid, ResourceVersion: o.resourceVersion}
}

// namespaceIndex is cache.MetaNamespaceIndexFunc without building metadata.
func namespaceIndex(obj any) ([]string, error) {
	if o, ok := obj.(*cachedObject); ok {
		return []string{o.namespace.Value()}, nil
	}
	return cache.MetaNamespaceIndexFunc(obj)
}

// objectLabels are an object's labels sorted by key, interned: most objects
// of a kind share their label keys and many their values. They implement
// labels.Labels.
type objectLabels []labelPair

type labelPair struct{ key, value unique.Handle[string] }

func labelsOf(m map[string]string) objectLabels {
	if len(m) == 0 {
		return nil
	}
	out := make(objectLabels, 0, len(m))
	for k, v := range m {
		out = append(out, labelPair{unique.Make(k), unique.Make(v)})
	}
	slices.SortFunc(out, func(a, b labelPair) int { return strings.Compare(a.key.Value(), b.key.Value()) })
	return out
}

func (l objectLabels) Lookup(key string) (string, bool) {
	i, ok := slices.BinarySearchFunc(l, key, func(p labelPair, key string) int { return strings.Compare(p.key.Value(), key) })
	if !ok {
		return "", false
	}
	return l[i].value.Value(), true
}

func (l objectLabels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

func (l objectLabels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// objectName is the namespace and name of an informer's object or tombstone.
func objectName(obj any) (namespace, name string, ok bool) {
	switch o := obj.(type) {
	case *cachedObject:
		return o.namespace.Value(), o.name, true
	case cache.DeletedFinalStateUnknown:
		ns, name, err := cache.SplitMetaNamespaceKey(o.Key)
		return ns, name, err == nil
	}
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return "", "", false
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	return ns, name, err == nil
}

// queuedObject is an objectKey as the object queue holds it: a walk queues
// every object of a target at once, and the queue's sets and metrics keep
// their size after draining, so its keys are interned handles (32 bytes
// instead of 72).
type queuedObject struct {
	target    unique.Handle[targetKey]
	namespace unique.Handle[string]
	name      string
}

func (k objectKey) queued() queuedObject {
	return queuedObject{target: unique.Make(k.target), namespace: unique.Make(k.namespace), name: k.name}
}

func (q queuedObject) key() objectKey {
	return objectKey{target: q.target.Value(), namespace: q.namespace.Value(), name: q.name}
}

// String is for logs.
func (q queuedObject) String() string {
	k := q.key()
	return fmt.Sprintf("%s: %s", k.target, objectKeyOf(k.namespace, k.name))
}
