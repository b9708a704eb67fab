package clusterscope

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of clusterscopes.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, error) {
	kind := common.Kind{
		Resource: "clusterscopes", Singular: "clusterscope", ShortNames: []string{"kcscope"},
		New:      func() runtime.Object { return &kollect.ClusterScope{} },
		NewList:  func() runtime.Object { return &kollect.ClusterScopeList{} },
		Strategy: kind.Strategy(common.NewBase(scheme, false, opts.Clock)), Table: table,
		Admission: opts.Checker.ClusterScopes(), Stored: opts.Checker.ScopeStored,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, err
	}
	return common.NewREST(store, kind), nil
}
