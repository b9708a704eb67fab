package membercluster

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of memberclusters and memberclusters/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	main, status := kind.Strategies(common.NewBase(scheme, false, opts.Clock))
	k := common.Kind{
		Resource: "memberclusters", Singular: "membercluster", ShortNames: []string{"mc"},
		New:      func() runtime.Object { return &kollect.MemberCluster{} },
		NewList:  func() runtime.Object { return &kollect.MemberClusterList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Admission: opts.Checker.MemberClusters(),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	// With --tenant-mode a user's status write is refused like any update.
	statusREST := common.NewStatusREST(store, status).WithAdmission(common.TenantModeStatus(opts.Tenancy, k.Resource))
	return common.NewREST(store, k), statusREST, nil
}
