// Package eventsink is the registry of EventSinks.
package eventsink

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

type strategy struct {
	common.Base
	validation validation.Options
}

// PrepareForCreate clears status and starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	s := obj.(*kollect.EventSink)
	s.Status = kollect.SinkStatus{}
	s.Generation = 1
}

// PrepareForUpdate keeps status and bumps the generation on spec changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, o := obj.(*kollect.EventSink), old.(*kollect.EventSink)
	s.Status = o.Status
	common.BumpGeneration(&s.ObjectMeta, &o.ObjectMeta, s.Spec, o.Spec)
}

func (st strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateEventSink(obj.(*kollect.EventSink), st.validation)
}

func (st strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateEventSinkUpdate(obj.(*kollect.EventSink), old.(*kollect.EventSink), st.validation)
}

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return common.ResetStatus() }

type statusStrategy struct{ strategy }

// PrepareForUpdate keeps everything but status.
func (statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	s, o := obj.(*kollect.EventSink), old.(*kollect.EventSink)
	s.Spec = o.Spec
	common.KeepMetadataOnStatusUpdate(&s.ObjectMeta, &o.ObjectMeta)
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validation.ValidateSinkStatus(&obj.(*kollect.EventSink).Status, field.NewPath("status"))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return common.ResetSpecAndMetadata()
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.type": string(obj.(*kollect.EventSink).Spec.Type)}
}
