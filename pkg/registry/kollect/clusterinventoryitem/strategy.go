// Package clusterinventoryitem is the registry of ClusterInventoryItems:
// read-only over HTTP, written by the collector through its own store
// (pkg/itemstore).
package clusterinventoryitem

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// kind describes ClusterInventoryItems to the shared strategy; the generation follows its content hash.
var kind = common.Static[*kollect.ClusterInventoryItem]{
	Meta:           func(o *kollect.ClusterInventoryItem) *metav1.ObjectMeta { return &o.ObjectMeta },
	Content:        func(o *kollect.ClusterInventoryItem) any { return o.Hash },
	Validate:       validation.ValidateClusterInventoryItem,
	ValidateUpdate: validation.ValidateClusterInventoryItemUpdate,
}

func selectableFields(obj runtime.Object) fields.Set {
	i := obj.(*kollect.ClusterInventoryItem)
	return common.ItemFields(&i.Source, i.Attributes, i.SelectableAttributes)
}
