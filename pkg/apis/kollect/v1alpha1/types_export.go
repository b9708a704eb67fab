package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Inventory exports the items of its namespace's Targets to sinks in the
// same namespace.
type Inventory struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to export and where.
	// +required
	Spec InventorySpec `json:"spec"`
	// status reports each sink's export and the aggregate, derived on write.
	// +optional
	Status InventoryStatus `json:"status,omitempty"`
}

// InventorySpec chooses targets and sinks.
type InventorySpec struct {
	// targetSelector selects the namespace's Targets by label. Absent selects all of them.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`
	// exportMinInterval is the default re-export interval of an unchanged
	// payload for every sink of this inventory (0s to 24h; default 30s). 0s
	// means never re-export an identical payload.
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
	// snapshotSinkRefs are SnapshotSinks in this namespace, keyed by name. At
	// most 20 sink references across the three families.
	// +optional
	// +listType=map
	// +listMapKey=name
	SnapshotSinkRefs []SinkReference `json:"snapshotSinkRefs,omitempty"`
	// databaseSinkRefs are DatabaseSinks in this namespace, keyed by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	DatabaseSinkRefs []SinkReference `json:"databaseSinkRefs,omitempty"`
	// eventSinkRefs are EventSinks in this namespace, keyed by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	EventSinkRefs []SinkReference `json:"eventSinkRefs,omitempty"`
	// suspend stops exporting; status keeps the last entries.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// ExportOutcome is what an exporter did the last time it ran for a sink.
// +enum
type ExportOutcome string

const (
	// OutcomeExported means the current payload was written to the sink.
	OutcomeExported ExportOutcome = "Exported"
	// OutcomeDebounced means the sink already holds the current payload and
	// the re-export interval has not elapsed, so nothing was written.
	OutcomeDebounced ExportOutcome = "Debounced"
	// OutcomeFailed means the export did not complete; message says why.
	OutcomeFailed ExportOutcome = "Failed"
)

// SinkExportStatus is one exporter's own report for one sink. Exporters write
// only their own entry; the server derives the aggregate from all of them.
type SinkExportStatus struct {
	// family of the sink: Snapshot, Database or Event.
	// +required
	Family SinkFamily `json:"family"`
	// name of the sink, as in the reference.
	// +required
	Name string `json:"name"`
	// namespace of the sink.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// observedGeneration is the inventory generation this entry was exported at.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// outcome of the last run: Exported, Debounced or Failed.
	// +optional
	Outcome ExportOutcome `json:"outcome,omitempty"`
	// reason is a CamelCase word qualifying a failure, such as SinkNotFound,
	// SinkForbidden or ExportFailed.
	// +optional
	Reason string `json:"reason,omitempty"`
	// message describes the last run. It never contains credentials.
	// +optional
	Message string `json:"message,omitempty"`
	// lastExportTime is when a payload was last written to the sink.
	// +optional
	LastExportTime *metav1.Time `json:"lastExportTime,omitempty"`
	// lastAttemptTime is when the exporter last ran for the sink.
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty"`
	// lastChecksum is the checksum of the item set the sink last
	// acknowledged.
	// +optional
	LastChecksum string `json:"lastChecksum,omitempty"`
	// cursor is the item resourceVersion up to which the sink acknowledged
	// every change of the inventory's items.
	// +optional
	Cursor string `json:"cursor,omitempty"`
	// itemCount is the number of items the sink holds.
	// +optional
	ItemCount int64 `json:"itemCount,omitempty"`
	// effectiveInterval is the re-export interval in force after precedence
	// and the Scope floor.
	// +optional
	EffectiveInterval *metav1.Duration `json:"effectiveInterval,omitempty"`
	// nextDueTime is when an unchanged payload is next re-exported.
	// +optional
	NextDueTime *metav1.Time `json:"nextDueTime,omitempty"`
	// consecutiveFailures counts failed runs since the last success.
	// +optional
	ConsecutiveFailures int32 `json:"consecutiveFailures,omitempty"`
}

// InventoryStatus is the observed state of an Inventory or ClusterInventory.
type InventoryStatus struct {
	// observedGeneration is the generation the aggregate describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions Ready and Synced, derived on write from sinkExports. Synced
	// reasons: Exported, PartiallySynced, Progressing, ExportFailed, NoSinks.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// sinkExports holds one entry per referenced sink, written by its exporter.
	// Entries of references removed from spec are dropped by the server.
	// +optional
	// +listType=map
	// +listMapKey=family
	// +listMapKey=name
	SinkExports []SinkExportStatus `json:"sinkExports,omitempty"`
	// lastExportTime is the latest lastExportTime of the entries.
	// +optional
	LastExportTime *metav1.Time `json:"lastExportTime,omitempty"`
	// itemCount is the number of items the inventory exports.
	// +optional
	ItemCount int64 `json:"itemCount,omitempty"`
	// sinksSynced counts the referenced sinks that hold the current payload, as "N/M".
	// +optional
	SinksSynced string `json:"sinksSynced,omitempty"`
	// requester is the user whose request created the inventory or last
	// changed its sink references. The server records it on those writes and
	// keeps it otherwise; it cannot be set by clients.
	// +optional
	Requester *RequesterInfo `json:"requester,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InventoryList is a list of Inventories.
type InventoryList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Inventories.
	Items []Inventory `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterInventory exports the items of ClusterTargets to sinks referenced
// by {namespace, name}.
type ClusterInventory struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says what to export and where.
	// +required
	Spec ClusterInventorySpec `json:"spec"`
	// status reports each sink's export and the aggregate, derived on write.
	// +optional
	Status InventoryStatus `json:"status,omitempty"`
}

// ClusterInventorySpec chooses cluster targets and sinks.
type ClusterInventorySpec struct {
	// sinkNamespace is where sink references without a namespace resolve.
	// Defaults to kollect-system.
	// +optional
	SinkNamespace string `json:"sinkNamespace,omitempty"`
	// targetRefs names the ClusterTargets exported. Together with
	// targetSelector: a ClusterTarget is exported when either picks it; with
	// neither, all ClusterTargets are.
	// +optional
	// +listType=map
	// +listMapKey=name
	TargetRefs []LocalObjectReference `json:"targetRefs,omitempty"`
	// targetSelector selects ClusterTargets by label.
	// +optional
	TargetSelector *metav1.LabelSelector `json:"targetSelector,omitempty"`
	// exportMinInterval is the default re-export interval of an unchanged
	// payload (0s to 24h; default 30s).
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
	// snapshotSinkRefs are SnapshotSinks, keyed by name; namespace defaults
	// to sinkNamespace. At most 20 sink references across the three families.
	// +optional
	// +listType=map
	// +listMapKey=name
	SnapshotSinkRefs []SinkReference `json:"snapshotSinkRefs,omitempty"`
	// databaseSinkRefs are DatabaseSinks, keyed by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	DatabaseSinkRefs []SinkReference `json:"databaseSinkRefs,omitempty"`
	// eventSinkRefs are EventSinks, keyed by name.
	// +optional
	// +listType=map
	// +listMapKey=name
	EventSinkRefs []SinkReference `json:"eventSinkRefs,omitempty"`
	// suspend stops exporting; status keeps the last entries.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterInventoryList is a list of ClusterInventories.
type ClusterInventoryList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of ClusterInventories.
	Items []ClusterInventory `json:"items"`
}
