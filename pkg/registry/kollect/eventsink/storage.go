package eventsink

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// NewREST returns the storage of eventsinks and eventsinks/status.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts common.Options) (*common.REST, *common.StatusREST, error) {
	main, status := kind(opts.SinkValidation()).Strategies(common.NewBase(scheme, true, opts.Clock))
	k := common.Kind{
		Resource: "eventsinks", Singular: "eventsink", ShortNames: []string{"esink"},
		New:      func() runtime.Object { return &kollect.EventSink{} },
		NewList:  func() runtime.Object { return &kollect.EventSinkList{} },
		Strategy: main, Fields: selectableFields, Table: table,
		Admission: opts.Checker.WithQuota(tenancy.CountSinks, tenancy.Sinks(opts.Checker, "eventsinks", "EventSink", func(o *kollect.EventSink) *metav1.Duration { return o.Spec.ExportMinInterval })),
	}
	store, err := common.NewStore(k, optsGetter)
	if err != nil {
		return nil, nil, err
	}
	return common.NewREST(store, k), common.NewStatusREST(store, status), nil
}
