package common

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// ReadOnlyREST serves get, list and watch of a store and nothing else, so
// discovery advertises only those verbs and every write answers 405. The
// collector writes the items through pkg/itemstore, under the same keys.
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
