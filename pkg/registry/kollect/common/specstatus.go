package common

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// SpecStatus tells the shared strategies how to reach into the objects of a
// kind with a spec and a status subresource. The kinds differ only here;
// the rules (generation moves with spec, status belongs to /status, derived
// status is recomputed on every write) are the same for all of them.
type SpecStatus[T runtime.Object, Spec, Status any] struct {
	// Meta, Spec and Status point into an object.
	Meta   func(T) *metav1.ObjectMeta
	Spec   func(T) *Spec
	Status func(T) *Status
	// Derive, when set, recomputes the status fields derived on write from
	// the object's generation, spec and reported observations.
	Derive func(obj T, now metav1.Time)
	// Validate, ValidateUpdate and ValidateStatus check user and controller input.
	Validate       func(obj T) field.ErrorList
	ValidateUpdate func(obj, old T) field.ErrorList
	ValidateStatus func(obj T) field.ErrorList
}

// Strategies returns the main and status strategies of a kind.
func (k SpecStatus[T, P, S]) Strategies(base Base) (rest.CreateUpdateResetFieldsStrategy, rest.UpdateResetFieldsStrategy) {
	main := mainStrategy[T, P, S]{Base: base, kind: k}
	return main, statusStrategy[T, P, S]{mainStrategy: main}
}

type mainStrategy[T runtime.Object, P, S any] struct {
	Base
	kind SpecStatus[T, P, S]
}

// PrepareForCreate starts at generation 1 with no reported status; derived
// status starts from there.
func (s mainStrategy[T, P, S]) PrepareForCreate(_ context.Context, obj runtime.Object) {
	o := obj.(T)
	var none S
	*s.kind.Status(o) = none
	s.kind.Meta(o).Generation = 1
	if s.kind.Derive != nil {
		s.kind.Derive(o, s.Now())
	}
}

// PrepareForUpdate keeps status, moves the generation when spec changed,
// and then re-derives status for the new generation.
func (s mainStrategy[T, P, S]) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	*s.kind.Status(o) = *s.kind.Status(prev)
	BumpGeneration(s.kind.Meta(o), s.kind.Meta(prev), *s.kind.Spec(o), *s.kind.Spec(prev))
	if s.kind.Derive != nil && s.kind.Meta(o).Generation != s.kind.Meta(prev).Generation {
		s.kind.Derive(o, s.Now())
	}
}

func (s mainStrategy[T, P, S]) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return s.kind.Validate(obj.(T))
}

func (s mainStrategy[T, P, S]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.kind.ValidateUpdate(obj.(T), old.(T))
}

func (mainStrategy[T, P, S]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return ResetStatus()
}

type statusStrategy[T runtime.Object, P, S any] struct{ mainStrategy[T, P, S] }

// PrepareForUpdate takes only status from the request and derives the rest
// of status from it in the same write.
func (s statusStrategy[T, P, S]) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	*s.kind.Spec(o) = *s.kind.Spec(prev)
	KeepMetadataOnStatusUpdate(s.kind.Meta(o), s.kind.Meta(prev))
	if s.kind.Derive != nil {
		s.kind.Derive(o, s.Now())
	}
}

func (s statusStrategy[T, P, S]) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return s.kind.ValidateStatus(obj.(T))
}

func (statusStrategy[T, P, S]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return ResetSpecAndMetadata()
}
