// Package source lists and watches the host cluster's objects of a kind
// the collector collects, and keeps of each only what the collector reads:
// the metadata that matching and the item's source need, and the fields
// its Profiles' attribute paths select, as JSON.
//
// The objects are decoded straight from the API server's JSON list and
// watch streams (decode.go): no unstructured map of the whole object is
// ever built. What extraction is given (Object.Decode) is exactly what the
// dynamic client would have decoded, value for value, minus the fields no
// Profile reads: managedFields and the last-applied annotation go unless a
// Resource-mode Profile keeps them, and Attributes-mode Profiles keep only
// the fields their paths select (fields.go).
package source

import (
	"fmt"
	"slices"
	"strings"
	"unique"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/jsonscan"
)

// Object is what an informer of a collected kind keeps of an object. An
// unstructured object costs about 2 KiB of small maps and boxed strings even
// for a small ConfigMap, and there is one per collected object: this keeps
// what matching and the index need decoded (interned where objects share
// values), and what extraction reads as JSON, decoded only to extract.
type Object struct {
	apiVersion, kind, namespace unique.Handle[string]
	// typed: apiVersion and kind are left out of raw, and are the strings
	// above.
	typed                 bool
	name, resourceVersion string
	uid                   types.UID
	labels                Labels
	// annotations are kept for bookmarks only: the reflector reads the end
	// of the initial events there.
	annotations map[string]string
	// raw is the JSON extraction reads: the object as trimmed to its shape
	// (a string: immutable, and a word smaller than a slice).
	raw string
}

var (
	_ runtime.Object = &Object{}
	_ metav1.Object  = &Object{}
)

// GetObjectKind implements runtime.Object; the kind is in Source.
func (o *Object) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject implements runtime.Object. An Object is never changed once
// decoded, so a copy may share its parts.
func (o *Object) DeepCopyObject() runtime.Object {
	c := *o
	return &c
}

// Decode is the object to extract from, decoded anew each time as the
// dynamic client decodes JSON (integers as int64, other numbers float64).
func (o *Object) Decode() (map[string]any, error) {
	v, err := jsonscan.Decode(unsafe.Slice(unsafe.StringData(o.raw), len(o.raw)))
	if err != nil {
		return nil, fmt.Errorf("decoding the cached object: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("the cached object is a %T", v)
	}
	if o.typed {
		m["apiVersion"], m["kind"] = o.apiVersion.Value(), o.kind.Value()
	}
	return m, nil
}

// Source is the item source of the object.
func (o *Object) Source() kollect.ItemSource {
	return kollect.ItemSource{
		APIVersion:      o.apiVersion.Value(),
		Kind:            o.kind.Value(),
		Namespace:       o.namespace.Value(),
		Name:            o.name,
		UID:             o.uid,
		ResourceVersion: o.resourceVersion,
	}
}

func (o *Object) Namespace() string       { return o.namespace.Value() }
func (o *Object) Name() string            { return o.name }
func (o *Object) ResourceVersion() string { return o.resourceVersion }
func (o *Object) Labels() Labels          { return o.labels }

// NamespaceIndex is cache.MetaNamespaceIndexFunc without building metadata.
func NamespaceIndex(obj any) ([]string, error) {
	if o, ok := obj.(*Object); ok {
		return []string{o.namespace.Value()}, nil
	}
	return cache.MetaNamespaceIndexFunc(obj)
}

// Labels are an object's labels sorted by key, interned: most objects of a
// kind share their label keys and many their values. They implement
// labels.Labels.
type Labels []labelPair

type labelPair struct{ key, value unique.Handle[string] }

func labelsOf(m map[string]string) Labels {
	if len(m) == 0 {
		return nil
	}
	out := make(Labels, 0, len(m))
	for k, v := range m {
		out = append(out, labelPair{unique.Make(k), unique.Make(v)})
	}
	slices.SortFunc(out, func(a, b labelPair) int { return strings.Compare(a.key.Value(), b.key.Value()) })
	return out
}

func (l Labels) Lookup(key string) (string, bool) {
	i, ok := slices.BinarySearchFunc(l, key, func(p labelPair, key string) int { return strings.Compare(p.key.Value(), key) })
	if !ok {
		return "", false
	}
	return l[i].value.Value(), true
}

func (l Labels) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

func (l Labels) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

// NameOf is the namespace and name of an informer's object or tombstone.
func NameOf(obj any) (namespace, name string, ok bool) {
	switch o := obj.(type) {
	case *Object:
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
