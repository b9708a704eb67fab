package scope

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of scopes.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, error) {
	kind := common.Kind{
		Resource: "scopes", Singular: "scope", ShortNames: []string{"kscope"},
		New:      func() runtime.Object { return &kollect.Scope{} },
		NewList:  func() runtime.Object { return &kollect.ScopeList{} },
		Strategy: kind.Strategy(common.NewBase(scheme, true, opts.Clock)), Table: table,
		Admission: opts.Checker.Scopes(), Stored: opts.Checker.ScopeStored,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, err
	}
	return common.NewREST(store, kind), nil
}
