package clusterinventoryitem

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// Writer writes ClusterInventoryItems in process.
type Writer = common.Writer[*kollect.ClusterInventoryItem]

// NewREST returns the read-only storage of clusterinventoryitems and the writer
// the collector uses.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.ReadOnlyREST, *Writer, error) {
	kind := common.Kind{
		Resource: "clusterinventoryitems", Singular: "clusterinventoryitem", ShortNames: []string{"citem"},
		New:      func() runtime.Object { return &kollect.ClusterInventoryItem{} },
		NewList:  func() runtime.Object { return &kollect.ClusterInventoryItemList{} },
		Strategy: kind.Strategy(common.NewBase(scheme, false, opts.Clock)), Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewReadOnlyREST(store, kind), common.NewWriter[*kollect.ClusterInventoryItem](store), nil
}
