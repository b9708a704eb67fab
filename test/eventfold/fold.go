// Package eventfold is the reference consumer of Kollect's change events:
// it folds a stream of CloudEvents by the rule docs/export.md ("Consuming
// events") documents, and the tests use it to show that every event sink
// ends with the live item set. It also offers the two receivers the tests
// need: a TLS webhook with fault injection (StartWebhook) and a JetStream
// follower (Follow).
package eventfold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// Stats counts what the fold did with one inventory's events.
type Stats struct {
	// Events is every event of the inventory handed to the fold, counted
	// or not below.
	Events int
	// Duplicates are re-deliveries: events whose id was applied before.
	Duplicates int
	// Stale are events ignored because their epoch is older than the
	// newest one seen for the inventory (a former leader's).
	Stale int
	// ResyncsStarted and ResyncsCompleted count resynced events and the
	// resyncs whose every upsert arrived.
	ResyncsStarted, ResyncsCompleted int
	// ChecksumMismatches counts completed resyncs after which the folded
	// items' checksum differed from the one the resynced event announced.
	ChecksumMismatches int
	// Pending is true while a resync waits for some of its upserts.
	Pending bool
}

// Fold is the folded state of every inventory seen on one stream. It is
// safe for concurrent use.
type Fold struct {
	mu      sync.Mutex
	invs    map[string]*inventory
	invalid []error
	// changed is closed and replaced whenever an event changes the state,
	// so that WaitEqual sleeps until there is something new to compare.
	changed chan struct{}
}

type inventory struct {
	maxEpoch int64
	// applied holds the ids of the events applied (not those ignored as
	// stale): what rule 1 recognises re-deliveries by.
	applied map[string]struct{}
	items   map[string]*sink.Item
	pending *pending
	stats   Stats
}

type pending struct {
	token    string
	count    int
	checksum string
	marked   map[string]struct{}
}

// New returns an empty fold.
func New() *Fold {
	return &Fold{invs: map[string]*inventory{}, changed: make(chan struct{})}
}

// ApplyJSON decodes one event (structured-mode CloudEvents JSON, the body
// of a webhook delivery or of a NATS message) and applies it. A body that
// is not a valid Kollect event is not applied; the error names the field.
func (f *Fold) ApplyJSON(body []byte) error {
	var ev sink.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		err = fmt.Errorf("eventfold: decoding event: %w", err)
		f.mu.Lock()
		f.invalid = append(f.invalid, err)
		f.mu.Unlock()
		return err
	}
	return f.apply(ev)
}

// Apply applies one event in stream order. An invalid event is not
// applied; Err reports it.
func (f *Fold) Apply(ev sink.Event) { _ = f.apply(ev) }

// Err reports the invalid events handed to the fold (nil when there was
// none): a stream a consumer could not fold is a failure of the exporter.
func (f *Fold) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.invalid...)
}

func (f *Fold) apply(ev sink.Event) error {
	if err := validate(&ev); err != nil {
		err = fmt.Errorf("eventfold: event %q: %w", ev.ID, err)
		f.mu.Lock()
		f.invalid = append(f.invalid, err)
		f.mu.Unlock()
		return err
	}
	path := sink.InventoryPath(ev.Data.Inventory)

	f.mu.Lock()
	defer f.mu.Unlock()
	defer f.notify()
	inv := f.invs[path]
	if inv == nil {
		inv = &inventory{applied: map[string]struct{}{}, items: map[string]*sink.Item{}}
		f.invs[path] = inv
	}
	inv.stats.Events++
	// Rule 1: a re-delivery changes nothing (the rules below are
	// idempotent anyway); skipping it makes the count observable.
	if _, ok := inv.applied[ev.ID]; ok {
		inv.stats.Duplicates++
		return nil
	}
	// Rule 2: a former leader's events lose to its successor's.
	if ev.Epoch < inv.maxEpoch {
		inv.stats.Stale++
		return nil
	}
	inv.maxEpoch = ev.Epoch
	inv.applied[ev.ID] = struct{}{}

	switch ev.Type {
	case sink.EventTypeResynced: // rule 3
		r := ev.Data.Resync
		inv.pending = &pending{token: r.Token, count: r.ItemCount, checksum: r.Checksum, marked: map[string]struct{}{}}
		inv.stats.ResyncsStarted++
		if r.ItemCount == 0 {
			inv.complete()
		}
	case sink.EventTypeUpserted: // rule 4
		it := *ev.Data.Item
		// The item's JSON form has no uid or resourceVersion: the event
		// carries them beside it.
		it.UID, it.ResourceVersion = ev.Data.ItemUID, ev.Data.ItemResourceVersion
		key := it.Key()
		inv.items[key] = &it
		if p := inv.pending; p != nil && ev.Resync == p.token {
			p.marked[key] = struct{}{}
			if len(p.marked) == p.count {
				inv.complete()
			}
		}
	case sink.EventTypeDeleted: // rule 5
		key := ev.Data.Item.Key()
		// A delete of an older incarnation must not remove the item
		// that was recreated under the same key.
		if cur, ok := inv.items[key]; ok && cur.UID == ev.Data.ItemUID {
			delete(inv.items, key)
		}
	}
	return nil
}

// complete ends the pending resync (rule 6): what it did not restate is
// gone, and the rest must add up to the checksum it announced.
func (inv *inventory) complete() {
	p := inv.pending
	var sum sink.Checksum
	for key, it := range inv.items {
		if _, ok := p.marked[key]; !ok {
			delete(inv.items, key)
			continue
		}
		sum.Add(key, it.Hash)
	}
	if sum.String() != p.checksum {
		inv.stats.ChecksumMismatches++
	}
	inv.pending = nil
	inv.stats.ResyncsCompleted++
}

func (f *Fold) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// validate checks what the fold relies on, so that an invalid event is
// refused whole instead of half applied.
func validate(ev *sink.Event) error {
	switch {
	case ev.SpecVersion != "1.0":
		return fmt.Errorf("specversion: want \"1.0\", got %q", ev.SpecVersion)
	case ev.ID == "":
		return errors.New("id: missing")
	case ev.Data.Inventory.Name == "":
		return errors.New("data.inventory.name: missing")
	case ev.Data.Inventory.Cluster != ev.Cluster:
		return fmt.Errorf("data.inventory.cluster %q differs from kollectcluster %q", ev.Data.Inventory.Cluster, ev.Cluster)
	}
	switch ev.Type {
	case sink.EventTypeResynced:
		r := ev.Data.Resync
		switch {
		case r == nil:
			return errors.New("data.resync: missing")
		case r.Token == "":
			return errors.New("data.resync.token: missing")
		case r.ItemCount < 0:
			return fmt.Errorf("data.resync.itemCount: %d is negative", r.ItemCount)
		}
		return nil
	case sink.EventTypeUpserted, sink.EventTypeDeleted:
		switch {
		case ev.Data.Item == nil:
			return errors.New("data.item: missing")
		case ev.Data.Item.Name == "":
			return errors.New("data.item.name: missing")
		case ev.Data.ItemUID == "":
			return errors.New("data.itemUID: missing")
		case ev.Subject != ev.Data.Item.Key():
			return fmt.Errorf("subject %q differs from the item's key %q", ev.Subject, ev.Data.Item.Key())
		}
		return nil
	default:
		return fmt.Errorf("type: unknown event type %q", ev.Type)
	}
}

// Inventories lists the inventory paths (sink.InventoryPath) the fold
// has seen events of, sorted.
func (f *Fold) Inventories() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.invs))
	for p := range f.invs {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// Items returns a copy of the folded items of an inventory, by item key.
func (f *Fold) Items(inventoryPath string) map[string]*sink.Item {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]*sink.Item{}
	if inv := f.invs[inventoryPath]; inv != nil {
		for k, it := range inv.items {
			c := *it
			out[k] = &c
		}
	}
	return out
}

// Stats returns the counts of an inventory's events.
func (f *Fold) Stats(inventoryPath string) Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	inv := f.invs[inventoryPath]
	if inv == nil {
		return Stats{}
	}
	s := inv.stats
	s.Pending = inv.pending != nil
	return s
}

// Equal compares the folded items of an inventory with live (item key to
// item hash). It returns nil when they hold exactly the same keys with the
// same hashes, and otherwise an error naming up to 10 keys that are
// missing, extra or different.
func (f *Fold) Equal(inventoryPath string, live map[string]string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.equal(inventoryPath, live)
}

func (f *Fold) equal(inventoryPath string, live map[string]string) error {
	var items map[string]*sink.Item
	pendingResync := false
	if inv := f.invs[inventoryPath]; inv != nil {
		items, pendingResync = inv.items, inv.pending != nil
	}
	var diffs []string
	for k, h := range live {
		it, ok := items[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+k)
		case it.Hash != h:
			diffs = append(diffs, fmt.Sprintf("different %s (folded hash %.12s, live %.12s)", k, it.Hash, h))
		}
	}
	for k := range items {
		if _, ok := live[k]; !ok {
			diffs = append(diffs, "extra "+k)
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	sort.Strings(diffs)
	total := len(diffs)
	if total > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("and %d more", total-10))
	}
	msg := fmt.Sprintf("eventfold: %s: folded %d items, live %d, %d keys differ: %s",
		inventoryPath, len(items), len(live), total, strings.Join(diffs, "; "))
	if pendingResync {
		msg += " (a resync is pending)"
	}
	return errors.New(msg)
}

// WaitEqual waits until Equal(inventoryPath, live) is nil, re-checking
// after every event, and returns nil then; when ctx ends first it returns
// the last difference.
func (f *Fold) WaitEqual(ctx context.Context, inventoryPath string, live map[string]string) error {
	for {
		f.mu.Lock()
		err := f.equal(inventoryPath, live)
		changed := f.changed
		f.mu.Unlock()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up waiting: %w)", err, ctx.Err())
		case <-changed:
		}
	}
}
