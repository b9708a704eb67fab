package target

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of targets and targets/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	main, status := kind.Strategies(common.NewBase(scheme, true, opts.Clock))
	k := common.Kind{
		Resource: "targets", Singular: "target", ShortNames: []string{"tgt"},
		New:      func() runtime.Object { return &kollect.Target{} },
		NewList:  func() runtime.Object { return &kollect.TargetList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Admission: opts.Checker.WithQuota(tenancy.CountTargets, opts.Checker.Targets()),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, k), common.NewStatusREST(store, status), nil
}
