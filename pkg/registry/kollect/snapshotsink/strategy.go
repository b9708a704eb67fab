// Package snapshotsink is the registry of SnapshotSinks, whole-snapshot destinations.
package snapshotsink

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

// kind describes SnapshotSinks to the shared strategies; endpoint checks depend on
// the server's --allow-private-sink-endpoints.
func kind(opts validation.Options) common.SpecStatus[*kollect.SnapshotSink, kollect.SnapshotSinkSpec, kollect.SinkStatus] {
	return common.SpecStatus[*kollect.SnapshotSink, kollect.SnapshotSinkSpec, kollect.SinkStatus]{
		Meta:   func(o *kollect.SnapshotSink) *metav1.ObjectMeta { return &o.ObjectMeta },
		Spec:   func(o *kollect.SnapshotSink) *kollect.SnapshotSinkSpec { return &o.Spec },
		Status: func(o *kollect.SnapshotSink) *kollect.SinkStatus { return &o.Status },
		ValidateStatus: func(o *kollect.SnapshotSink) field.ErrorList {
			return validation.ValidateSinkStatus(&o.Status, field.NewPath("status"))
		},
		Validate: func(o *kollect.SnapshotSink) field.ErrorList { return validation.ValidateSnapshotSink(o, opts) },
		ValidateUpdate: func(o, old *kollect.SnapshotSink) field.ErrorList {
			return validation.ValidateSnapshotSinkUpdate(o, old, opts)
		},
		// The Secret is used on the authority of the user who set it.
		Requester: func(o *kollect.SnapshotSink) **kollect.RequesterInfo { return &o.Status.Requester },
		ReferencesChanged: func(o, old *kollect.SnapshotSink) bool {
			return tenancy.SinkReferencesChanged(o, old)
		},
	}
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.type": string(obj.(*kollect.SnapshotSink).Spec.Type)}
}
