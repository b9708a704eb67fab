package profile

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of profiles and profiles/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	s := strategy{common.NewBase(scheme, true, opts.Clock)}
	kind := common.Kind{
		Resource: "profiles", Singular: "profile", ShortNames: []string{"prof"},
		New:      func() runtime.Object { return &kollect.Profile{} },
		NewList:  func() runtime.Object { return &kollect.ProfileList{} },
		Strategy: s, Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, kind), common.NewStatusREST(store, statusStrategy{s}), nil
}
