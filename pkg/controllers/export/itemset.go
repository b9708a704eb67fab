package export

import (
	"slices"
	"strings"
	"sync"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// itemSet is one inventory's live items as the exporters see them: the
// items of the targets it selects, keyed by sink.Item.Key(), with the
// checksum kept up to date on every change. Each exporter holds a
// subscription: the changes its sink is owed, recorded under the set's
// lock (mu guards items, checksum, subs and every subscription's owed and
// restate), so a run costs O(changes) and nothing an exporter has not
// delivered can be forgotten.
type itemSet struct {
	// applied reports the resourceVersion up to which every item event
	// has been applied to the item sets (the cursor a run may claim).
	applied func() string

	mu sync.Mutex
	// items are the informers' entries: the item, its key and its digest,
	// computed once per item version and shared by every set holding it.
	items    map[string]*exportedItem
	checksum sink.Checksum
	subs     map[*subscription]struct{}
}

func newItemSet(applied func() string) *itemSet {
	return &itemSet{applied: applied, items: map[string]*exportedItem{}, subs: map[*subscription]struct{}{}}
}

// material reports whether b differs from a in what sinks hold. A new
// UID is a new item even with the same content: a consumer must see the
// old one go and the new one come.
func material(a, b *sink.Item) bool {
	return a == nil || b == nil || a.Hash != b.Hash || a.UID != b.UID
}

// upsert adds or replaces an item and tells the subscribers when its
// content changed. A new resourceVersion with the same hash (a label edit)
// updates the item without waking anyone.
func (set *itemSet) upsert(e *exportedItem) {
	set.mu.Lock()
	defer set.mu.Unlock()
	old := set.items[e.key]
	set.items[e.key] = e
	if !material(old.itemOrNil(), e.item) {
		return
	}
	if old != nil {
		set.checksum.RemoveDigest(old.digest)
	}
	set.checksum.AddDigest(e.digest)
	set.notifyLocked(e.key, old.itemOrNil(), "")
}

// remove deletes an item; last is its final state (the delete event's
// object, whose resourceVersion is the deletion's), used for tombstones.
func (set *itemSet) remove(key string, last *sink.Item) {
	set.mu.Lock()
	defer set.mu.Unlock()
	old, ok := set.items[key]
	if !ok {
		return
	}
	delete(set.items, key)
	set.checksum.RemoveDigest(old.digest)
	gone := ""
	if last != nil && last.UID == old.item.UID {
		gone = last.ResourceVersion
	}
	set.notifyLocked(key, old.item, gone)
}

// replace makes the set hold exactly items (after the inventory's target
// selection changed) and notifies only the keys that changed. An item that
// leaves and comes back unchanged would be published again under the id
// of its first upsert, which receivers drop as a repeat: a selection change
// makes the subscribers restate the whole set instead (a resync or diff).
func (set *itemSet) replace(items map[string]*exportedItem) {
	set.mu.Lock()
	defer set.mu.Unlock()
	changed := false
	defer func() {
		if changed {
			for s := range set.subs {
				s.restate = true
				s.poke()
			}
		}
	}()
	if len(set.items) == 0 {
		// A first build: one allocation, not a map grown ten times over.
		set.items = make(map[string]*exportedItem, len(items))
	}
	for key, old := range set.items {
		if _, ok := items[key]; !ok {
			delete(set.items, key)
			set.checksum.RemoveDigest(old.digest)
			set.notifyLocked(key, old.item, "")
			changed = true
		}
	}
	for key, e := range items {
		old := set.items[key]
		set.items[key] = e
		if material(old.itemOrNil(), e.item) {
			if old != nil {
				set.checksum.RemoveDigest(old.digest)
			}
			set.checksum.AddDigest(e.digest)
			set.notifyLocked(key, old.itemOrNil(), "")
			changed = true
		}
	}
}

func (set *itemSet) notifyLocked(key string, before *sink.Item, gone string) {
	for s := range set.subs {
		s.oweLocked(key, before, gone)
	}
}

// owed is what a sink is owed for one key: the sink holds before (nil:
// nothing), and the set's current item (or its absence) is what it
// must come to hold.
type owed struct {
	before *sink.Item
	// gone is the resourceVersion of the deletion of before, when a delete
	// event said it: the tombstone's revision.
	gone string
}

// subscription is one exporter's account of what its sink is owed. It
// lives under the set's lock; the exporter takes a batch, delivers it,
// and gives it back when the delivery failed.
type subscription struct {
	set  *itemSet
	owed map[string]owed
	// restate: the sink must be brought to the whole live set, not sent
	// deltas (the selection changed).
	restate bool
	// wake is poked (never blocking) when something becomes owed.
	wake chan struct{}
}

func (set *itemSet) subscribe() *subscription {
	set.mu.Lock()
	defer set.mu.Unlock()
	s := &subscription{set: set, owed: map[string]owed{}, wake: make(chan struct{}, 1)}
	set.subs[s] = struct{}{}
	return s
}

func (s *subscription) close() {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	delete(s.set.subs, s)
}

// oweLocked records a change of key (set lock held). The first "before"
// since the sink last acknowledged the key is kept: it is what the sink holds.
func (s *subscription) oweLocked(key string, before *sink.Item, gone string) {
	o, ok := s.owed[key]
	if !ok {
		o.before = before
	}
	if gone != "" && o.before != nil && before.UID == o.before.UID {
		o.gone = gone
	}
	s.owed[key] = o
	s.poke()
}

// poke asks for a run; it never blocks.
func (s *subscription) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// summary is a consistent read of the set for a decision.
type summary struct {
	checksum string
	count    int
	owed     int
	restate  bool
}

func (s *subscription) peek() summary {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	return summary{checksum: s.set.checksum.String(), count: len(s.set.items), owed: len(s.owed), restate: s.restate}
}

// batch is what one run delivers: the changes owed when it was taken,
// computed against the set at that instant, and optionally the whole
// live set of that same instant.
type batch struct {
	// cursor: every item change up to this resourceVersion is in this
	// batch or was acknowledged before it.
	cursor   string
	checksum string
	count    int
	// changes, in key order: for each owed key a delete of what the sink
	// holds when that item is gone or was replaced (new UID), then an
	// upsert of the current item when the sink lacks it. Not built when
	// the live set is taken: a run given the live set restates it.
	changes []sink.Change
	// items is the live set in canonical order (ascending key), when
	// taken with full.
	items   []*sink.Item
	owed    map[string]owed
	restate bool
}

// take hands the owed changes to a run, or, with full, the live set (the
// owed changes stay in the batch, to be given back on failure).
func (s *subscription) take(full bool) *batch {
	s.set.mu.Lock()
	b := &batch{cursor: s.set.applied(), checksum: s.set.checksum.String(), count: len(s.set.items), owed: s.owed, restate: s.restate}
	s.owed, s.restate = map[string]owed{}, false
	// The map's keys are the items' keys: sorting by them spares building
	// a key string per comparison.
	var sorted []keyedItem
	if full {
		sorted = make([]keyedItem, 0, len(s.set.items))
		for key, e := range s.set.items {
			sorted = append(sorted, keyedItem{key, e.item})
		}
	} else {
		sorted = make([]keyedItem, 0, len(b.owed))
		for key := range b.owed {
			sorted = append(sorted, keyedItem{key, s.set.items[key].itemOrNil()})
		}
	}
	s.set.mu.Unlock()

	// Sorting and comparing happen outside the lock: items are immutable.
	slices.SortFunc(sorted, func(a, c keyedItem) int { return strings.Compare(a.key, c.key) })
	if full {
		b.items = make([]*sink.Item, len(sorted))
		for i, k := range sorted {
			b.items[i] = k.it
		}
		return b
	}
	for _, k := range sorted {
		b.changes = append(b.changes, owedChanges(b.owed[k.key], k.it)...)
	}
	return b
}

type keyedItem struct {
	key string
	it  *sink.Item
}

// owedChanges is what turns a sink holding o.before into one holding cur.
func owedChanges(o owed, cur *sink.Item) []sink.Change {
	var out []sink.Change
	if o.before != nil && (cur == nil || cur.UID != o.before.UID) {
		tomb := o.before
		if o.gone != "" {
			// The tombstone carries the deletion's resourceVersion: its
			// idempotency key differs from the last upsert's.
			cp := *o.before
			cp.ResourceVersion = o.gone
			tomb = &cp
		}
		out = append(out, sink.Change{Op: sink.Delete, Item: tomb})
	}
	if cur != nil && (o.before == nil || material(o.before, cur)) {
		out = append(out, sink.Change{Op: sink.Upsert, Item: cur})
	}
	return out
}

// giveBack returns a batch a run failed to deliver: its keys are owed
// again. For a key that changed meanwhile the batch's "before" wins (the
// sink may still hold it), with the deletion revision seen for it.
func (s *subscription) giveBack(b *batch) {
	s.set.mu.Lock()
	defer s.set.mu.Unlock()
	for key, o := range b.owed {
		if newer, ok := s.owed[key]; ok && o.gone == "" && newer.before != nil && o.before != nil && newer.before.UID == o.before.UID {
			o.gone = newer.gone
		}
		s.owed[key] = o
	}
	s.restate = s.restate || b.restate
	if len(b.owed) > 0 || b.restate {
		s.poke()
	}
}
