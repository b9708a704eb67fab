// Package inventory is the registry of Inventories. Their status is derived
// on every write from the exporters' sinkExports entries (derive.InventoryStatus).
package inventory

import (
	"context"
	"strconv"

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

// PrepareForCreate starts at generation 1; every reference is pending.
func (s strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	inv := obj.(*kollect.Inventory)
	inv.Generation = 1
	inv.Status = kollect.InventoryStatus{}
	s.derive(inv)
}

// PrepareForUpdate keeps status, bumps the generation on spec changes and
// re-derives status: entries of removed references go, new references are
// pending.
func (s strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	inv, o := obj.(*kollect.Inventory), old.(*kollect.Inventory)
	inv.Status = o.Status
	common.BumpGeneration(&inv.ObjectMeta, &o.ObjectMeta, inv.Spec, o.Spec)
	if inv.Generation != o.Generation {
		s.derive(inv)
	}
}

func (s strategy) derive(inv *kollect.Inventory) {
	inv.Status = derive.InventoryStatus(inv.Generation, inv.Spec.Suspend, derive.InventoryRefs(&inv.Spec), inv.Status, s.Now())
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateInventory(obj.(*kollect.Inventory))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInventoryUpdate(obj.(*kollect.Inventory), old.(*kollect.Inventory))
}

func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return common.ResetStatus() }

type statusStrategy struct{ strategy }

// PrepareForUpdate takes the exporters' entries and derives the aggregate
// in the same write, so the response already carries Ready and Synced.
func (s statusStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	inv, o := obj.(*kollect.Inventory), old.(*kollect.Inventory)
	inv.Spec = o.Spec
	common.KeepMetadataOnStatusUpdate(&inv.ObjectMeta, &o.ObjectMeta)
	s.derive(inv)
}

func (statusStrategy) ValidateUpdate(_ context.Context, obj, _ runtime.Object) field.ErrorList {
	return validation.ValidateInventoryStatus(&obj.(*kollect.Inventory).Status, field.NewPath("status"))
}

func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return common.ResetSpecAndMetadata()
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.suspend": strconv.FormatBool(obj.(*kollect.Inventory).Spec.Suspend)}
}
