package snapshotsink

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of snapshotsinks and snapshotsinks/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	s := strategy{Base: common.NewBase(scheme, true, opts.Clock), validation: validation.Options{AllowPrivateSinkEndpoints: opts.AllowPrivateSinkEndpoints}}
	kind := common.Kind{
		Resource: "snapshotsinks", Singular: "snapshotsink", ShortNames: []string{"ssink"},
		New:      func() runtime.Object { return &kollect.SnapshotSink{} },
		NewList:  func() runtime.Object { return &kollect.SnapshotSinkList{} },
		Strategy: s, Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, kind), common.NewStatusREST(store, statusStrategy{s}), nil
}
