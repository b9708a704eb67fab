package inventoryitem

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the read-only storage of inventoryitems; the collector writes
// them through an itemstore.Store.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.ReadOnlyREST, error) {
	kind := common.Kind{
		Resource: "inventoryitems", Singular: "inventoryitem", ShortNames: []string{"item"},
		New:      func() runtime.Object { return &kollect.InventoryItem{} },
		NewList:  func() runtime.Object { return &kollect.InventoryItemList{} },
		Strategy: kind.Strategy(common.NewBase(scheme, true, opts.Clock)), Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, err
	}
	return common.NewReadOnlyREST(store, kind), nil
}
