// Package clusterinventory is the registry of ClusterInventories, with status
// derived on write like an Inventory's.
package clusterinventory

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

// kind describes ClusterInventorys to the shared strategies.
var kind = common.SpecStatus[*kollect.ClusterInventory, kollect.ClusterInventorySpec, kollect.InventoryStatus]{
	Meta:   func(o *kollect.ClusterInventory) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.ClusterInventory) *kollect.ClusterInventorySpec { return &o.Spec },
	Status: func(o *kollect.ClusterInventory) *kollect.InventoryStatus { return &o.Status },
	Derive: func(inv *kollect.ClusterInventory, now metav1.Time) {
		inv.Status = derive.InventoryStatus(inv.Generation, inv.Spec.Suspend, derive.ClusterInventoryRefs(&inv.Spec), inv.Status, now)
	},
	ValidateStatus: func(o *kollect.ClusterInventory) field.ErrorList {
		return validation.ValidateInventoryStatus(&o.Status, field.NewPath("status"))
	},
	Validate:          validation.ValidateClusterInventory,
	ValidateUpdate:    validation.ValidateClusterInventoryUpdate,
	Requester:         func(o *kollect.ClusterInventory) **kollect.RequesterInfo { return &o.Status.Requester },
	Finalizer:         v1alpha1.ExportFinalizer,
	ReferencesChanged: tenancy.ClusterInventoryReferencesChanged,
}

func selectableFields(obj runtime.Object) fields.Set {
	return fields.Set{"spec.suspend": strconv.FormatBool(obj.(*kollect.ClusterInventory).Spec.Suspend)}
}
