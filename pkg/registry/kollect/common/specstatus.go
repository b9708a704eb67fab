package common

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect"
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
	// Start, when set, fills in the observations a new object starts with
	// (FirstEntries), before its status is derived from them.
	Start func(ctx context.Context, obj T)
	// Validate, ValidateUpdate and ValidateStatus check user and controller input.
	Validate       func(obj T) field.ErrorList
	ValidateUpdate func(obj, old T) field.ErrorList
	ValidateStatus func(obj T) field.ErrorList
	// Requester, when set, points at the object's status.requester. The
	// main strategy records the requesting user there, with the time, on
	// create and on the updates ReferencesChanged reports (exactly the
	// writes whose references are checked against that user, re-affirming
	// included) and keeps the stored value on every other write; the status
	// strategy always keeps the stored value. What a client sends there is
	// never used.
	Requester         func(T) **kollect.RequesterInfo
	ReferencesChanged func(obj, old T) bool
	// Finalizer, when set, is added to every new object: the controller
	// that must act before such an object goes holds it from the start,
	// without a write of its own (as the namespace strategy does).
	Finalizer string
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

// PrepareForCreate starts at generation 1 with no reported status but the
// observations the kind starts with (Start); derived status starts from
// there, and the requester is the user who asks.
func (s mainStrategy[T, P, S]) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(T)
	var none S
	*s.kind.Status(o) = none
	m := s.kind.Meta(o)
	m.Generation = 1
	if s.kind.Finalizer != "" && !slices.Contains(m.Finalizers, s.kind.Finalizer) {
		m.Finalizers = append(m.Finalizers, s.kind.Finalizer)
	}
	if s.kind.Start != nil {
		s.kind.Start(ctx, o)
	}
	if s.kind.Derive != nil {
		s.kind.Derive(o, s.Now())
	}
	if s.kind.Requester != nil {
		*s.kind.Requester(o) = RequesterFrom(ctx, s.Now())
	}
}

// PrepareForUpdate keeps status, moves the generation when spec changed,
// and then re-derives status for the new generation. The requester becomes
// the user who asks when the references change, and stays otherwise.
func (s mainStrategy[T, P, S]) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	o, prev := obj.(T), old.(T)
	*s.kind.Status(o) = *s.kind.Status(prev)
	BumpGeneration(s.kind.Meta(o), s.kind.Meta(prev), *s.kind.Spec(o), *s.kind.Spec(prev))
	if s.kind.Derive != nil && s.kind.Meta(o).Generation != s.kind.Meta(prev).Generation {
		s.kind.Derive(o, s.Now())
	}
	if s.kind.Requester != nil {
		if s.kind.ReferencesChanged != nil && s.kind.ReferencesChanged(o, prev) {
			*s.kind.Requester(o) = RequesterFrom(ctx, s.Now())
		} else {
			*s.kind.Requester(o) = (*s.kind.Requester(prev)).DeepCopy()
		}
	}
}

func (s mainStrategy[T, P, S]) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return append(validateNewMeta(s.kind.Meta(obj.(T))), s.kind.Validate(obj.(T))...)
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
	// The requester is recorded by the server, never reported.
	if s.kind.Requester != nil {
		*s.kind.Requester(o) = (*s.kind.Requester(prev)).DeepCopy()
	}
}

func (s statusStrategy[T, P, S]) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return s.kind.ValidateStatus(obj.(T))
}

// GetResetFields: spec and metadata, and status.requester, which the
// server records, so that an apply to /status claims no ownership of it.
func (s statusStrategy[T, P, S]) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	if s.kind.Requester != nil {
		return resetFields(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"), fieldpath.MakePathOrDie("status", "requester"))
	}
	return ResetSpecAndMetadata()
}
