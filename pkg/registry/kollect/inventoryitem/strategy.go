// Package inventoryitem is the registry of InventoryItems: read-only over
// HTTP, written by the collector through its own store (pkg/itemstore).
package inventoryitem

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// kind describes InventoryItems to the shared strategy; the generation follows its content hash.
var kind = common.Static[*kollect.InventoryItem]{
	Meta:           func(o *kollect.InventoryItem) *metav1.ObjectMeta { return &o.ObjectMeta },
	Content:        func(o *kollect.InventoryItem) any { return o.Hash },
	Validate:       validation.ValidateInventoryItem,
	ValidateUpdate: validation.ValidateInventoryItemUpdate,
}

func selectableFields(obj runtime.Object) fields.Set {
	i := obj.(*kollect.InventoryItem)
	return common.ItemFields(&i.Source, i.Attributes, i.SelectableAttributes)
}
