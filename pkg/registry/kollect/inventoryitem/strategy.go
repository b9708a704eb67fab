// Package inventoryitem is the registry of InventoryItems: read-only over
// HTTP, written in process by the collector through a Writer.
package inventoryitem

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

// PrepareForCreate starts the generation at 1.
func (strategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	obj.(*kollect.InventoryItem).Generation = 1
}

// PrepareForUpdate bumps the generation when the content hash changes.
func (strategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	i, o := obj.(*kollect.InventoryItem), old.(*kollect.InventoryItem)
	if i.Hash != o.Hash {
		i.Generation = o.Generation + 1
	}
}

func (strategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateInventoryItem(obj.(*kollect.InventoryItem))
}

func (strategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInventoryItemUpdate(obj.(*kollect.InventoryItem), old.(*kollect.InventoryItem))
}

// GetResetFields is empty: items have no status.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set { return nil }

func selectableFields(obj runtime.Object) fields.Set {
	return common.SourceFields(&obj.(*kollect.InventoryItem).Source)
}
