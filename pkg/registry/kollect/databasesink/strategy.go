// Package databasesink is the registry of DatabaseSinks, row destinations.
package databasesink

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

// kind describes DatabaseSinks to the shared strategies; endpoint checks depend on
// the server's --allow-private-sink-endpoints.
func kind(opts validation.Options) common.SpecStatus[*kollect.DatabaseSink, kollect.DatabaseSinkSpec, kollect.SinkStatus] {
	return common.SpecStatus[*kollect.DatabaseSink, kollect.DatabaseSinkSpec, kollect.SinkStatus]{
		Meta:   func(o *kollect.DatabaseSink) *metav1.ObjectMeta { return &o.ObjectMeta },
		Spec:   func(o *kollect.DatabaseSink) *kollect.DatabaseSinkSpec { return &o.Spec },
		Status: func(o *kollect.DatabaseSink) *kollect.SinkStatus { return &o.Status },
		ValidateStatus: func(o *kollect.DatabaseSink) field.ErrorList {
			return validation.ValidateSinkStatus(&o.Status, field.NewPath("status"))
		},
		Validate: func(o *kollect.DatabaseSink) field.ErrorList { return validation.ValidateDatabaseSink(o, opts) },
		ValidateUpdate: func(o, old *kollect.DatabaseSink) field.ErrorList {
			return validation.ValidateDatabaseSinkUpdate(o, old, opts)
		},
		// The Secret is used on the authority of the user who set it.
		Requester: func(o *kollect.DatabaseSink) **kollect.RequesterInfo { return &o.Status.Requester },
		ReferencesChanged: func(o, old *kollect.DatabaseSink) bool {
			return tenancy.SinkReferencesChanged(o, old)
		},
	}
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.type": string(obj.(*kollect.DatabaseSink).Spec.Type)}
}
