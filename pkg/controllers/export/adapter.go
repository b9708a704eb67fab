package export

import (
	"context"
	"fmt"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

const (
	// applyBatch is the most changes one database transaction carries: a
	// transaction's own cost (fence, probe, commit) is then a small part of
	// a first export, and a failed one redoes at most this much.
	applyBatch = 5000
	// publishBatch is the most events one Publish call carries.
	publishBatch = 1000
)

// adapter is one connected sink as the exporter uses it: built once per
// client, it turns what the sink is owed into the calls its family
// understands, so nothing above it switches over sink kinds.
type adapter struct {
	deliverer
	sink.Prober
}

type deliverer interface {
	// needsLiveSet reports whether a run needs the whole live set (the
	// batch's items) besides the owed changes.
	needsLiveSet(known, full bool) bool
	// deliver brings the sink up to the batch and returns whether the
	// destination changed. It returns nil only once the sink acknowledged
	// everything the batch holds.
	deliver(ctx context.Context, d *delivery) (wrote bool, err error)
	// remove deletes what the inventory exported to the sink
	// (deletionPolicy Delete); items are the inventory's items.
	remove(ctx context.Context, inv sink.Inventory, items []*sink.Item, epoch int64) error
}

// delivery is one run's input.
type delivery struct {
	inv sink.Inventory
	b   *batch
	// known: this exporter delivered to the sink before in this process,
	// so the sink holds what the subscription says. full: restate
	// everything (a due re-export or a forced one).
	known, full bool
	generation  int64
	epoch       int64
	// acked is the cursor the sink acknowledged before this run.
	acked string
}

// snapshotAdapter writes whole documents (file, git).
type snapshotAdapter struct{ s sink.SnapshotSink }

func (a *snapshotAdapter) needsLiveSet(bool, bool) bool { return true }

func (a *snapshotAdapter) deliver(ctx context.Context, d *delivery) (bool, error) {
	env := &sink.Envelope{
		SchemaVersion: sink.SchemaVersion,
		Checksum:      d.b.checksum,
		Generation:    d.generation,
		ItemCount:     len(d.b.items),
		ExportedAt:    time.Now().UTC().Truncate(time.Second),
		Cluster:       d.inv.Cluster,
		Inventory:     d.inv,
		Items:         d.b.items,
	}
	return a.s.Write(ctx, d.inv, env)
}

func (a *snapshotAdapter) remove(ctx context.Context, inv sink.Inventory, _ []*sink.Item, _ int64) error {
	return a.s.Delete(ctx, inv)
}

// databaseAdapter applies row deltas (postgres). The table is its own
// record of what it holds: a run that does not know it (the first in this
// process) or must restate everything diffs the table against the live set.
type databaseAdapter struct{ s sink.DatabaseSink }

func (a *databaseAdapter) needsLiveSet(known, full bool) bool { return !known || full }

func (a *databaseAdapter) deliver(ctx context.Context, d *delivery) (bool, error) {
	changes := d.b.changes
	if !d.known || d.full {
		// Claim this epoch first, in a transaction of its own: a former
		// leader's transaction in flight commits before it or is refused
		// after it, so the State read next sees everything that will
		// ever land, and a stale batch cannot follow a diff that found
		// nothing to write.
		if err := a.s.Apply(ctx, d.inv, nil, sink.Cursor{Position: d.acked, Epoch: d.epoch}); err != nil {
			return false, err
		}
		held, _, err := a.s.State(ctx, d.inv)
		if err != nil {
			return false, err
		}
		changes = diff(d.b.items, held, d.full)
	}
	if len(changes) == 0 {
		return false, nil
	}
	for i := 0; i < len(changes); i += applyBatch {
		end := min(i+applyBatch, len(changes))
		// Only the transaction that completes the batch may claim its
		// cursor; the ones before it keep the acknowledged one.
		cursor := sink.Cursor{Position: d.acked, Epoch: d.epoch}
		if end == len(changes) {
			cursor.Position = d.b.cursor
		}
		if err := a.s.Apply(ctx, d.inv, changes[i:end], cursor); err != nil {
			return i > 0, err
		}
	}
	return true, nil
}

// diff is what turns a table holding held (item UID → hash) into one
// holding items: upserts of what it lacks (of everything when all is set,
// for an anti-drift rewrite; the sink skips identical rows), marked Absent
// where the table has no row, and deletes of what it holds beyond items.
func diff(items []*sink.Item, held map[string]string, all bool) []sink.Change {
	var out []sink.Change
	seen := make(map[string]struct{}, len(items))
	for _, it := range items {
		seen[it.UID] = struct{}{}
		if h, ok := held[it.UID]; all || !ok || h != it.Hash {
			out = append(out, sink.Change{Op: sink.Upsert, Item: it, Absent: !ok})
		}
	}
	for uid, hash := range held {
		if _, ok := seen[uid]; !ok {
			out = append(out, sink.Change{Op: sink.Delete, Item: &sink.Item{UID: uid, Hash: hash}})
		}
	}
	return out
}

func (a *databaseAdapter) remove(ctx context.Context, inv sink.Inventory, _ []*sink.Item, epoch int64) error {
	return a.s.Delete(ctx, inv, sink.Cursor{Epoch: epoch})
}

// eventAdapter publishes events (nats, webhook). An event sink cannot be
// read back: when the exporter does not know what the consumer holds, or
// must restate everything, it publishes a resync (docs/export.md,
// "Consuming events").
type eventAdapter struct{ s sink.EventSink }

func (a *eventAdapter) needsLiveSet(known, full bool) bool { return !known || full }

func (a *eventAdapter) deliver(ctx context.Context, d *delivery) (bool, error) {
	now := time.Now()
	var events []sink.Event
	if !d.known || d.full {
		// What the consumer holds is not known: a token never used
		// before. A due re-export of what the consumer acknowledged has
		// a token of that state instead, so restating an unchanged
		// inventory repeats the same ids, which a receiver that drops
		// repeats (JetStream's duplicate window) does not store again.
		token := fmt.Sprintf("%d.%d", d.epoch, now.UnixNano())
		if d.known {
			token = fmt.Sprintf("%d.%d.%.16s", d.epoch, len(d.b.items), d.b.checksum)
		}
		events = make([]sink.Event, 0, len(d.b.items)+1)
		events = append(events, sink.NewResyncEvent(d.inv, token, len(d.b.items), d.b.checksum, d.epoch, now))
		for _, it := range d.b.items {
			events = append(events, sink.NewEvent(d.inv, sink.Change{Op: sink.Upsert, Item: it}, d.epoch, token, now))
		}
	} else {
		events = make([]sink.Event, 0, len(d.b.changes))
		for _, c := range d.b.changes {
			events = append(events, sink.NewEvent(d.inv, c, d.epoch, "", now))
		}
	}
	if len(events) == 0 {
		return false, nil
	}
	if err := a.publish(ctx, d.inv, events); err != nil {
		return false, err
	}
	return true, nil
}

func (a *eventAdapter) publish(ctx context.Context, inv sink.Inventory, events []sink.Event) error {
	for i := 0; i < len(events); i += publishBatch {
		if err := a.s.Publish(ctx, inv, events[i:min(i+publishBatch, len(events))]); err != nil {
			return err
		}
	}
	return nil
}

// remove publishes a delete per item the inventory holds, then an empty
// resync: a consumer folding by the contract also drops what it still
// holds from deletions that were owed when the exporter stopped.
func (a *eventAdapter) remove(ctx context.Context, inv sink.Inventory, items []*sink.Item, epoch int64) error {
	now := time.Now()
	events := make([]sink.Event, 0, len(items)+1)
	for _, it := range items {
		events = append(events, sink.NewEvent(inv, sink.Change{Op: sink.Delete, Item: it}, epoch, "", now))
	}
	var empty sink.Checksum
	events = append(events, sink.NewResyncEvent(inv, fmt.Sprintf("%d.%d.removed", epoch, now.UnixNano()), 0, empty.String(), epoch, now))
	return a.publish(ctx, inv, events)
}
