// Package target is the registry of Targets. Ready and Degraded are derived on
// write from the collector's report in status.collection.
package target

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/derive"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// kind describes Targets to the shared strategies.
var kind = common.SpecStatus[*kollect.Target, kollect.TargetSpec, kollect.TargetStatus]{
	Meta:   func(o *kollect.Target) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.Target) *kollect.TargetSpec { return &o.Spec },
	Status: func(o *kollect.Target) *kollect.TargetStatus { return &o.Status },
	Derive: func(t *kollect.Target, now metav1.Time) {
		t.Status.ObservedGeneration = t.Generation
		t.Status.Conditions = derive.CollectionConditions(t.Generation, t.Spec.Suspend, t.Status.Collection, t.Status.Conditions, now)
	},
	ValidateStatus: func(o *kollect.Target) field.ErrorList {
		return validation.ValidateTargetStatus(&o.Status, field.NewPath("status"))
	},
	Validate:          validation.ValidateTarget,
	ValidateUpdate:    validation.ValidateTargetUpdate,
	Requester:         func(o *kollect.Target) **kollect.RequesterInfo { return &o.Status.Requester },
	Finalizer:         v1alpha1.ItemsFinalizer,
	ReferencesChanged: tenancy.TargetReferencesChanged,
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.profileRef.name": obj.(*kollect.Target).Spec.ProfileRef.Name}
}
