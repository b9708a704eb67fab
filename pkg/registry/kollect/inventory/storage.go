package inventory

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of inventories and inventories/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	withFirst := kind
	withFirst.Start = func(ctx context.Context, inv *kollect.Inventory) {
		if s := &inv.Spec; s.Suspend || len(s.SnapshotSinkRefs)+len(s.DatabaseSinkRefs)+len(s.EventSinkRefs) == 0 {
			return // no exporters: nothing to look up, or to ask
		}
		inv.Status.SinkExports = opts.FirstEntries.Entries(ctx, scheme, inv, &v1alpha1.Inventory{}, func(ctx context.Context) bool {
			return len(validation.ValidateInventory(inv)) == 0 && opts.Checker.MayGet(ctx, "inventories", inv.Namespace, inv.Name) &&
				opts.Checker.Inventories().AdmitCreate(ctx, inv) == nil
		})
	}
	main, status := withFirst.Strategies(common.NewBase(scheme, true, opts.Clock))
	k := common.Kind{
		Resource: "inventories", Singular: "inventory", ShortNames: []string{"inv"},
		New:      func() runtime.Object { return &kollect.Inventory{} },
		NewList:  func() runtime.Object { return &kollect.InventoryList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Created: func(obj runtime.Object) {
			if len(obj.(*kollect.Inventory).Status.SinkExports) > 0 {
				opts.FirstEntries.Created(scheme, obj, &v1alpha1.Inventory{})
			}
		},
		Admission: opts.Checker.WithQuota(tenancy.CountInventories, opts.Checker.Inventories()),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, k), common.NewStatusREST(store, status), nil
}
