package collect

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/tenancy"
)

// itemIndex is the collector's record of what it stored, per target: each
// item's hash, labels and source object, which object holds which item,
// the writes in flight, the items another writer changed (foreign.go), the
// objects that fail to extract or wait for a place in the quota
// (quota.go), and the quota counts per namespace. A sync compares the
// cluster with it instead of reading storage; the full walk rebuilds it
// from storage. One mutex guards all of it: the quota of a namespace spans
// its targets.
type itemIndex struct {
	// requeue queues an object of a target again (a quota place freed);
	// report queues a target's status report.
	requeue func(key targetKey, objKey string)
	report  func(key targetKey)

	mu      sync.Mutex
	targets map[targetKey]*indexed
	// usage counts the items of each namespace ("" for the cluster kinds)
	// against its quota.
	usage map[string]*quotaUsage
}

// indexed is one target's part of the index. A pointer to it stays valid
// while the target exists: a write that finds it replaced (the target was
// deleted meanwhile) undoes itself.
type indexed struct {
	key      targetKey
	items    map[string]*itemEntry // item name → entry
	byObject map[string]string     // source namespace/name → item name
	// inflight are the item writes started and not yet in the index, and
	// suspect the items another writer changed, each with the object
	// whose sync repairs it (foreign.go).
	inflight map[string]*inflightWrite
	suspect  map[string]string
	// failed are the objects whose extraction fails (source
	// namespace/name → error), lastFailure the latest of those errors.
	failed      map[string]string
	lastFailure string
	// overQuota are the matching objects not collected because of the
	// quota (source namespace/name → why), and quota the limits in force.
	overQuota map[string]overQuota
	quota     tenancy.QuotaSet
	// collecting: the target has a spec; only then do objects wait.
	collecting bool
	lastChange time.Time
}

// itemEntry is the index's record of one stored item. It is kept small:
// there is one per item.
type itemEntry struct {
	objKey   string // namespace/name of the source object
	hash     itemHash
	labels   string // labelsKey of the item's labels, shared by the target's items
	sourceRV string
	// extractedWith is the configuration fingerprint the hash was computed
	// with; with an unchanged source resourceVersion it lets a walk skip
	// extraction. Empty when unknown (read back from storage).
	extractedWith string
	// rv is the item's resourceVersion when this collector last wrote or
	// read it: a watch event at or before it is not news (foreign.go).
	rv uint64
}

// itemHash is an item's content hash (extract.Hash) as bytes rather than
// 64 hex digits.
type itemHash [sha256.Size]byte

// hashOf parses a hash; one that does not parse (not written by this
// collector) is the zero hash, which no content has: the item is rewritten.
func hashOf(hexHash string) itemHash {
	var h itemHash
	if len(hexHash) != hex.EncodedLen(len(h)) {
		return itemHash{}
	}
	if _, err := hex.Decode(h[:], []byte(hexHash)); err != nil {
		return itemHash{}
	}
	return h
}

// entryOf turns a stored item into an index entry.
func entryOf(s storedItem) *itemEntry {
	return &itemEntry{objKey: s.objKey, hash: s.hash, labels: s.labels, sourceRV: s.sourceRV, rv: s.rv}
}

func newItemIndex(requeue func(targetKey, string), report func(targetKey)) *itemIndex {
	return &itemIndex{requeue: requeue, report: report, targets: map[targetKey]*indexed{}, usage: map[string]*quotaUsage{}}
}

// target is a target's part of the index, created empty when it has none.
func (x *itemIndex) target(key targetKey) *indexed {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.targetLocked(key)
}

// existing is the index of a target that has one, or nil: the target
// sync makes it (setLimits) and the target's end removes it, which a sync
// of one of its objects must not undo.
func (x *itemIndex) existing(key targetKey) *indexed {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.targets[key]
}

func (x *itemIndex) targetLocked(key targetKey) *indexed {
	t := x.targets[key]
	if t == nil {
		t = &indexed{key: key, items: map[string]*itemEntry{}, byObject: map[string]string{}, failed: map[string]string{},
			overQuota: map[string]overQuota{}, inflight: map[string]*inflightWrite{}, suspect: map[string]string{}}
		x.targets[key] = t
	}
	return t
}

// current tells whether t is still the index of its target.
func (x *itemIndex) currentLocked(t *indexed) bool { return x.targets[t.key] == t }

// held is what the index holds of an object of a target.
type held struct {
	// name and entry are its item's, when it has one (had).
	name  string
	entry itemEntry
	had   bool
	// suspects are the items whose repair is this object's sync, taken
	// from the index: restoreSuspects puts back those not repaired.
	suspects []string
	// quota are the target's limits in force.
	quota tenancy.QuotaSet
}

// lookup is what the index holds of an object of t.
func (x *itemIndex) lookup(t *indexed, objKey string) held {
	x.mu.Lock()
	defer x.mu.Unlock()
	h := held{quota: t.quota}
	if h.name, h.had = t.byObject[objKey]; h.had {
		h.entry = *t.items[h.name]
	}
	for item, o := range t.suspect {
		if o == objKey {
			h.suspects = append(h.suspects, item)
			delete(t.suspect, item)
		}
	}
	return h
}

func (x *itemIndex) restoreSuspects(t *indexed, names []string, objKey string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, name := range names {
		t.suspect[name] = objKey
	}
}

// entry is the index's entry of an item, nil when it has none.
func (x *itemIndex) entry(t *indexed, name string) *itemEntry {
	x.mu.Lock()
	defer x.mu.Unlock()
	return t.items[name]
}

// touch records that an unchanged item was extracted again, at a newer
// source resourceVersion or with a new configuration.
func (x *itemIndex) touch(t *indexed, name string, hash itemHash, sourceRV, extractedWith string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if cur := t.items[name]; cur != nil && cur.hash == hash {
		cur.sourceRV, cur.extractedWith = sourceRV, extractedWith
	}
}

// beginWrite records a write (or, deleted, a delete) in flight.
func (x *itemIndex) beginWrite(t *indexed, name string, w *inflightWrite) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t.inflight[name] = w
}

// endWrite records how an item write ended: the item indexed, its place
// in the quota committed (isNew), or given back when it failed. gone tells
// that the target was deleted while the item was written: the caller
// deletes it again.
func (x *itemIndex) endWrite(t *indexed, name string, e *itemEntry, isNew bool, err error) (gone bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(t.inflight, name)
	if err != nil {
		if isNew {
			x.releaseLocked(t)
		}
		return false
	}
	gone = !x.currentLocked(t)
	if !gone {
		x.indexLocked(t, name, e)
		x.setOverQuotaLocked(t, e.objKey, 0)
		t.lastChange = time.Now()
	}
	switch {
	case isNew && gone:
		x.releaseLocked(t)
	case isNew:
		x.commitLocked(t)
	}
	return gone
}

// endDelete records how an item's deletion ended.
func (x *itemIndex) endDelete(t *indexed, name string, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(t.inflight, name)
	if err == nil {
		x.unindexLocked(t, name)
	}
}

// unindexIf forgets an item the index still holds as e.
func (x *itemIndex) unindexIf(t *indexed, name string, e *itemEntry) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if t.items[name] == e {
		x.unindexLocked(t, name)
	}
}

// setFailure records (msg non-empty) or clears the extraction failure of
// an object, and tells whether that changed anything.
func (x *itemIndex) setFailure(t *indexed, objKey, msg string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if msg != "" {
		changed := t.failed[objKey] != msg
		t.failed[objKey], t.lastFailure = msg, msg
		return changed
	}
	if _, ok := t.failed[objKey]; !ok {
		return false
	}
	delete(t.failed, objKey)
	if len(t.failed) == 0 {
		t.lastFailure = ""
	}
	return true
}

// known lists the objects of t the index knows of (of one namespace, or
// all): those holding items, failing, waiting or suspect.
func (x *itemIndex) known(t *indexed, namespace string) []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	add := func(objKey string) {
		if namespace == "" || namespaceOf(objKey) == namespace {
			out = append(out, objKey)
		}
	}
	for objKey := range t.byObject {
		add(objKey)
	}
	for objKey := range t.failed {
		add(objKey)
	}
	for objKey := range t.overQuota {
		add(objKey)
	}
	for _, objKey := range t.suspect {
		add(objKey)
	}
	return out
}

// remove forgets a target that is gone and returns whether it held items.
func (x *itemIndex) remove(key targetKey) (hadItems bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.targets[key]
	if t == nil {
		return false
	}
	hadItems = len(t.items) > 0
	x.clearOverQuotaLocked(t)
	x.unindexAllLocked(t)
	delete(x.targets, key)
	return hadItems
}

// indexLocked records a stored item.
func (x *itemIndex) indexLocked(t *indexed, name string, e *itemEntry) {
	if _, ok := t.items[name]; !ok {
		metrics.Items.WithLabelValues(t.key.ItemKind()).Inc()
		x.countItemLocked(t, 1)
	}
	t.items[name] = e
	t.byObject[e.objKey] = name
}

// unindexLocked forgets a deleted item.
func (x *itemIndex) unindexLocked(t *indexed, name string) {
	if e, ok := t.items[name]; ok {
		delete(t.items, name)
		if t.byObject[e.objKey] == name {
			delete(t.byObject, e.objKey)
		}
		metrics.Items.WithLabelValues(t.key.ItemKind()).Dec()
		x.countItemLocked(t, -1)
		t.lastChange = time.Now()
	}
}

func (x *itemIndex) unindexAllLocked(t *indexed) {
	metrics.Items.WithLabelValues(t.key.ItemKind()).Add(-float64(len(t.items)))
	x.countItemLocked(t, -int64(len(t.items)))
	t.items, t.byObject = map[string]*itemEntry{}, map[string]string{}
}

// rebuild replaces the index of every target by what storage holds
// (stored, by target; a target storage holds nothing of gets an empty
// index), keeping what the old index knew about extraction where the item
// is the same. A target without an index gets one only when listed: one
// that ended since the caller read storage keeps none (its end deletes
// its items).
func (x *itemIndex) rebuild(stored map[targetKey][]storedItem, listed func(targetKey) bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for key, items := range stored {
		if x.targets[key] == nil && !listed(key) {
			continue
		}
		x.rebuildLocked(x.targetLocked(key), items)
	}
	for key, t := range x.targets {
		if _, ok := stored[key]; !ok {
			x.rebuildLocked(t, nil)
		}
	}
}

func (x *itemIndex) rebuildLocked(t *indexed, items []storedItem) {
	old, oldByObject := t.items, t.byObject
	x.unindexAllLocked(t)
	for _, s := range items {
		e := entryOf(s)
		if prev := old[s.name]; prev != nil && prev.hash == e.hash && prev.sourceRV == e.sourceRV {
			e.extractedWith = prev.extractedWith
		}
		x.indexLocked(t, s.name, e)
	}
	// Two items naming one object (another writer's, foreign.go): the one
	// the old index gave the object stays its item, the other is suspect,
	// and the object's sync deletes it.
	for name, e := range t.items {
		held := t.byObject[e.objKey]
		if held == name {
			continue
		}
		if oldByObject[e.objKey] == name {
			t.byObject[e.objKey], name = name, held
		}
		t.suspect[name] = e.objKey
	}
}

// keys lists the targets the index has.
func (x *itemIndex) keys() []targetKey {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Collect(maps.Keys(x.targets))
}

// counts is what status reports of the index of a target.
type counts struct {
	items, failed int64
	lastFailure   string
	// overQuota and quotaMessage say what the quota holds back.
	overQuota    int64
	quotaMessage string
	lastChange   time.Time
}

func (x *itemIndex) counts(key targetKey) counts {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.targets[key]
	if t == nil {
		return counts{}
	}
	n, msg := x.quotaReportLocked(t)
	return counts{items: int64(len(t.items)), failed: int64(len(t.failed)), lastFailure: t.lastFailure,
		overQuota: n, quotaMessage: msg, lastChange: t.lastChange}
}
