package inventory

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of inventories and inventories/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	main, status := kind.Strategies(common.NewBase(scheme, true, opts.Clock))
	k := common.Kind{
		Resource: "inventories", Singular: "inventory", ShortNames: []string{"inv"},
		New:      func() runtime.Object { return &kollect.Inventory{} },
		NewList:  func() runtime.Object { return &kollect.InventoryList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Admission: opts.Checker.WithQuota(tenancy.CountInventories, opts.Checker.Inventories()),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, k), common.NewStatusREST(store, status), nil
}
