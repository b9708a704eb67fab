package common

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Static tells the shared strategy how to reach into the objects of a kind
// without a status subresource (Scopes, items).
type Static[T runtime.Object] struct {
	Meta func(T) *metav1.ObjectMeta
	// Content is what moves the generation when it changes: a Scope's spec,
	// an item's content hash.
	Content func(T) any
	// Validate and ValidateUpdate check what is written.
	Validate       func(obj T) field.ErrorList
	ValidateUpdate func(obj, old T) field.ErrorList
}

// Strategy returns the create, update and delete strategy of the kind.
func (k Static[T]) Strategy(base Base) rest.CreateUpdateResetFieldsStrategy {
	return staticStrategy[T]{Base: base, kind: k}
}

type staticStrategy[T runtime.Object] struct {
	Base
	kind Static[T]
}

// PrepareForCreate starts the generation at 1.
func (s staticStrategy[T]) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s.kind.Meta(obj.(T)).Generation = 1
}

// PrepareForUpdate moves the generation when the content changed.
func (s staticStrategy[T]) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	BumpGeneration(s.kind.Meta(o), s.kind.Meta(prev), s.kind.Content(o), s.kind.Content(prev))
}

func (s staticStrategy[T]) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return append(validateNewMeta(s.kind.Meta(obj.(T))), s.kind.Validate(obj.(T))...)
}

func (s staticStrategy[T]) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return s.kind.ValidateUpdate(obj.(T), old.(T))
}

// GetResetFields is empty: there is no status to protect.
func (staticStrategy[T]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return nil }
