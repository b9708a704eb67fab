package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:noStatus
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InventoryItem is one collected object as seen through a Profile. Items are
// written by the collector only; users get, list and watch them. Labels name
// the target (kollect.dev/target), the profile (kollect.dev/profile), the
// source kind (kollect.dev/source-kind) and the cluster (kollect.dev/cluster);
// field selectors work on source.cluster, source.namespace, source.name,
// source.kind, source.apiVersion and source.uid, and on attributes.<name> of
// the selectable attributes.
type InventoryItem struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// source identifies the collected object.
	// +required
	Source ItemSource `json:"source"`
	// attributes are the Profile's attributes, in Attributes mode.
	// +optional
	Attributes map[string]Value `json:"attributes,omitempty"`
	// object is the pruned resource, in Resource mode.
	// +optional
	Object *Value `json:"object,omitempty"`
	// selectableAttributes name the attributes that field selectors see
	// (attributes.<name>): the Profile's selectable ones with scalar values.
	// +optional
	// +listType=set
	SelectableAttributes []string `json:"selectableAttributes,omitempty"`
	// hash is the hex SHA-256 of the canonical JSON of source identity,
	// attributes and object. The collector writes an item only when it changes.
	// +optional
	Hash string `json:"hash,omitempty"`
}

// ItemSource identifies the object an item was collected from.
type ItemSource struct {
	// cluster is the cluster the object lives in: the host's --cluster-name
	// or a MemberCluster's name.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// apiVersion of the object, such as apps/v1.
	// +required
	APIVersion string `json:"apiVersion"`
	// kind of the object, such as Deployment.
	// +required
	Kind string `json:"kind"`
	// namespace of the object; empty for cluster-scoped objects.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the object.
	// +required
	Name string `json:"name"`
	// uid of the object. Immutable.
	// +optional
	UID types.UID `json:"uid,omitempty"`
	// resourceVersion of the object when it was collected.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InventoryItemList is a list of InventoryItems.
type InventoryItemList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of InventoryItems.
	Items []InventoryItem `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterInventoryItem is one object collected by a ClusterTarget. Like
// InventoryItem it is read-only to users.
type ClusterInventoryItem struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// source identifies the collected object.
	// +required
	Source ItemSource `json:"source"`
	// attributes are the Profile's attributes, in Attributes mode.
	// +optional
	Attributes map[string]Value `json:"attributes,omitempty"`
	// object is the pruned resource, in Resource mode.
	// +optional
	Object *Value `json:"object,omitempty"`
	// selectableAttributes name the attributes that field selectors see
	// (attributes.<name>): the Profile's selectable ones with scalar values.
	// +optional
	// +listType=set
	SelectableAttributes []string `json:"selectableAttributes,omitempty"`
	// hash is the hex SHA-256 of the canonical JSON of source identity,
	// attributes and object.
	// +optional
	Hash string `json:"hash,omitempty"`
}

// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterInventoryItemList is a list of ClusterInventoryItems.
type ClusterInventoryItemList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of ClusterInventoryItems.
	Items []ClusterInventoryItem `json:"items"`
}
