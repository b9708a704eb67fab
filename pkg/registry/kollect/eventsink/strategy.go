// Package eventsink is the registry of EventSinks, change-event destinations.
package eventsink

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// kind describes EventSinks to the shared strategies; endpoint checks depend on
// the server's --allow-private-sink-endpoints.
func kind(opts validation.Options) common.SpecStatus[*kollect.EventSink, kollect.EventSinkSpec, kollect.SinkStatus] {
	return common.SpecStatus[*kollect.EventSink, kollect.EventSinkSpec, kollect.SinkStatus]{
		Meta:   func(o *kollect.EventSink) *metav1.ObjectMeta { return &o.ObjectMeta },
		Spec:   func(o *kollect.EventSink) *kollect.EventSinkSpec { return &o.Spec },
		Status: func(o *kollect.EventSink) *kollect.SinkStatus { return &o.Status },
		ValidateStatus: func(o *kollect.EventSink) field.ErrorList {
			return validation.ValidateSinkStatus(&o.Status, field.NewPath("status"))
		},
		Validate: func(o *kollect.EventSink) field.ErrorList { return validation.ValidateEventSink(o, opts) },
		ValidateUpdate: func(o, old *kollect.EventSink) field.ErrorList {
			return validation.ValidateEventSinkUpdate(o, old, opts)
		},
		// The Secret is used on the authority of the user who set it.
		Requester: func(o *kollect.EventSink) **kollect.RequesterInfo { return &o.Status.Requester },
		ReferencesChanged: func(o, old *kollect.EventSink) bool {
			return tenancy.SinkReferencesChanged(o, old)
		},
	}
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.type": string(obj.(*kollect.EventSink).Spec.Type)}
}
