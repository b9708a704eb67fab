// Package clusterscope is the registry of ClusterScopes: static limits with no status.
package clusterscope

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
	obj.(*kollect.ClusterScope).Generation = 1
}

// PrepareForUpdate bumps the generation on spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, o := obj.(*kollect.ClusterScope), old.(*kollect.ClusterScope)
	common.BumpGeneration(&s.ObjectMeta, &o.ObjectMeta, s.Spec, o.Spec)
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateClusterScope(obj.(*kollect.ClusterScope))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClusterScopeUpdate(obj.(*kollect.ClusterScope), old.(*kollect.ClusterScope))
}

// GetResetFields is empty: a ClusterScope has no status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return nil }
