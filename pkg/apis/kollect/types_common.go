package kollect

import (
	"bytes"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GroupVersionKind names the kind of object a Profile collects.
type GroupVersionKind struct {
	// group is the API group of the collected kind; empty for the core group
	// (Pods, ConfigMaps, Secrets, ...).
	// +optional
	Group string `json:"group,omitempty"`
	// version is the API version the collector reads the kind at, for example "v1".
	// +required
	Version string `json:"version"`
	// kind is the collected kind in CamelCase, for example "Deployment".
	// +required
	Kind string `json:"kind"`
}

// GroupKind names a kind regardless of version. Scopes use it to allow kinds.
type GroupKind struct {
	// group is the API group; empty for the core group. "*" matches every group.
	// +optional
	Group string `json:"group,omitempty"`
	// kind is the kind in CamelCase. "*" matches every kind of the group.
	// +required
	Kind string `json:"kind"`
}

// LocalObjectReference refers to an object in the same namespace as the referrer.
type LocalObjectReference struct {
	// name of the referenced object.
	// +required
	Name string `json:"name"`
}

// NamespacedObjectReference refers to a namespaced object from a cluster-scoped
// kind. There is no implicit namespace: cluster kinds say where static
// configuration lives.
type NamespacedObjectReference struct {
	// namespace of the referenced object. Required on ClusterTarget.spec.profileRef.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// name of the referenced object.
	// +required
	Name string `json:"name"`
}

// RequesterInfo is the user whose request last created an object or changed
// what it references, as the server authenticated that request. The server
// records it; clients cannot set it (a status.requester in a request is
// ignored). Controllers re-check the object's references with this identity.
type RequesterInfo struct {
	// username is the name of the user, for example "jane" or
	// "system:serviceaccount:team-a:deployer".
	// +required
	Username string `json:"username"`
	// uid is the user's unique identifier, when the authenticator provides one.
	// +optional
	UID string `json:"uid,omitempty"`
	// groups the user belonged to at the time of the request.
	// +optional
	// +listType=atomic
	Groups []string `json:"groups,omitempty"`
	// extra holds additional information the authenticator provided, such as
	// the scopes of a token; authorization checks replay it.
	// +optional
	Extra map[string]ExtraValue `json:"extra,omitempty"`
	// recordedAt is when the server recorded this requester. With
	// --requester-max-age, an object whose requester is older than that
	// (not re-affirmed by an update) stops acting: Degraded, RequesterExpired.
	// +optional
	RecordedAt *metav1.Time `json:"recordedAt,omitempty"`
}

// ExtraValue is one entry of RequesterInfo.extra: a list of strings.
type ExtraValue []string

// SinkReference points an inventory at one sink of a family and may override
// how often an unchanged payload is re-exported to it.
type SinkReference struct {
	// name of the sink object.
	// +required
	Name string `json:"name"`
	// namespace of the sink. Forbidden on Inventory (sinks resolve in the
	// inventory's own namespace); optional on ClusterInventory, where it
	// defaults to spec.sinkNamespace.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// exportMinInterval overrides, for this sink only, how often an unchanged
	// payload is re-exported as an anti-drift full sync (0s to 24h). Changed
	// payloads are exported at once regardless. Precedence: this ref, then the
	// sink's spec.exportMinInterval, then the inventory's, then 30s; the
	// namespace's Scope floor applies last.
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
}

// SinkFamily is the kind of destination a sink reference points to.
type SinkFamily string

const (
	// SinkFamilySnapshot is a SnapshotSink: whole documents (files, Git).
	SinkFamilySnapshot SinkFamily = "Snapshot"
	// SinkFamilyDatabase is a DatabaseSink: rows (Postgres).
	SinkFamilyDatabase SinkFamily = "Database"
	// SinkFamilyEvent is an EventSink: per-item change events (NATS, webhooks).
	SinkFamilyEvent SinkFamily = "Event"
)

// Value holds an arbitrary JSON value: a string, number, boolean, array,
// object or null. Collected attributes and pruned objects use it.
// +k8s:deepcopy-gen=true
type Value struct {
	// Raw is the JSON encoding of the value.
	Raw []byte `json:"-"`
}

// MarshalJSON writes the raw value, or null when it is empty.
func (v Value) MarshalJSON() ([]byte, error) {
	if len(v.Raw) == 0 {
		return []byte("null"), nil
	}
	return v.Raw, nil
}

// UnmarshalJSON keeps a copy of the raw value.
func (v *Value) UnmarshalJSON(data []byte) error {
	if bytes.Equal(data, []byte("null")) {
		v.Raw = nil
		return nil
	}
	v.Raw = append(v.Raw[:0], data...)
	return nil
}

// OpenAPISchemaType is nil: a Value may be of any JSON type.
func (Value) OpenAPISchemaType() []string { return nil }

// OpenAPISchemaFormat is empty: a Value has no format.
func (Value) OpenAPISchemaFormat() string { return "" }

// TLSConfig says how a sink verifies the server it connects to.
type TLSConfig struct {
	// caBundle is a PEM bundle of the certificate authorities trusted for the
	// sink's endpoint. When set it replaces the system roots.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`
	// serverName overrides the name the server certificate is verified against.
	// +optional
	ServerName string `json:"serverName,omitempty"`
	// insecureSkipVerify disables verification of the server certificate.
	// Only for tests and trusted networks; the probe result warns about it.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`
}

// DeletionPolicy says what happens to exported data when the inventory that
// exported it is deleted. Removing only the reference leaves the data.
type DeletionPolicy string

const (
	// DeletionPolicyRetain leaves exported data where it is (the default).
	DeletionPolicyRetain DeletionPolicy = "Retain"
	// DeletionPolicyDelete removes what was exported: rows, files, a final
	// commit, or a delete event per item.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// SerializationFormat is how a sink encodes documents.
type SerializationFormat string

const (
	// SerializationJSON is one JSON document.
	SerializationJSON SerializationFormat = "json"
	// SerializationYAML is one YAML document.
	SerializationYAML SerializationFormat = "yaml"
	// SerializationNDJSON is the envelope header on the first line and one item a line after it.
	SerializationNDJSON SerializationFormat = "ndjson"
)

// Serialization chooses the encoding of what a sink writes.
type Serialization struct {
	// format is json, yaml or ndjson. Defaults to json.
	// +optional
	Format SerializationFormat `json:"format,omitempty"`
}

// ProbeResult is the outcome of the last connection test of a sink.
type ProbeResult struct {
	// time the probe ran.
	// +optional
	Time *metav1.Time `json:"time,omitempty"`
	// succeeded is true when the sink accepted a connection and the credentials.
	// +optional
	Succeeded bool `json:"succeeded,omitempty"`
	// outcome classifies the result without disclosing what answered:
	// Succeeded, AddressForbidden (the endpoint is or resolves to an address
	// sinks may not reach), DNS, Refused, Timeout, TLS, Auth, HTTPStatus,
	// Protocol or SecretForbidden.
	// +optional
	Outcome string `json:"outcome,omitempty"`
	// message explains a failure. It never contains credentials, nor text
	// the endpoint sent unless the endpoint is the sink's own service.
	// +optional
	Message string `json:"message,omitempty"`
	// latencyMillis is how long the probe took.
	// +optional
	LatencyMillis int64 `json:"latencyMillis,omitempty"`
}

// SinkStatus is the observed state of a sink.
type SinkStatus struct {
	// observedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready is True when the last probe succeeded.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`
	// probe is the result of the last connection test.
	// +optional
	Probe *ProbeResult `json:"probe,omitempty"`
	// requester is the user whose request created the sink or last changed
	// its secretRef: the Secret is used on that user's authority, which the
	// server re-checks (get on the Secret) before every use. It cannot be
	// set by clients.
	// +optional
	Requester *RequesterInfo `json:"requester,omitempty"`
}

// Condition types and reasons shared by the kinds.
const (
	// ConditionReady is True when the object does what it declares.
	ConditionReady = "Ready"
	// ConditionSynced is True when every sink holds the current inventory.
	ConditionSynced = "Synced"
	// ConditionDegraded is True when part of what the object declares cannot be done.
	ConditionDegraded = "Degraded"
	// ConditionReachable is True when a MemberCluster's API server answered
	// the owning replica's last check.
	ConditionReachable = "Reachable"

	ReasonExported         = "Exported"
	ReasonPartiallySynced  = "PartiallySynced"
	ReasonProgressing      = "Progressing"
	ReasonExportFailed     = "ExportFailed"
	ReasonNoSinks          = "NoSinks"
	ReasonSuspended        = "Suspended"
	ReasonCollected        = "Collected"
	ReasonPending          = "Pending"
	ReasonExtractionFailed = "ExtractionFailed"
	ReasonKindNotFound     = "KindNotFound"
	ReasonSinkNotFound     = "SinkNotFound"
	ReasonSinkForbidden    = "SinkForbidden"
	ReasonProfileNotFound  = "ProfileNotFound"
	ReasonProfileForbidden = "ProfileForbidden"
	// ReasonMemberForbidden: the requester may not use a MemberCluster the
	// clusterSelector selects; nothing is collected from it.
	ReasonMemberForbidden = "MemberForbidden"
	// ReasonSecretForbidden: the sink's requester may no longer get its
	// Secret; the sink is not used until the grant returns or the sink is
	// updated by someone who may.
	ReasonSecretForbidden = "SecretForbidden"
	// ReasonItemsForbidden: the inventory's requester may not list the items
	// it would export.
	ReasonItemsForbidden = "ItemsForbidden"
	// ReasonQuotaExceeded: a Scope's or ClusterScope's quota stops part of
	// the collection; the message says how many objects were left out.
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonRequesterExpired: the server runs with --requester-max-age and
	// the object's requester was not re-affirmed by an update in that time.
	ReasonRequesterExpired = "RequesterExpired"
	// The Scope reasons: a Scope or ClusterScope written after the object
	// forbids what it does; the object stops doing it until the limit or the
	// object changes.
	ReasonScopeGVKDenied       = "ScopeGVKDenied"
	ReasonScopeNamespaceDenied = "ScopeNamespaceDenied"
	ReasonScopeSinkDenied      = "ScopeSinkDenied"
	ReasonSinkNamespaceDenied  = "SinkNamespaceDenied"
	// ReasonTenantMode: a cluster-scoped object on a server started with
	// --tenant-mode, which neither collects nor exports for them.
	ReasonTenantMode     = "TenantMode"
	ReasonAsExpected     = "AsExpected"
	ReasonProbeSucceeded = "ProbeSucceeded"
	ReasonProbeFailed    = "ProbeFailed"
	ReasonNotProbed      = "NotProbed"
	// ReasonReachable and ReasonUnreachable: a MemberCluster's API server
	// answered, or did not (its report named no finer errorClass).
	ReasonReachable   = "Reachable"
	ReasonUnreachable = "Unreachable"
	// ReasonCollecting: a reachable MemberCluster is collected from.
	ReasonCollecting = "Collecting"
)

// Annotations and labels the server understands.
const (
	// AnnotationCollectSecrets must be "true" on a Profile whose targetGVK is
	// core/v1 Secret. Without it such a Profile is rejected.
	AnnotationCollectSecrets = "kollect.dev/collect-secrets"
	// AnnotationReaffirm re-affirms an object's requester: an update that
	// changes its value (any value will do, a timestamp is customary) is
	// checked against the requesting user and records them as the
	// requester, like a change of references, without changing what the
	// object does. It brings back a requester older than
	// --requester-max-age, or a sink written before sinks recorded theirs.
	AnnotationReaffirm = "kollect.dev/reaffirm"
	// AnnotationExportSecretValues must also be "true" for a Secrets Profile in
	// Resource mode to export values unredacted.
	AnnotationExportSecretValues = "kollect.dev/export-secret-values"

	// LabelTarget names the Target (or ClusterTarget) that produced an item.
	LabelTarget = "kollect.dev/target"
	// LabelProfile names the Profile an item was extracted with.
	LabelProfile = "kollect.dev/profile"
	// LabelProfileNamespace is the namespace of that Profile, on cluster items.
	LabelProfileNamespace = "kollect.dev/profile-namespace"
	// LabelSourceKind is the kind of the collected object.
	LabelSourceKind = "kollect.dev/source-kind"
	// LabelSourceGroup is the API group of the collected object ("core" for the core group).
	LabelSourceGroup = "kollect.dev/source-group"
	// LabelCluster is the cluster the collected object lives in, as in
	// source.cluster: the host's --cluster-name or a MemberCluster's name.
	LabelCluster = "kollect.dev/cluster"
	// LabelWatch, "enabled" or "disabled", on objects and namespaces opts them
	// in or out of collection; the object's label wins over its namespace's.
	LabelWatch = "kollect.dev/watch"
)
