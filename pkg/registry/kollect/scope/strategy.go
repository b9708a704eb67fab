// Package scope is the registry of Scopes: static limits with no status.
package scope

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

type strategy struct{ common.Base }

// PrepareForCreate starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*kollect.Scope).Generation = 1
}

// PrepareForUpdate bumps the generation on spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, o := obj.(*kollect.Scope), old.(*kollect.Scope)
	common.BumpGeneration(&s.ObjectMeta, &o.ObjectMeta, s.Spec, o.Spec)
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateScope(obj.(*kollect.Scope))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateScopeUpdate(obj.(*kollect.Scope), old.(*kollect.Scope))
}

// GetResetFields is empty: a Scope has no status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return nil }
