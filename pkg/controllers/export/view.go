package export

import (
	"slices"
	"strings"
	"sync"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// view is one inventory's item set as the exporters see it: the items of
// the targets it selects, keyed by sink.Item.Key(), with the checksum kept
// up to date on every change. Each exporter holds a subscription: the
// changes its sink is owed, recorded under the view's lock, so a run costs
// O(changes) and nothing an exporter has not delivered can be forgotten.
type view struct {
	// applied reports the resourceVersion up to which every item event
	// has been applied to the views (the cursor a run may claim).
	applied func() string

	mu sync.Mutex
	// items are the informers' entries: the item, its key and its digest,
	// computed once per item version and shared by every view holding it.
	items    map[string]*exportedItem
	checksum sink.Checksum
	subs     map[*subscription]struct{}
}

func newView(applied func() string) *view {
	return &view{applied: applied, items: map[string]*exportedItem{}, subs: map[*subscription]struct{}{}}
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
func (v *view) upsert(e *exportedItem) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.items[e.key]
	v.items[e.key] = e
	if !material(old.itemOrNil(), e.item) {
		return
	}
	if old != nil {
		v.checksum.RemoveDigest(old.digest)
	}
	v.checksum.AddDigest(e.digest)
	v.notifyLocked(e.key, old.itemOrNil(), "")
}

// remove deletes an item; last is its final state (the delete event's
// object, whose resourceVersion is the deletion's), used for tombstones.
func (v *view) remove(key string, last *sink.Item) {
	v.mu.Lock()
	defer v.mu.Unlock()
	old, ok := v.items[key]
	if !ok {
		return
	}
	delete(v.items, key)
	v.checksum.RemoveDigest(old.digest)
	gone := ""
	if last != nil && last.UID == old.item.UID {
		gone = last.ResourceVersion
	}
	v.notifyLocked(key, old.item, gone)
}

// replace makes the view hold exactly items (after the inventory's target
// selection changed) and notifies only the keys that changed. An item that
// leaves and comes back unchanged would be published again under the id
// of its first upsert, which receivers drop as a repeat: a selection change
// makes the subscribers restate the whole set instead (a resync or diff).
func (v *view) replace(items map[string]*exportedItem) {
	v.mu.Lock()
	defer v.mu.Unlock()
	changed := false
	defer func() {
		if changed {
			for s := range v.subs {
				s.restate = true
				s.poke()
			}
		}
	}()
	if len(v.items) == 0 {
		// A first build: one allocation, not a map grown ten times over.
		v.items = make(map[string]*exportedItem, len(items))
	}
	for key, old := range v.items {
		if _, ok := items[key]; !ok {
			delete(v.items, key)
			v.checksum.RemoveDigest(old.digest)
			v.notifyLocked(key, old.item, "")
			changed = true
		}
	}
	for key, e := range items {
		old := v.items[key]
		v.items[key] = e
		if material(old.itemOrNil(), e.item) {
			if old != nil {
				v.checksum.RemoveDigest(old.digest)
			}
			v.checksum.AddDigest(e.digest)
			v.notifyLocked(key, old.itemOrNil(), "")
			changed = true
		}
	}
}

func (v *view) notifyLocked(key string, before *sink.Item, gone string) {
	for s := range v.subs {
		s.oweLocked(key, before, gone)
	}
}

// owed is what a sink is owed for one key: the sink holds before (nil:
// nothing), and the view's current item (or its absence) is what it
// must come to hold.
type owed struct {
	before *sink.Item
	// gone is the resourceVersion of the deletion of before, when a delete
	// event said it: the tombstone's revision.
	gone string
}

// subscription is one exporter's account of what its sink is owed. It
// lives under the view's lock; the exporter takes a batch, delivers it,
// and gives it back when the delivery failed.
type subscription struct {
	v    *view
	owed map[string]owed
	// restate: the sink must be brought to the whole live set, not sent
	// deltas (the selection changed).
	restate bool
	// wake is poked (never blocking) when something becomes owed.
	wake chan struct{}
}

func (v *view) subscribe() *subscription {
	v.mu.Lock()
	defer v.mu.Unlock()
	s := &subscription{v: v, owed: map[string]owed{}, wake: make(chan struct{}, 1)}
	v.subs[s] = struct{}{}
	return s
}

func (s *subscription) close() {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	delete(s.v.subs, s)
}

// oweLocked records a change of key (view lock held). The first "before"
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

// summary is a consistent read of the view for a decision.
type summary struct {
	checksum string
	count    int
	owed     int
	restate  bool
}

func (s *subscription) peek() summary {
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
	return summary{checksum: s.v.checksum.String(), count: len(s.v.items), owed: len(s.owed), restate: s.restate}
}

// batch is what one run delivers: the changes owed when it was taken,
// computed against the view at that instant, and optionally the whole
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
	s.v.mu.Lock()
	b := &batch{cursor: s.v.applied(), checksum: s.v.checksum.String(), count: len(s.v.items), owed: s.owed, restate: s.restate}
	s.owed, s.restate = map[string]owed{}, false
	// The map's keys are the items' keys: sorting by them spares building
	// a key string per comparison.
	var sorted []keyedItem
	if full {
		sorted = make([]keyedItem, 0, len(s.v.items))
		for key, e := range s.v.items {
			sorted = append(sorted, keyedItem{key, e.item})
		}
	} else {
		sorted = make([]keyedItem, 0, len(b.owed))
		for key := range b.owed {
			sorted = append(sorted, keyedItem{key, s.v.items[key].itemOrNil()})
		}
	}
	s.v.mu.Unlock()

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
	s.v.mu.Lock()
	defer s.v.mu.Unlock()
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
