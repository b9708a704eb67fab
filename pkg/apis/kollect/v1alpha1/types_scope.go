package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +genclient
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Scope is the tenancy ceiling of its namespace: which kinds may be
// collected, which sinks used, and the shortest export interval. When a
// namespace holds several Scopes, all apply: allowlists intersect and the
// highest floor wins.
type Scope struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec sets the limits.
	// +required
	Spec ScopeSpec `json:"spec"`
}

// ScopeSpec sets the limits for one namespace. An absent list allows everything.
type ScopeSpec struct {
	// minExportInterval is the floor under every export interval in the
	// namespace (0s to 24h). Lower intervals are rejected at admission and
	// clamped at export.
	// +optional
	MinExportInterval *metav1.Duration `json:"minExportInterval,omitempty"`
	// allowedGVKs are the kinds Profiles may collect. At most 100.
	// +optional
	// +listType=atomic
	AllowedGVKs []GroupKind `json:"allowedGVKs,omitempty"`
	// snapshotSinkRefs are the SnapshotSinks inventories may export to. At most 100.
	// +optional
	// +listType=set
	SnapshotSinkRefs []string `json:"snapshotSinkRefs,omitempty"`
	// databaseSinkRefs are the DatabaseSinks inventories may export to. At most 100.
	// +optional
	// +listType=set
	DatabaseSinkRefs []string `json:"databaseSinkRefs,omitempty"`
	// eventSinkRefs are the EventSinks inventories may export to. At most 100.
	// +optional
	// +listType=set
	EventSinkRefs []string `json:"eventSinkRefs,omitempty"`
	// maxTargets is the most Targets the namespace may hold; creating one
	// more is refused. Unset: the server's --default-max-targets.
	// +optional
	MaxTargets *int32 `json:"maxTargets,omitempty"`
	// maxProfiles is the most Profiles the namespace may hold. Unset: the
	// server's --default-max-profiles.
	// +optional
	MaxProfiles *int32 `json:"maxProfiles,omitempty"`
	// maxInventories is the most Inventories the namespace may hold.
	// Unset: the server's --default-max-inventories.
	// +optional
	MaxInventories *int32 `json:"maxInventories,omitempty"`
	// maxSinks is the most sinks (SnapshotSinks, DatabaseSinks and
	// EventSinks together) the namespace may hold. Unset: the server's
	// --default-max-sinks.
	// +optional
	MaxSinks *int32 `json:"maxSinks,omitempty"`
	// maxItems is the most InventoryItems the namespace's Targets may hold
	// together; objects past it are not collected and their Targets report
	// Degraded, QuotaExceeded with the count. Unset: the server's
	// --default-max-items.
	// +optional
	MaxItems *int64 `json:"maxItems,omitempty"`
	// maxItemBytes is the largest an InventoryItem of the namespace may be
	// (its attributes or object, as stored); a larger one is not collected
	// and counts as over quota. Unset: the server's --default-max-item-bytes.
	// +optional
	MaxItemBytes *resource.Quantity `json:"maxItemBytes,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ScopeList is a list of Scopes.
type ScopeList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Scopes.
	Items []Scope `json:"items"`
}

// +genclient
// +genclient:nonNamespaced
// +genclient:noStatus
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterScope is the ceiling for the cluster kinds: which kinds
// ClusterTargets may collect, from which namespaces, and which namespaces
// their static references (profiles, sinks) may point into. Several
// ClusterScopes all apply: allowlists intersect, denials add up, the highest
// floor wins.
type ClusterScope struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec sets the limits.
	// +required
	Spec ClusterScopeSpec `json:"spec"`
}

// ClusterScopeSpec sets the limits for cluster kinds. An absent list allows everything.
type ClusterScopeSpec struct {
	// minExportInterval is the floor under every ClusterInventory interval (0s to 24h).
	// +optional
	MinExportInterval *metav1.Duration `json:"minExportInterval,omitempty"`
	// allowedGVKs are the kinds ClusterTargets may collect. At most 100.
	// +optional
	// +listType=atomic
	AllowedGVKs []GroupKind `json:"allowedGVKs,omitempty"`
	// allowedNamespaces are the namespaces ClusterTargets may collect from. At most 1000.
	// +optional
	// +listType=set
	AllowedNamespaces []string `json:"allowedNamespaces,omitempty"`
	// deniedNamespaces are never collected from by ClusterTargets. At most 1000.
	// +optional
	// +listType=set
	DeniedNamespaces []string `json:"deniedNamespaces,omitempty"`
	// referenceNamespaces are the namespaces cluster kinds may reference
	// profiles and sinks in. At most 1000.
	// +optional
	// +listType=set
	ReferenceNamespaces []string `json:"referenceNamespaces,omitempty"`
	// snapshotSinkRefs are the SnapshotSinks, as "namespace/name", cluster
	// inventories may export to. At most 100.
	// +optional
	// +listType=set
	SnapshotSinkRefs []string `json:"snapshotSinkRefs,omitempty"`
	// databaseSinkRefs are the DatabaseSinks, as "namespace/name". At most 100.
	// +optional
	// +listType=set
	DatabaseSinkRefs []string `json:"databaseSinkRefs,omitempty"`
	// eventSinkRefs are the EventSinks, as "namespace/name". At most 100.
	// +optional
	// +listType=set
	EventSinkRefs []string `json:"eventSinkRefs,omitempty"`
	// maxTargets is the most ClusterTargets the cluster may hold; creating
	// one more is refused. Unset: the server's --default-max-targets.
	// +optional
	MaxTargets *int32 `json:"maxTargets,omitempty"`
	// maxInventories is the most ClusterInventories the cluster may hold.
	// Unset: the server's --default-max-inventories.
	// +optional
	MaxInventories *int32 `json:"maxInventories,omitempty"`
	// maxSinks is the most sinks (SnapshotSinks, DatabaseSinks and
	// EventSinks together) the cluster may hold, all namespaces together;
	// each namespace's Scopes limit its own further. Unset: no cluster-wide
	// limit.
	// +optional
	MaxSinks *int32 `json:"maxSinks,omitempty"`
	// maxItems is the most ClusterInventoryItems the ClusterTargets may
	// hold together; objects past it are not collected and their
	// ClusterTargets report Degraded, QuotaExceeded with the count. Unset: the server's
	// --default-max-items.
	// +optional
	MaxItems *int64 `json:"maxItems,omitempty"`
	// maxItemBytes is the largest a ClusterInventoryItem may be (its
	// attributes or object, as stored); a larger one is not collected
	// and counts as over quota. Unset: the server's --default-max-item-bytes.
	// +optional
	MaxItemBytes *resource.Quantity `json:"maxItemBytes,omitempty"`
}

// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClusterScopeList is a list of ClusterScopes.
type ClusterScopeList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of ClusterScopes.
	Items []ClusterScope `json:"items"`
}
