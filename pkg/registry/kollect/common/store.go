package common

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/util/dryrun"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// Category is the kubectl category of every Kollect kind: kubectl get kollect.
const Category = "kollect"

// Kind describes one resource for NewStore.
type Kind struct {
	// Resource and Singular are the plural and singular resource names.
	Resource, Singular string
	// ShortNames for kubectl.
	ShortNames []string
	// New and NewList create empty internal objects.
	New, NewList func() runtime.Object
	// Strategy handles create, update and delete of the main resource.
	Strategy rest.CreateUpdateResetFieldsStrategy
	// Fields returns the selectable fields of an object beyond metadata.
	Fields func(obj runtime.Object) fields.Set
	// Table renders kubectl get output.
	Table rest.TableConvertor
	// Admission, when set, checks creates and updates of the main resource
	// against more than the object (tenancy.Checker).
	Admission Admission
	// Stored, when set, is given every object this replica creates,
	// updates or deletes, as stored (tenancy.Checker.ScopeStored).
	Stored func(obj runtime.Object)
	// Created, when set, is given every object this replica creates, as
	// stored; dry runs store nothing and are not given.
	Created func(obj runtime.Object)
}

// Admission checks a write against state outside the object: who is asking,
// the tenancy limits, how the server runs. It runs after the strategy has
// prepared and validated the object, in the slot of validating admission
// (rest.ValidateObjectFunc), inside the storage update for updates, so a
// rejected request never reaches etcd and an update is checked against the
// object it really replaces. Its errors are returned as they are (403 for
// authorization, 422 for limits).
type Admission interface {
	AdmitCreate(ctx context.Context, obj runtime.Object) error
	AdmitUpdate(ctx context.Context, obj, old runtime.Object) error
	// BeginCreate starts a create before its admission and returns the
	// context to create with and the finish, which is given the stored
	// object (nil when nothing was created): checks that count objects
	// (quotas) see the creates they admitted and are still writing.
	BeginCreate(ctx context.Context) (context.Context, func(created runtime.Object))
}

// NewStore builds the generic etcd-backed store of a kind.
func NewStore(k Kind, optsGetter generic.RESTOptionsGetter) (*genericregistry.Store, error) {
	attrs := func(obj runtime.Object) (labels.Set, fields.Set, error) {
		accessor, ok := obj.(metav1.Object)
		if !ok {
			return nil, nil, fmt.Errorf("%T is not a Kubernetes object", obj)
		}
		set := generic.AddObjectMetaFieldsSet(fields.Set{}, objectMeta(accessor), k.Strategy.NamespaceScoped())
		if k.Fields != nil {
			for f, v := range k.Fields(obj) {
				set[f] = v
			}
		}
		return accessor.GetLabels(), set, nil
	}
	store := &genericregistry.Store{
		NewFunc:     k.New,
		NewListFunc: k.NewList,
		PredicateFunc: func(l labels.Selector, f fields.Selector) storage.SelectionPredicate {
			return storage.SelectionPredicate{Label: l, Field: f, GetAttrs: attrs}
		},
		DefaultQualifiedResource:  kollect.Resource(k.Resource),
		SingularQualifiedResource: kollect.Resource(k.Singular),
		CreateStrategy:            k.Strategy,
		UpdateStrategy:            k.Strategy,
		DeleteStrategy:            k.Strategy,
		ResetFieldsStrategy:       k.Strategy,
		TableConvertor:            k.Table,
	}
	if k.Stored != nil || k.Created != nil {
		store.AfterCreate = func(obj runtime.Object, options *metav1.CreateOptions) {
			if k.Stored != nil {
				k.Stored(obj)
			}
			if k.Created != nil && (options == nil || !dryrun.IsDryRun(options.DryRun)) {
				k.Created(obj)
			}
		}
	}
	if k.Stored != nil {
		store.AfterUpdate = func(obj runtime.Object, _ *metav1.UpdateOptions) { k.Stored(obj) }
		store.AfterDelete = func(obj runtime.Object, _ *metav1.DeleteOptions) { k.Stored(obj) }
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: attrs}); err != nil {
		return nil, fmt.Errorf("%s storage: %w", k.Resource, err)
	}
	return store, nil
}

func objectMeta(o metav1.Object) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{Name: o.GetName(), Namespace: o.GetNamespace()}
}

// REST is the storage of a kind's main resource: the generic store plus
// the discovery details kubectl uses and the kind's admission checks.
type REST struct {
	*genericregistry.Store
	shortNames []string
	admission  Admission
}

// NewREST wraps a store with its short names and admission checks.
func NewREST(store *genericregistry.Store, k Kind) *REST {
	return &REST{Store: store, shortNames: k.ShortNames, admission: k.Admission}
}

// Create stores a new object once the kind's admission allows it.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if r.admission == nil {
		out, err := r.Store.Create(ctx, obj, createValidation, options)
		return out, storageError(err)
	}
	var dryRun []string
	if options != nil {
		dryRun = options.DryRun
	}
	ctx, finish := r.beginCreate(ctx, dryRun)
	var out runtime.Object
	var err error
	defer func() { finish(out) }() // nil unless stored, panics included
	out, err = r.Store.Create(ctx, obj, r.admitCreate(createValidation), options)
	if err != nil {
		out = nil
	}
	return out, storageError(err)
}

// Update replaces an object (or creates it, for server-side apply) once the
// kind's admission allows it. Patches and applies come through here too.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	finish := func(runtime.Object) {}
	if forceAllowCreate {
		// A server-side apply may create the object.
		var dryRun []string
		if options != nil {
			dryRun = options.DryRun
		}
		ctx, finish = r.beginCreate(ctx, dryRun)
	}
	var stored runtime.Object
	defer func() { finish(stored) }() // nil unless created, panics included
	out, created, err := r.Store.Update(ctx, name, updateErrors(ctx, objInfo), r.admitCreate(createValidation), r.admitUpdate(updateValidation), forceAllowCreate, options)
	if err == nil && created {
		stored = out
	}
	return out, created, storageError(err)
}

// beginCreate starts a create the kind's admission counts. A dry run
// stores nothing, so no count may hold a place for it.
func (r *REST) beginCreate(ctx context.Context, dryRun []string) (context.Context, func(created runtime.Object)) {
	if r.admission == nil || dryrun.IsDryRun(dryRun) {
		return ctx, func(runtime.Object) {}
	}
	return r.admission.BeginCreate(ctx)
}

// admitCreate runs the request's own validating admission, then the kind's.
func (r *REST) admitCreate(next rest.ValidateObjectFunc) rest.ValidateObjectFunc {
	if r.admission == nil {
		return next
	}
	return func(ctx context.Context, obj runtime.Object) error {
		if next != nil {
			if err := next(ctx, obj); err != nil {
				return err
			}
		}
		return r.admission.AdmitCreate(ctx, obj)
	}
}

// admitUpdate runs the request's own validating admission, then the kind's.
func (r *REST) admitUpdate(next rest.ValidateObjectUpdateFunc) rest.ValidateObjectUpdateFunc {
	if r.admission == nil {
		return next
	}
	return func(ctx context.Context, obj, old runtime.Object) error {
		if next != nil {
			if err := next(ctx, obj, old); err != nil {
				return err
			}
		}
		return r.admission.AdmitUpdate(ctx, obj, old)
	}
}

// ShortNames implements rest.ShortNamesProvider.
func (r *REST) ShortNames() []string { return r.shortNames }

// Categories implements rest.CategoriesProvider.
func (r *REST) Categories() []string { return []string{Category} }

// StatusREST is the status subresource: the same store with the status
// strategy, exposing only get, update and patch.
type StatusREST struct {
	store *genericregistry.Store
	// admit, when set, checks a status write against more than the
	// object, like Kind.Admission does for the main resource.
	admit StatusAdmission
}

// StatusAdmission checks a status write after the status strategy has
// prepared and validated it, inside the storage update.
type StatusAdmission func(ctx context.Context, obj, old runtime.Object) error

// WithAdmission returns the subresource with admit checking every write;
// a nil admit checks nothing.
func (r *StatusREST) WithAdmission(admit StatusAdmission) *StatusREST {
	r.admit = admit
	return r
}

// NewStatusREST derives the status subresource from a kind's store.
func NewStatusREST(main *genericregistry.Store, strategy rest.UpdateResetFieldsStrategy) *StatusREST {
	s := *main
	s.UpdateStrategy = strategy
	s.ResetFieldsStrategy = strategy
	return &StatusREST{store: &s}
}

// New returns an empty object.
func (r *StatusREST) New() runtime.Object { return r.store.New() }

// Destroy does nothing: the main resource owns the storage.
func (r *StatusREST) Destroy() {}

// Get retrieves the object, so that kubectl can patch status.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status; spec and metadata changes are discarded by the strategy.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status is never created through the subresource.
	out, created, err := r.store.Update(ctx, name, updateErrors(ctx, objInfo), createValidation, r.admitUpdate(updateValidation), false, options)
	return out, created, storageError(err)
}

// WriteStatus changes a stored object's status in process, as the server's
// own loopback user, through the status strategy and the kind's own
// checks: mutate is given a copy of the stored object, and again after a
// concurrent write won. It skips what a request through the loopback
// client costs (HTTP, JSON both ways, authentication, authorization and
// the field manager) and what only requests pass: admission plugins
// (webhooks, policies) and the audit log. managedFields stay as they are.
// It returns the object's resourceVersion after the write.
func (r *StatusREST) WriteStatus(ctx context.Context, namespace, name string, mutate func(obj runtime.Object) error) (string, error) {
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	ctx = genericapirequest.WithUser(ctx, &user.DefaultInfo{Name: user.APIServerUser, Groups: []string{user.SystemPrivilegedGroup}})
	objInfo := rest.DefaultUpdatedObjectInfo(nil, func(_ context.Context, _, old runtime.Object) (runtime.Object, error) {
		obj := old.DeepCopyObject()
		return obj, mutate(obj)
	})
	out, _, err := r.Update(ctx, name, objInfo, nil, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
	if err != nil {
		return "", err
	}
	m, err := meta.Accessor(out)
	if err != nil {
		return "", err
	}
	return m.GetResourceVersion(), nil
}

// admitUpdate runs the request's own validating admission, then the
// subresource's.
func (r *StatusREST) admitUpdate(next rest.ValidateObjectUpdateFunc) rest.ValidateObjectUpdateFunc {
	if r.admit == nil {
		return next
	}
	return func(ctx context.Context, obj, old runtime.Object) error {
		if next != nil {
			if err := next(ctx, obj, old); err != nil {
				return err
			}
		}
		return r.admit(ctx, obj, old)
	}
}

// GetResetFields implements rest.ResetFieldsStrategy.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable renders status the same way as the main resource.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
