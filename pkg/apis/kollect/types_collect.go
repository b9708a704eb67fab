package kollect

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Profile is the extraction schema: which kind to collect and which of its
// fields become the inventory. Targets in the same namespace, and
// ClusterTargets by {namespace, name}, collect through it.
type Profile struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to extract.
	// +required
	Spec ProfileSpec `json:"spec"`
	// status reports how the Profile is used.
	// +optional
	Status ProfileStatus `json:"status,omitempty"`
}

// ProfileSpec is the extraction schema.
type ProfileSpec struct {
	// targetGVK is the kind collected through this Profile. Immutable: create
	// a new Profile to collect another kind. Collecting core/v1 Secrets needs
	// the annotation kollect.dev/collect-secrets: "true".
	// +required
	TargetGVK GroupVersionKind `json:"targetGVK"`
	// attributes are the named fields extracted into each item. Required in
	// Attributes mode, at most 64.
	// +optional
	// +listType=map
	// +listMapKey=name
	Attributes []Attribute `json:"attributes,omitempty"`
	// export chooses between named attributes and the pruned whole resource.
	// +optional
	Export ProfileExport `json:"export,omitempty"`
}

// Attribute is one named field of an item.
type Attribute struct {
	// name of the attribute in the item: a letter followed by letters, digits,
	// '_' or '-', at most 63 characters, unique in the Profile.
	// +required
	Name string `json:"name"`
	// path selects the value: a kubectl JSONPath such as
	// "{.spec.template.spec.containers[*].image}" (a [*] result is a JSON
	// array, a single match a scalar), or "cel:" followed by a CEL expression
	// over `object`, for example "cel:object.spec.replicas". CEL must compile
	// and stay within the server's cost budget.
	// +required
	Path string `json:"path"`
	// optional attributes are left out of an item when the path matches
	// nothing; a required attribute that matches nothing fails the item.
	// +optional
	Optional bool `json:"optional,omitempty"`
	// selectable makes the attribute a field selector on the items
	// (attributes.<name>) when its value is a string, number or boolean.
	// At most 8 per Profile.
	// +optional
	Selectable bool `json:"selectable,omitempty"`
}

// ExportMode chooses what an item carries.
type ExportMode string

const (
	// ExportModeAttributes puts the Profile's attributes in the item.
	ExportModeAttributes ExportMode = "Attributes"
	// ExportModeResource puts the pruned whole resource in the item.
	ExportModeResource ExportMode = "Resource"
)

// ResourceInclude chooses which top-level parts of a resource Resource mode keeps.
type ResourceInclude string

const (
	// IncludeMetadata keeps metadata only.
	IncludeMetadata ResourceInclude = "Metadata"
	// IncludeSpec keeps metadata and spec.
	IncludeSpec ResourceInclude = "Spec"
	// IncludeStatus keeps metadata and status.
	IncludeStatus ResourceInclude = "Status"
	// IncludeSpecAndStatus keeps metadata, spec and status.
	IncludeSpecAndStatus ResourceInclude = "SpecAndStatus"
	// IncludeAll keeps every top-level field (data of ConfigMaps, for example).
	IncludeAll ResourceInclude = "All"
)

// ProfileExport chooses the shape of items.
type ProfileExport struct {
	// mode is Attributes (the default) or Resource.
	// +optional
	Mode ExportMode `json:"mode,omitempty"`
	// include picks the parts of the resource kept in Resource mode. Defaults
	// to SpecAndStatus. Ignored in Attributes mode.
	// +optional
	Include ResourceInclude `json:"include,omitempty"`
	// prune removes noise from the resource in Resource mode.
	// +optional
	Prune *ResourcePrune `json:"prune,omitempty"`
}

// ResourcePrune lists what Resource mode removes before storing an object.
type ResourcePrune struct {
	// managedFields removes metadata.managedFields. Defaults to true.
	// +optional
	ManagedFields *bool `json:"managedFields,omitempty"`
	// lastAppliedAnnotation removes the
	// kubectl.kubernetes.io/last-applied-configuration annotation. Defaults to true.
	// +optional
	LastAppliedAnnotation *bool `json:"lastAppliedAnnotation,omitempty"`
	// jsonPointers are RFC 6901 pointers, such as "/status/conditions",
	// removed from the object. At most 64.
	// +optional
	// +listType=set
	JSONPointers []string `json:"jsonPointers,omitempty"`
	// scrubKeys are map keys whose values are replaced by "REDACTED" wherever
	// they appear, for example "password". At most 64.
	// +optional
	// +listType=set
	ScrubKeys []string `json:"scrubKeys,omitempty"`
}

// ProfileStatus reports how a Profile is used.
type ProfileStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready is True when the kind resolves in the cluster.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// resource is the plural resource the kind resolved to through discovery.
	// +optional
	Resource string `json:"resource,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ProfileList is a list of Profiles.
type ProfileList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Profiles.
	Items []Profile `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Target collects the objects of its Profile's kind in its own namespace into
// InventoryItems.
type Target struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to collect.
	// +required
	Spec TargetSpec `json:"spec"`
	// status reports what was collected.
	// +optional
	Status TargetStatus `json:"status,omitempty"`
}

// TargetSpec selects objects in the Target's namespace.
type TargetSpec struct {
	// profileRef names the Profile, in the same namespace, that says what to extract.
	// +required
	ProfileRef LocalObjectReference `json:"profileRef"`
	// labelSelector selects objects by label. Empty or absent selects every object.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// names, when set, restricts collection to objects with these names. At most 1000.
	// +optional
	// +listType=set
	Names []string `json:"names,omitempty"`
	// suspend stops collection and keeps the items already collected.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// CollectionObservation is what the collector reports about one target. The
// server derives the Ready and Degraded conditions from it on write.
type CollectionObservation struct {
	// observedGeneration is the target generation the collector worked from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// itemCount is how many items the target holds.
	// +optional
	ItemCount int64 `json:"itemCount,omitempty"`
	// failedCount is how many matching objects could not be extracted.
	// +optional
	FailedCount int64 `json:"failedCount,omitempty"`
	// overQuotaCount is how many matching objects were not collected
	// because the Scope's (or ClusterScope's) maxItems or maxItemBytes was
	// reached; the Target is then Degraded with reason QuotaExceeded.
	// +optional
	OverQuotaCount int64 `json:"overQuotaCount,omitempty"`
	// lastError is the last extraction or resolution error.
	// +optional
	LastError string `json:"lastError,omitempty"`
	// reason is a CamelCase word for why collection cannot proceed, such as
	// KindNotFound, ProfileNotFound or ProfileForbidden; empty when it can.
	// +optional
	Reason string `json:"reason,omitempty"`
	// lastFullSyncTime is when the collector last compared the cluster with the
	// stored items in a full walk.
	// +optional
	LastFullSyncTime *metav1.Time `json:"lastFullSyncTime,omitempty"`
	// lastChangeTime is when the collector last wrote or deleted an item.
	// +optional
	LastChangeTime *metav1.Time `json:"lastChangeTime,omitempty"`
}

// TargetStatus is the observed state of a Target.
type TargetStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions Ready and Degraded, derived by the server from collection.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// collection is what the collector last reported.
	// +optional
	Collection *CollectionObservation `json:"collection,omitempty"`
	// requester is the user whose request created the object or last changed
	// its profile or selection. The server records it on those writes and
	// keeps it otherwise; it cannot be set by clients.
	// +optional
	Requester *RequesterInfo `json:"requester,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// TargetList is a list of Targets.
type TargetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Targets.
	Items []Target `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterTarget collects the objects of a Profile's kind across the
// namespaces it selects into ClusterInventoryItems.
type ClusterTarget struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to collect.
	// +required
	Spec ClusterTargetSpec `json:"spec"`
	// status reports what was collected.
	// +optional
	Status ClusterTargetStatus `json:"status,omitempty"`
}

// ClusterTargetSpec selects namespaces and objects across the cluster.
type ClusterTargetSpec struct {
	// profileRef names the Profile by namespace and name. The namespace is
	// required: there are no cluster-scoped profiles and no fallback.
	// +required
	ProfileRef NamespacedObjectReference `json:"profileRef"`
	// namespaceSelector selects namespaces by label. Absent selects every
	// namespace (subject to includeNamespaces and excludeNamespaces).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// includeNamespaces, when set, restricts collection to these namespaces. At most 1000.
	// +optional
	// +listType=set
	IncludeNamespaces []string `json:"includeNamespaces,omitempty"`
	// excludeNamespaces are never collected from, whatever else selects them. At most 1000.
	// +optional
	// +listType=set
	ExcludeNamespaces []string `json:"excludeNamespaces,omitempty"`
	// labelSelector selects objects by label within the selected namespaces.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// names, when set, restricts collection to objects with these names. At most 1000.
	// +optional
	// +listType=set
	Names []string `json:"names,omitempty"`
	// clusterSelector selects the MemberClusters collected from by their
	// labels; the requester needs `use` on each. Absent collects from the
	// host cluster only; an empty selector selects every MemberCluster.
	// +optional
	ClusterSelector *metav1.LabelSelector `json:"clusterSelector,omitempty"`
	// suspend stops collection and keeps the items already collected.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ClusterTargetStatus is the observed state of a ClusterTarget.
type ClusterTargetStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions Ready and Degraded, derived by the server from collection.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// collection is what the collector last reported.
	// +optional
	Collection *CollectionObservation `json:"collection,omitempty"`
	// requester is the user whose request created the object or last changed
	// its profile or selection. The server records it on those writes and
	// keeps it otherwise; it cannot be set by clients.
	// +optional
	Requester *RequesterInfo `json:"requester,omitempty"`
	// matchedNamespaces are the namespaces currently collected from, sorted.
	// +optional
	// +listType=set
	MatchedNamespaces []string `json:"matchedNamespaces,omitempty"`
	// clusters are the collections from the MemberClusters the
	// clusterSelector selects, one per member, sorted by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Clusters []ClusterCollection `json:"clusters,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterTargetList is a list of ClusterTargets.
type ClusterTargetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of ClusterTargets.
	Items []ClusterTarget `json:"items"`
}
