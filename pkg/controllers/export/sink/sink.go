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
	"sync/atomic"
)

type probeKey struct{}

// SingleAttempt marks ctx for a run that probes a sink whose breaker is
// open: the sink tries the destination once, without retries of its own,
// until the destination accepts something (Answered); from then on the run
// retries as usual, so a long resync to a recovered destination is not
// failed by one blip.
func SingleAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, probeKey{}, new(atomic.Bool))
}

// IsSingleAttempt tells whether ctx still asks for one attempt.
func IsSingleAttempt(ctx context.Context) bool {
	answered, ok := ctx.Value(probeKey{}).(*atomic.Bool)
	return ok && !answered.Load()
}

// Answered records that the destination accepted something in ctx's run.
func Answered(ctx context.Context) {
	if answered, ok := ctx.Value(probeKey{}).(*atomic.Bool); ok {
		answered.Store(true)
	}
}

// Inventory identifies the Inventory or ClusterInventory being exported,
// and the cluster it belongs to: every key a sink stores (row key, path,
// subject, event id and source) includes Cluster, so that many clusters
// can share one sink without touching each other's data.
type Inventory struct {
	// Cluster is the exporting server's --cluster-name.
	Cluster string `json:"cluster"`
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

	// UID and ResourceVersion of the item object: the row key, and with
	// the leader's epoch the events' idempotency key.
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
	// Absent, on an Upsert to a database sink, says the destination did
	// not hold the item: the caller read the destination's state after
	// claiming its epoch, which fences other exporters, and found no row.
	// The sink may insert it without looking first, but must still cope
	// with a row another writer of the same epoch (a second sink naming
	// the same table) added since.
	Absent bool
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

// Cursor is what a database sink stores beside the rows of an inventory,
// in the transaction that writes them.
type Cursor struct {
	// Position is the item resourceVersion up to which every change of
	// the inventory is in the rows ("" when none was stored).
	Position string
	// Epoch is the leadership epoch of the writer (when it acquired the
	// controllers' Lease, in microseconds). A sink refuses a write whose epoch is
	// older than the stored one: a former leader that was paused and
	// resumes cannot overwrite what its successor wrote.
	Epoch int64
}

// DatabaseSink applies per-item deltas: the postgres type.
type DatabaseSink interface {
	// State returns what the sink holds for the inventory (of inv.Cluster
	// only): item UID to item hash, and the cursor stored with the last
	// applied batch. The exporter diffs it against the inventory to resume
	// after a restart and to repair drift.
	State(ctx context.Context, inv Inventory) (hashes map[string]string, cursor Cursor, err error)
	// Apply applies the changes and stores cursor in one transaction:
	// after a crash either all of them and the cursor are stored, or none.
	// Upserts are keyed by (cluster, inventory namespace, inventory name,
	// item UID), so applying a change twice leaves one row. When the
	// stored cursor's epoch is newer than cursor.Epoch, Apply changes
	// nothing and returns an error wrapping ErrFenced.
	Apply(ctx context.Context, inv Inventory, changes []Change, cursor Cursor) error
	// Delete removes every row of the inventory (of inv.Cluster), fenced
	// like Apply: it keeps the cursor, emptied, with cursor.Epoch, so that
	// a former leader's batch arriving later is refused.
	Delete(ctx context.Context, inv Inventory, cursor Cursor) error
	Prober
}

// EventSink publishes events: the nats and webhook types. The exporter
// builds the events (NewEvent, NewResyncEvent); the sink only carries them.
type EventSink interface {
	// Publish sends the events in order and returns once every one is
	// acknowledged (a JetStream ack, a 2xx answer). On error the events
	// before the failing one were delivered, and later ones may have been:
	// the exporter no longer knows what the consumer holds, and its next
	// delivery is a resync (docs/export.md, "Consuming events"). Within
	// one call a sink may retry an event; it keeps its id, which lets a
	// receiver drop the repeat.
	Publish(ctx context.Context, inv Inventory, events []Event) error
	Prober
}

// Prober is the connection test every sink offers, and its cleanup.
type Prober interface {
	// Probe connects and authenticates without changing the destination.
	Probe(ctx context.Context) error
	// Close releases connections. The sink is not used afterwards.
	Close() error
}

// Successor is implemented by a sink that can take over what the sink it
// replaces learned of the destination, when the exporter builds the client
// again for the same spec and Secret (--sink-client-max-age).
type Successor interface {
	// Succeed takes over what prev knows when prev writes to the same
	// destination in the same way, and does nothing otherwise. prev is
	// closed afterwards.
	Succeed(prev Prober)
}

// ErrPermanent marks errors that retrying cannot fix (bad configuration,
// a rejected credential); the exporter reports them without backing off
// into a hot loop and waits for the spec or Secret to change.
var ErrPermanent = errors.New("permanent sink error")

// ErrFenced marks a write a database sink refused because a newer leader
// wrote since (Cursor.Epoch): this replica no longer leads.
var ErrFenced = errors.New("fenced: a newer leader wrote to the sink")
