// Package clustertarget is the registry of ClusterTargets.
package clustertarget

import (
	"context"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/derive"
)

type strategy struct{ common.Base }

// PrepareForCreate starts at generation 1 with conditions derived from no
// collection report yet.
func (s strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	t := obj.(*kollect.ClusterTarget)
	t.Generation = 1
	t.Status = kollect.ClusterTargetStatus{}
	s.derive(t)
}

// PrepareForUpdate keeps status, bumps the generation on spec changes and
// derives the conditions for the new generation.
func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	t, o := obj.(*kollect.ClusterTarget), old.(*kollect.ClusterTarget)
	t.Status = o.Status
	common.BumpGeneration(&t.ObjectMeta, &o.ObjectMeta, t.Spec, o.Spec)
	if t.Generation != o.Generation || t.Spec.Suspend != o.Spec.Suspend {
		s.derive(t)
	}
}

func (s strategy) derive(t *kollect.ClusterTarget) {
	t.Status.ObservedGeneration = t.Generation
	t.Status.Conditions = derive.CollectionConditions(t.Generation, t.Spec.Suspend, t.Status.Collection, t.Status.Conditions, s.Now())
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateClusterTarget(obj.(*kollect.ClusterTarget))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClusterTargetUpdate(obj.(*kollect.ClusterTarget), old.(*kollect.ClusterTarget))
}

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return common.ResetStatus() }

type statusStrategy struct{ strategy }

// PrepareForUpdate takes the collector's report and derives the conditions from it.
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	t, o := obj.(*kollect.ClusterTarget), old.(*kollect.ClusterTarget)
	t.Spec = o.Spec
	common.KeepMetadataOnStatusUpdate(&t.ObjectMeta, &o.ObjectMeta)
	s.derive(t)
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validation.ValidateClusterTargetStatus(&obj.(*kollect.ClusterTarget).Status, field.NewPath("status"))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return common.ResetSpecAndMetadata()
}

func selectableFields(obj runtime.Object) fields.Set {
	ref := obj.(*kollect.ClusterTarget).Spec.ProfileRef
	return fields.Set{"spec.profileRef.namespace": ref.Namespace, "spec.profileRef.name": ref.Name}
}
