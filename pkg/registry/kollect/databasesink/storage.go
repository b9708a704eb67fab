package databasesink

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// NewREST returns the storage of databasesinks and databasesinks/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	s := strategy{Base: common.NewBase(scheme, true, opts.Clock), validation: validation.Options{AllowPrivateSinkEndpoints: opts.AllowPrivateSinkEndpoints}}
	kind := common.Kind{
		Resource: "databasesinks", Singular: "databasesink", ShortNames: []string{"dsink"},
		New:      func() runtime.Object { return &kollect.DatabaseSink{} },
		NewList:  func() runtime.Object { return &kollect.DatabaseSinkList{} },
		Strategy: s, Fields: selectableFields, Table: table,
	}
	store, err := common.NewStore(kind, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, kind), common.NewStatusREST(store, statusStrategy{s}), nil
}
