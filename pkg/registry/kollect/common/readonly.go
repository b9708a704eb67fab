package common

import (
	"context"
	"fmt"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// ReadOnlyREST serves get, list and watch of a store and nothing else, so
// discovery advertises only those verbs and every write answers 405. The
// collector writes through a Writer on the same store.
type ReadOnlyREST struct {
	store      *genericregistry.Store
	shortNames []string
}

var (
	_ rest.Getter               = &ReadOnlyREST{}
	_ rest.Lister               = &ReadOnlyREST{}
	_ rest.Watcher              = &ReadOnlyREST{}
	_ rest.Scoper               = &ReadOnlyREST{}
	_ rest.ShortNamesProvider   = &ReadOnlyREST{}
	_ rest.CategoriesProvider   = &ReadOnlyREST{}
	_ rest.SingularNameProvider = &ReadOnlyREST{}
	_ rest.Storage              = &ReadOnlyREST{}
)

// NewReadOnlyREST exposes the reading half of a store.
func NewReadOnlyREST(store *genericregistry.Store, k Kind) *ReadOnlyREST {
	return &ReadOnlyREST{store: store, shortNames: k.ShortNames}
}

func (r *ReadOnlyREST) New() runtime.Object     { return r.store.New() }
func (r *ReadOnlyREST) NewList() runtime.Object { return r.store.NewList() }
func (r *ReadOnlyREST) Destroy()                { r.store.Destroy() }
func (r *ReadOnlyREST) NamespaceScoped() bool   { return r.store.NamespaceScoped() }
func (r *ReadOnlyREST) ShortNames() []string    { return r.shortNames }
func (r *ReadOnlyREST) Categories() []string    { return []string{Category} }
func (r *ReadOnlyREST) GetSingularName() string { return r.store.GetSingularName() }

func (r *ReadOnlyREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

func (r *ReadOnlyREST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.store.List(ctx, options)
}

func (r *ReadOnlyREST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return r.store.Watch(ctx, options)
}

func (r *ReadOnlyREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// Writer is the in-process write path of a read-only kind. Writes go through
// the same store users read from, so the strategy validates them, they are
// stored in etcd and every watcher sees them; they simply never cross HTTP.
type Writer[T runtime.Object] struct {
	store *genericregistry.Store
}

// NewWriter returns the writer of a store.
func NewWriter[T runtime.Object](store *genericregistry.Store) *Writer[T] {
	return &Writer[T]{store: store}
}

// context carries the namespace the store expects in every request; it is
// empty for cluster-scoped kinds.
func (w *Writer[T]) context(ctx context.Context, namespace string) context.Context {
	return genericapirequest.WithNamespace(ctx, namespace)
}

// Get reads one object.
func (w *Writer[T]) Get(ctx context.Context, namespace, name string) (T, error) {
	obj, err := w.store.Get(w.context(ctx, namespace), name, &metav1.GetOptions{})
	return typed[T](obj, err)
}

// Create stores a new object.
func (w *Writer[T]) Create(ctx context.Context, obj T) (T, error) {
	m, err := metaOf(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	out, err := w.store.Create(w.context(ctx, m.GetNamespace()), obj, rest.ValidateAllObjectFunc, &metav1.CreateOptions{})
	return typed[T](out, err)
}

// Update replaces an object. With a resourceVersion set, it fails with a
// conflict when the stored object has moved on.
func (w *Writer[T]) Update(ctx context.Context, obj T) (T, error) {
	m, err := metaOf(obj)
	if err != nil {
		var zero T
		return zero, err
	}
	out, _, err := w.store.Update(w.context(ctx, m.GetNamespace()), m.GetName(), rest.DefaultUpdatedObjectInfo(obj),
		rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	return typed[T](out, err)
}

// Delete removes an object; preconditions (uid, resourceVersion) are optional.
func (w *Writer[T]) Delete(ctx context.Context, namespace, name string, preconditions *metav1.Preconditions) error {
	_, _, err := w.store.Delete(w.context(ctx, namespace), name, rest.ValidateAllObjectFunc, &metav1.DeleteOptions{Preconditions: preconditions})
	return err
}

// List reads objects matching options in a namespace ("" for all).
func (w *Writer[T]) List(ctx context.Context, namespace string, options *metainternalversion.ListOptions) (runtime.Object, error) {
	return w.store.List(w.context(ctx, namespace), options)
}

// Watch watches objects matching options in a namespace ("" for all).
func (w *Writer[T]) Watch(ctx context.Context, namespace string, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return w.store.Watch(w.context(ctx, namespace), options)
}

func metaOf(obj runtime.Object) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object metadata", obj)
	}
	return m, nil
}

func typed[T runtime.Object](obj runtime.Object, err error) (T, error) {
	var zero T
	if err != nil {
		return zero, err
	}
	t, ok := obj.(T)
	if !ok {
		return zero, fmt.Errorf("store returned %T, want %T", obj, zero)
	}
	return t, nil
}
