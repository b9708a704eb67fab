package profile

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of profiles and profiles/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	main, status := kind.Strategies(common.NewBase(scheme, true, opts.Clock))
	k := common.Kind{
		Resource: "profiles", Singular: "profile", ShortNames: []string{"prof"},
		New:      func() runtime.Object { return &kollect.Profile{} },
		NewList:  func() runtime.Object { return &kollect.ProfileList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Admission: opts.Checker.WithQuota(tenancy.CountProfiles, opts.Checker.Profiles()),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, k), common.NewStatusREST(store, status), nil
}
