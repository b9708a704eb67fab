package clusterinventoryitem

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the read-only storage of clusterinventoryitems; the collector writes
// them through an itemstore.Store.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.ReadOnlyREST, error) {
	kind := common.Kind{
		Resource: "clusterinventoryitems", Singular: "clusterinventoryitem", ShortNames: []string{"citem"},
		New:      func() runtime.Object { return &kollect.ClusterInventoryItem{} },
		NewList:  func() runtime.Object { return &kollect.ClusterInventoryItemList{} },
		Strategy: kind.Strategy(common.NewBase(scheme, false, opts.Clock)), Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, err
	}
	return common.NewReadOnlyREST(store, kind), nil
}
