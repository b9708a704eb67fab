// Package profile is the registry of Profiles.
package profile

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

type strategy struct{ common.Base }

// PrepareForCreate clears status and starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	p := obj.(*kollect.Profile)
	p.Status = kollect.ProfileStatus{}
	p.Generation = 1
}

// PrepareForUpdate keeps status and bumps the generation on spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, o := obj.(*kollect.Profile), old.(*kollect.Profile)
	p.Status = o.Status
	common.BumpGeneration(&p.ObjectMeta, &o.ObjectMeta, p.Spec, o.Spec)
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateProfile(obj.(*kollect.Profile))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateProfileUpdate(obj.(*kollect.Profile), old.(*kollect.Profile))
}

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return common.ResetStatus() }

type statusStrategy struct{ strategy }

// PrepareForUpdate keeps everything but status.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	p, o := obj.(*kollect.Profile), old.(*kollect.Profile)
	p.Spec = o.Spec
	common.KeepMetadataOnStatusUpdate(&p.ObjectMeta, &o.ObjectMeta)
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	p := obj.(*kollect.Profile)
	return validation.ValidateProfileStatus(&p.Status, field.NewPath("status"))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return common.ResetSpecAndMetadata()
}

func selectableFields(obj runtime.Object) fields.Set {
	p := obj.(*kollect.Profile)
	return fields.Set{
		"spec.targetGVK.group": p.Spec.TargetGVK.Group,
		"spec.targetGVK.kind":  p.Spec.TargetGVK.Kind,
	}
}
