package kollect

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MemberCluster is a cluster the hub collects from, reached with the
// kubeconfig in a Secret. ClusterTargets select members by their labels
// (spec.clusterSelector); selecting one needs `use` on it. The host
// cluster is the implicit member named by the server's --cluster-name and
// has no MemberCluster.
type MemberCluster struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata. Labels are what clusterSelectors match.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec says how to reach the member.
	// +required
	Spec MemberClusterSpec `json:"spec"`
	// status reports whether the member is reachable and what was collected.
	// +optional
	Status MemberClusterStatus `json:"status,omitempty"`
}

// MemberClusterSpec says how the hub reaches a member.
type MemberClusterSpec struct {
	// kubeconfigSecretRef names the Secret key holding the kubeconfig the
	// hub uses; its current context is used. The Secret must be in a
	// namespace the ClusterScopes allow (referenceNamespaces), readable by
	// the user who registers the member. Exec and auth-provider plugins are
	// refused unless the server allows them (--allow-member-exec); the API
	// server's address obeys the sink endpoint policy.
	// +required
	KubeconfigSecretRef SecretKeyReference `json:"kubeconfigSecretRef"`
	// suspend stops collecting from the member and keeps its items.
	// +optional
	Suspend bool `json:"suspend,omitempty"`
}

// SecretKeyReference names one key of a Secret in a namespace.
type SecretKeyReference struct {
	// namespace of the Secret.
	// +required
	Namespace string `json:"namespace"`
	// name of the Secret.
	// +required
	Name string `json:"name"`
	// key in the Secret's data. Defaults to "kubeconfig".
	// +optional
	Key string `json:"key,omitempty"`
}

// MemberObservation is what the replica that owns a member reports about
// it. The server derives the Reachable and Ready conditions from it on
// write.
type MemberObservation struct {
	// observedGeneration is the generation the owner worked from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// owner is the kollect-apiserver replica collecting from the member.
	// +optional
	Owner string `json:"owner,omitempty"`
	// reachable is whether the member's API server answered the last check.
	// +optional
	Reachable bool `json:"reachable,omitempty"`
	// serverVersion is the member's Kubernetes version, such as v1.36.3.
	// +optional
	ServerVersion string `json:"serverVersion,omitempty"`
	// itemCount is how many items the hub holds from the member.
	// +optional
	ItemCount int64 `json:"itemCount,omitempty"`
	// lastSyncTime is when the member last answered.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// unreachableSince is when the member stopped answering; its items are
	// kept meanwhile.
	// +optional
	UnreachableSince *metav1.Time `json:"unreachableSince,omitempty"`
	// errorClass is a CamelCase word for the last failure, such as
	// Unreachable, TLSError, Unauthorized, SecretNotFound,
	// KubeconfigInvalid, ExecNotAllowed or EndpointForbidden.
	// +optional
	ErrorClass string `json:"errorClass,omitempty"`
	// lastError is the last failure's message.
	// +optional
	LastError string `json:"lastError,omitempty"`
}

// MemberClusterStatus is the observed state of a MemberCluster.
type MemberClusterStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions Reachable and Ready, derived by the server from the owner's
	// report.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// collection is what the owning replica last reported.
	// +optional
	Collection *MemberObservation `json:"collection,omitempty"`
	// requester is the user whose request created the object or last changed
	// its Secret reference; the hub reads the Secret on that user's authority.
	// +optional
	Requester *RequesterInfo `json:"requester,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// MemberClusterList is a list of MemberClusters.
type MemberClusterList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of MemberClusters.
	Items []MemberCluster `json:"items"`
}

// ClusterCollection is a ClusterTarget's collection from one member.
type ClusterCollection struct {
	// name of the MemberCluster.
	// +required
	Name string `json:"name"`
	// collection is what the member's collector last reported.
	// +optional
	Collection CollectionObservation `json:"collection"`
	// unreachableSince is when the member stopped answering; the items
	// collected from it are kept meanwhile.
	// +optional
	UnreachableSince *metav1.Time `json:"unreachableSince,omitempty"`
}
