// Package sink defines what the exporters hand to destinations: the item
// as exported, the snapshot envelope with its checksum, change events, and
// the one small interface per sink family that the packages under it
// (file, git, postgres, nats, webhook) implement.
//
// Sinks never see Kubernetes objects or clients: the exporter resolves the
// sink's spec and Secret and passes plain values, so every sink can be
// tested against its real server alone.
package sink

import (
	"context"
	"encoding/json"
	"errors"
)

// Inventory identifies the Inventory or ClusterInventory being exported.
type Inventory struct {
	// Kind is "Inventory" or "ClusterInventory".
	Kind string `json:"kind"`
	// Namespace is empty for a ClusterInventory.
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// UID of the inventory object; not part of any document's content.
	UID string `json:"-"`
}

// Source identifies the collected object an item describes.
type Source struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// Item is one InventoryItem or ClusterInventoryItem as exported. Its JSON
// form is the item in snapshot documents, rows and events: it carries the
// content and identity but not the item's uid and resourceVersion, so an
// unchanged item serializes to the same bytes however often it is
// rewritten.
type Item struct {
	// Namespace of the item; empty for ClusterInventoryItems.
	Namespace string `json:"namespace,omitempty"`
	// Name of the item: deterministic from target and source.
	Name string `json:"name"`
	// Target and Profile that produced the item.
	Target  string `json:"target"`
	Profile string `json:"profile"`
	Source  Source `json:"source"`
	// Attributes in Attributes mode (a JSON object), Object in Resource mode.
	Attributes json.RawMessage `json:"attributes,omitempty"`
	Object     json.RawMessage `json:"object,omitempty"`
	// Hash is the item's content hash (hex SHA-256).
	Hash string `json:"hash"`

	// UID and ResourceVersion of the item object: the row key and the
	// events' idempotency key.
	UID             string `json:"-"`
	ResourceVersion string `json:"-"`
}

// Key is the item's identity within an inventory and its sort key:
// "namespace/name", or "name" for cluster items.
func (i *Item) Key() string {
	if i.Namespace == "" {
		return i.Name
	}
	return i.Namespace + "/" + i.Name
}

// Op is what happened to an item.
type Op string

const (
	// Upsert: the item was added or its content changed.
	Upsert Op = "upsert"
	// Delete: the item is gone (its object was deleted or left the target).
	Delete Op = "delete"
)

// Change is one item change, in the order the exporter observed them.
// For Delete, Item holds the last content the exporter knew of (at least
// the identity, UID and ResourceVersion).
type Change struct {
	Op   Op
	Item *Item
}

// SnapshotSink writes whole documents: the file and git types.
type SnapshotSink interface {
	// Write replaces the inventory's document with the encoded envelope.
	// It must be atomic (readers never see a partial document) and
	// idempotent. Written reports whether the destination changed: a git
	// sink that already holds the same checksum makes no commit and
	// returns false.
	Write(ctx context.Context, inv Inventory, env *Envelope) (written bool, err error)
	// Delete removes the inventory's document (deletionPolicy Delete). A
	// document that does not exist is not an error.
	Delete(ctx context.Context, inv Inventory) error
	Prober
}

// DatabaseSink applies per-item deltas: the postgres type.
type DatabaseSink interface {
	// State returns what the sink holds for the inventory: item UID to
	// item hash, and the cursor stored with the last applied batch ("" when
	// none). The exporter diffs it against the inventory to resume after a
	// restart and to repair drift.
	State(ctx context.Context, inv Inventory) (hashes map[string]string, cursor string, err error)
	// Apply applies the changes and stores cursor in one transaction:
	// after a crash either all of them and the cursor are stored, or none.
	// Upserts are keyed by (inventory namespace, inventory name, item UID),
	// so applying a change twice leaves one row.
	Apply(ctx context.Context, inv Inventory, changes []Change, cursor string) error
	// Delete removes every row of the inventory and its cursor.
	Delete(ctx context.Context, inv Inventory) error
	Prober
}

// EventSink publishes one event per change: the nats and webhook types.
type EventSink interface {
	// Publish sends one event per change, in order, and returns once every
	// event is acknowledged (a JetStream ack, a 2xx answer). On error the
	// events before the failing one were delivered; the exporter retries
	// the rest, and the idempotency key (Event.ID) lets the receiver drop
	// repeats.
	Publish(ctx context.Context, inv Inventory, changes []Change) error
	Prober
}

// Prober is the connection test every sink offers, and its cleanup.
type Prober interface {
	// Probe connects and authenticates without changing the destination.
	Probe(ctx context.Context) error
	// Close releases connections. The sink is not used afterwards.
	Close() error
}

// ErrPermanent marks errors that retrying cannot fix (bad configuration,
// a rejected credential); the exporter reports them without backing off
// into a hot loop and waits for the spec or Secret to change.
var ErrPermanent = errors.New("permanent sink error")
