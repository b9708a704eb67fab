// Package inventory is the registry of Inventories. Their status is derived
// on every write from the exporters' sinkExports entries (derive.InventoryStatus).
package inventory

import (
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/derive"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// kind describes Inventorys to the shared strategies.
var kind = common.SpecStatus[*kollect.Inventory, kollect.InventorySpec, kollect.InventoryStatus]{
	Meta:   func(o *kollect.Inventory) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.Inventory) *kollect.InventorySpec { return &o.Spec },
	Status: func(o *kollect.Inventory) *kollect.InventoryStatus { return &o.Status },
	Derive: func(inv *kollect.Inventory, now metav1.Time) {
		inv.Status = derive.InventoryStatus(inv.Generation, inv.Spec.Suspend, derive.InventoryRefs(&inv.Spec), inv.Status, now)
	},
	ValidateStatus: func(o *kollect.Inventory) field.ErrorList {
		return validation.ValidateInventoryStatus(&o.Status, field.NewPath("status"))
	},
	Validate:          validation.ValidateInventory,
	ValidateUpdate:    validation.ValidateInventoryUpdate,
	Requester:         func(o *kollect.Inventory) **kollect.RequesterInfo { return &o.Status.Requester },
	Finalizer:         v1alpha1.ExportFinalizer,
	ReferencesChanged: tenancy.InventoryReferencesChanged,
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.suspend": strconv.FormatBool(obj.(*kollect.Inventory).Spec.Suspend)}
}
