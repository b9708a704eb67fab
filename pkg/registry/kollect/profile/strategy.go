// Package profile is the registry of Profiles.
package profile

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// kind describes Profiles to the shared strategies.
var kind = common.SpecStatus[*kollect.Profile, kollect.ProfileSpec, kollect.ProfileStatus]{
	Meta:   func(o *kollect.Profile) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.Profile) *kollect.ProfileSpec { return &o.Spec },
	Status: func(o *kollect.Profile) *kollect.ProfileStatus { return &o.Status },
	ValidateStatus: func(o *kollect.Profile) field.ErrorList {
		return validation.ValidateProfileStatus(&o.Status, field.NewPath("status"))
	},
	Validate:       validation.ValidateProfile,
	ValidateUpdate: validation.ValidateProfileUpdate,
}

func selectableFields(obj runtime.Object) fields.Set {
	p := obj.(*kollect.Profile)
	return fields.Set{"spec.targetGVK.group": p.Spec.TargetGVK.Group, "spec.targetGVK.kind": p.Spec.TargetGVK.Kind}
}
