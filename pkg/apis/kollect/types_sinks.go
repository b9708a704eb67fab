package kollect

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SnapshotSinkType is the destination of whole-snapshot documents.
type SnapshotSinkType string

const (
	// SnapshotSinkFile writes files under a directory of the server's
	// --file-sink-root: endpoint file:///dir, read as <root>/<namespace>/dir.
	SnapshotSinkFile SnapshotSinkType = "file"
	// SnapshotSinkGit commits files to a Git repository: endpoint https://,
	// ssh://, or file:// on a server run with --allow-local-git-sinks.
	SnapshotSinkGit SnapshotSinkType = "git"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SnapshotSink is a destination for whole inventory snapshots: a directory
// or a Git repository.
type SnapshotSink struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the destination.
	// +required
	Spec SnapshotSinkSpec `json:"spec"`
	// status reports the last connection probe.
	// +optional
	Status SinkStatus `json:"status,omitempty"`
}

// SnapshotSinkSpec configures a snapshot destination.
type SnapshotSinkSpec struct {
	// type is file or git. Immutable.
	// +required
	Type SnapshotSinkType `json:"type"`
	// endpoint is file:///dir for file, a directory under the server's
	// --file-sink-root/<namespace> (file sinks are refused without that
	// flag), and the repository URL for git: https:// or ssh://, or file://
	// with --allow-local-git-sinks.
	// +required
	Endpoint string `json:"endpoint"`
	// secretRef names a Secret in this namespace with credentials: for git,
	// key "token" (HTTPS, with optional "username") or "ssh-privatekey"
	// (with optional "known_hosts").
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// tls configures server verification for https endpoints.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
	// exportMinInterval is this sink's default re-export interval of an
	// unchanged payload, used when the inventory's reference has none (0s to 24h).
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
	// serialization chooses json (default), yaml or ndjson.
	// +optional
	Serialization Serialization `json:"serialization,omitempty"`
	// deletionPolicy is Retain (default) or Delete: whether deleting the
	// inventory removes what it exported here.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// file configures the file type.
	// +optional
	File *FileSinkConfig `json:"file,omitempty"`
	// git configures the git type; required when type is git.
	// +optional
	Git *GitSinkConfig `json:"git,omitempty"`
}

// FileSinkConfig configures a file snapshot sink.
type FileSinkConfig struct {
	// pathTemplate is the file path relative to the endpoint directory, with
	// {cluster} (the server's --cluster-name), {namespace} ("_cluster" for a
	// ClusterInventory), {inventory} and {ext} placeholders. Defaults to
	// "{cluster}/{namespace}/{inventory}.{ext}", so that the servers of many
	// clusters can share the directory. It may not leave the directory.
	// +optional
	PathTemplate string `json:"pathTemplate,omitempty"`
}

// GitSinkConfig configures a git snapshot sink.
type GitSinkConfig struct {
	// branch to commit to. Defaults to main.
	// +optional
	Branch string `json:"branch,omitempty"`
	// pathTemplate is the file path in the repository, with {cluster} (the
	// server's --cluster-name), {namespace} ("_cluster" for a
	// ClusterInventory), {inventory} and {ext} placeholders. Defaults to
	// "{cluster}/{namespace}/{inventory}.{ext}", so that the servers of many
	// clusters can share the repository.
	// +optional
	PathTemplate string `json:"pathTemplate,omitempty"`
	// commitMessage is the commit message template, with {cluster},
	// {namespace}, {inventory}, {itemCount} and {checksum} placeholders.
	// Defaults to "kollect: {cluster}/{namespace}/{inventory} ({itemCount}
	// items, {checksum})".
	// +optional
	CommitMessage string `json:"commitMessage,omitempty"`
	// authorName of commits. Defaults to "Kollect".
	// +optional
	AuthorName string `json:"authorName,omitempty"`
	// authorEmail of commits. Defaults to "kollect@kollect.dev".
	// +optional
	AuthorEmail string `json:"authorEmail,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// SnapshotSinkList is a list of SnapshotSinks.
type SnapshotSinkList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of SnapshotSinks.
	Items []SnapshotSink `json:"items"`
}

// DatabaseSinkType is the database rows are written to.
type DatabaseSinkType string

const (
	// DatabaseSinkPostgres writes rows to a PostgreSQL table.
	DatabaseSinkPostgres DatabaseSinkType = "postgres"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DatabaseSink is a destination for inventory rows: a Postgres table that
// receives per-item upserts and deletes.
type DatabaseSink struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the destination.
	// +required
	Spec DatabaseSinkSpec `json:"spec"`
	// status reports the last connection probe.
	// +optional
	Status SinkStatus `json:"status,omitempty"`
}

// DatabaseSinkSpec configures a row destination.
type DatabaseSinkSpec struct {
	// type is postgres. Immutable.
	// +required
	Type DatabaseSinkType `json:"type"`
	// endpoint is a postgres:// URL without credentials. Optional when the
	// Secret's "dsn" key holds the whole connection string.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// secretRef names a Secret in this namespace: key "dsn" (a full
	// connection string), or "username" and "password" for the endpoint.
	// Required when endpoint is empty.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// tls configures server verification.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
	// exportMinInterval is this sink's default interval for the full sync
	// that repairs drift, used when the inventory's reference has none (0s to 24h).
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
	// deletionPolicy is Retain (default) or Delete: whether deleting the
	// inventory deletes its rows.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// postgres configures the postgres type; required when type is postgres.
	// +optional
	Postgres *PostgresSinkConfig `json:"postgres,omitempty"`
}

// PostgresSinkConfig names the table rows go to.
type PostgresSinkConfig struct {
	// schema of the table. Defaults to public.
	// +optional
	Schema string `json:"schema,omitempty"`
	// table name, created if missing. Defaults to kollect_inventory.
	// +optional
	Table string `json:"table,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// DatabaseSinkList is a list of DatabaseSinks.
type DatabaseSinkList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of DatabaseSinks.
	Items []DatabaseSink `json:"items"`
}

// EventSinkType is the transport change events are published on.
type EventSinkType string

const (
	// EventSinkNATS publishes to a NATS JetStream stream.
	EventSinkNATS EventSinkType = "nats"
	// EventSinkWebhook posts CloudEvents 1.0 (structured JSON) over HTTPS.
	EventSinkWebhook EventSinkType = "webhook"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// EventSink is a destination for per-item change events: a NATS JetStream
// subject or a webhook.
type EventSink struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the destination.
	// +required
	Spec EventSinkSpec `json:"spec"`
	// status reports the last connection probe.
	// +optional
	Status SinkStatus `json:"status,omitempty"`
}

// EventSinkSpec configures a change-event destination.
type EventSinkSpec struct {
	// type is nats or webhook. Immutable.
	// +required
	Type EventSinkType `json:"type"`
	// endpoint is nats:// or tls:// for nats, and an https:// (or, for tests,
	// http://) URL for webhook.
	// +required
	Endpoint string `json:"endpoint"`
	// secretRef names a Secret in this namespace: for nats, key "token" or
	// "username" and "password" or "creds"; for webhook, key "hmacKey" signs
	// each delivery (HMAC-SHA256) and optional "token" is sent as a bearer token.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// tls configures server verification.
	// +optional
	TLS *TLSConfig `json:"tls,omitempty"`
	// exportMinInterval is this sink's default interval for re-publishing an
	// unchanged inventory, used when the inventory's reference has none (0s to 24h).
	// +optional
	ExportMinInterval *metav1.Duration `json:"exportMinInterval,omitempty"`
	// deletionPolicy is Retain (default) or Delete: whether deleting the
	// inventory publishes a delete event per item.
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
	// nats configures the nats type; required when type is nats.
	// +optional
	NATS *NATSSinkConfig `json:"nats,omitempty"`
	// webhook configures the webhook type.
	// +optional
	Webhook *WebhookSinkConfig `json:"webhook,omitempty"`
}

// NATSSinkConfig names the JetStream stream and subject.
type NATSSinkConfig struct {
	// stream is the JetStream stream that must capture the subject.
	// +required
	Stream string `json:"stream"`
	// subject template, with {cluster} (the server's --cluster-name),
	// {namespace} ("_cluster" for a ClusterInventory), {inventory}, {kind}
	// and {name} (the item's source kind and name; "_" for an event about
	// the whole inventory, such as dev.kollect.inventory.resynced)
	// placeholders, each made a valid subject token. Defaults to
	// "kollect.{cluster}.{namespace}.{inventory}". Each message's
	// Nats-Msg-Id is its event's id, which names the cluster and the
	// inventory, so inventories and clusters can share a stream.
	// +optional
	Subject string `json:"subject,omitempty"`
}

// WebhookSinkConfig configures webhook deliveries.
type WebhookSinkConfig struct {
	// signatureHeader carries the hex HMAC-SHA256 of the body. Defaults to
	// X-Kollect-Signature.
	// +optional
	SignatureHeader string `json:"signatureHeader,omitempty"`
	// timeout of one delivery attempt. Defaults to 10s, at most 1m.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// maxAttempts per event before the export fails. Defaults to 5, at most 20.
	// +optional
	MaxAttempts int32 `json:"maxAttempts,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// EventSinkList is a list of EventSinks.
type EventSinkList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of EventSinks.
	Items []EventSink `json:"items"`
}
