package collect

import (
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// Quotas on items (DESIGN.md §10): the Targets of a namespace hold at most
// maxItems items together (the ClusterTargets, their ClusterScopes'), and
// no item is larger than maxItemBytes (tenancy.ItemSize).
//
// Which objects get the places is decided once: an object's item, once
// written, keeps its place for as long as the object matches. An object
// whose item would be new waits while the quota is full (no extraction, no
// write) and an object whose item would be too large is not written (its
// previous item, now stale, is deleted). Both are counted in
// status.collection.overQuotaCount and make the target Degraded,
// QuotaExceeded, with a message naming the limit; nothing is dropped
// silently. Waiting objects are tried again when an item of the namespace
// is deleted or a place taken is given back unwritten (as many as places
// freed; an object stops waiting once it holds a place), when the quota
// changes, and at every full walk: at the latest one resync period after
// room frees.
// Lowering a quota deletes nothing: items above it stay until their
// objects go.
//
// The counts live in the index (quotaUsage, per namespace), maintained as
// items are indexed and unindexed: the hot path never lists.

// quotaUsage is what the quota of one namespace (or of the cluster kinds)
// counts. Guarded by itemIndex.mu.
type quotaUsage struct {
	// items are the indexed items of the namespace's targets.
	items int64
	// pending are new items that took a place and are being written.
	pending int64
	// waiting are the objects of the namespace's targets waiting for a place.
	waiting int
}

// overQuota says why an object is not collected.
type overQuota uint8

const (
	// overCount: the namespace's items are at maxItems.
	overCount overQuota = iota + 1
	// overSize: the item would be larger than maxItemBytes.
	overSize
)

// itemQuotas reads a target's quotas from the Scopes of its namespace (the
// ClusterScopes for a ClusterTarget) and the server's defaults.
func (c *Collector) itemQuotas(key targetKey) tenancy.QuotaSet {
	if key.Cluster {
		list, _ := c.clusterScopeLister.List(labels.Everything())
		return tenancy.ClusterScopeQuotas(list, c.cfg.Quotas)
	}
	list, _ := c.scopeLister.Scopes(key.Namespace).List(labels.Everything())
	return tenancy.ScopeQuotas(key.Namespace, list, c.cfg.Quotas)
}

// setLimits says whether a target collects and gives it the quotas in
// force: when they changed while objects wait, those are tried again; a
// target that stops collecting stops waiting.
func (x *itemIndex) setLimits(key targetKey, collecting bool, q tenancy.QuotaSet) {
	x.mu.Lock()
	defer x.mu.Unlock()
	t := x.targetLocked(key)
	if t.collecting = collecting; !collecting {
		x.clearOverQuotaLocked(t)
	}
	changed := t.quota != q
	t.quota = q
	if changed && collecting {
		for objKey := range t.overQuota {
			x.requeue(t.key, objKey)
		}
	}
}

func (x *itemIndex) usageLocked(scope string) *quotaUsage {
	u := x.usage[scope]
	if u == nil {
		u = &quotaUsage{}
		x.usage[scope] = u
	}
	return u
}

// hasRoom tells whether t may add one item now.
func (x *itemIndex) hasRoom(t *indexed) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.hasRoomLocked(t)
}

func (x *itemIndex) hasRoomLocked(t *indexed) bool {
	u := x.usageLocked(t.key.ItemNamespace())
	return t.quota.Items.Allows(u.items + u.pending + 1)
}

// reserve takes a place for a new item of t: false when the quota is full.
// The object stops waiting as it takes the place, so that a place freed
// while it writes wakes another. A place taken is given back by
// commitLocked once the item is indexed, or by releaseLocked.
func (x *itemIndex) reserve(t *indexed, objKey string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if !x.hasRoomLocked(t) {
		return false
	}
	x.usageLocked(t.key.ItemNamespace()).pending++
	if x.setOverQuotaLocked(t, objKey, 0) {
		x.report(t.key)
	}
	return true
}

// commitLocked gives back a place reserve took once its item is indexed,
// and so counted.
func (x *itemIndex) commitLocked(t *indexed) {
	x.usageLocked(t.key.ItemNamespace()).pending--
}

// releaseLocked gives back a place reserve took for an item not written
// after all: the place is free again, for whoever waits. The object that
// took it retries on its own, competing with them.
func (x *itemIndex) releaseLocked(t *indexed) {
	scope := t.key.ItemNamespace()
	u := x.usageLocked(scope)
	u.pending--
	if u.waiting > 0 {
		x.wakeWaitingLocked(scope, u)
	}
}

// countItemLocked follows the index: delta items added (+) or removed (-).
// Removed items free places for waiting objects.
func (x *itemIndex) countItemLocked(t *indexed, delta int64) {
	if delta == 0 {
		return
	}
	scope := t.key.ItemNamespace()
	u := x.usageLocked(scope)
	u.items += delta
	if delta < 0 && u.waiting > 0 {
		x.wakeWaitingLocked(scope, u)
	}
}

// wakeWaitingLocked queues as many waiting objects of a namespace as it
// has free places (all of them when its quota is unlimited now). The
// targets of a namespace share its quota: the first one gives the limit.
func (x *itemIndex) wakeWaitingLocked(scope string, u *quotaUsage) {
	free, known := int64(0), false
	for _, t := range x.targets {
		if t.key.ItemNamespace() != scope || !t.collecting || len(t.overQuota) == 0 {
			continue
		}
		if !known {
			free, known = math.MaxInt64, true
			if t.quota.Items.Set {
				free = t.quota.Items.Limit - u.items - u.pending
			}
		}
		for objKey, why := range t.overQuota {
			if free <= 0 {
				return
			}
			if why == overCount {
				x.requeue(t.key, objKey)
				free--
			}
		}
	}
}

// setOverQuota records (why non-zero) or clears why an object of t is not
// collected, and reports a change.
func (x *itemIndex) setOverQuota(t *indexed, objKey string, why overQuota) {
	x.mu.Lock()
	changed := x.setOverQuotaLocked(t, objKey, why)
	x.mu.Unlock()
	if changed {
		x.report(t.key)
	}
}

func (x *itemIndex) setOverQuotaLocked(t *indexed, objKey string, why overQuota) bool {
	old, had := t.overQuota[objKey]
	if old == why || (!had && why == 0) {
		return false
	}
	u := x.usageLocked(t.key.ItemNamespace())
	if old == overCount {
		u.waiting--
	}
	if why == overCount {
		u.waiting++
	}
	if why == 0 {
		delete(t.overQuota, objKey)
	} else {
		t.overQuota[objKey] = why
	}
	return true
}

// clearOverQuotaLocked forgets every over-quota object of a target that
// stops collecting: it is no longer waiting for anything.
func (x *itemIndex) clearOverQuotaLocked(t *indexed) {
	for objKey := range t.overQuota {
		x.setOverQuotaLocked(t, objKey, 0)
	}
}

// quotaReportLocked is the count and message of a target's over-quota
// objects, for status.collection.
func (x *itemIndex) quotaReportLocked(t *indexed) (int64, string) {
	var count, size int64
	for _, why := range t.overQuota {
		if why == overCount {
			count++
		} else {
			size++
		}
	}
	if count+size == 0 {
		return 0, ""
	}
	var msg string
	if count > 0 {
		holders := fmt.Sprintf("the Targets of namespace %q", t.key.Namespace)
		if t.key.Cluster {
			holders = "the ClusterTargets"
		}
		msg = fmt.Sprintf("%s not collected: %s hold %d items and the limit is %d, the %s; they are collected as places free (items deleted, the limit raised)",
			objects(count), holders, x.usageLocked(t.key.ItemNamespace()).items, t.quota.Items.Limit, t.quota.Items.By)
	}
	if size > 0 {
		if msg != "" {
			msg += "; "
		}
		limit := resource.NewQuantity(t.quota.ItemBytes.Limit, resource.BinarySI)
		msg += fmt.Sprintf("%s not collected: each item would be larger than %s, the %s", objects(size), limit, t.quota.ItemBytes.By)
	}
	return count + size, msg
}

func objects(n int64) string {
	if n == 1 {
		return "1 matching object"
	}
	return fmt.Sprintf("%d matching objects", n)
}

// tooLarge tells whether an item's content is over the maxItemBytes of q.
func tooLarge(q tenancy.QuotaSet, attributes map[string]kollect.Value, object *kollect.Value) bool {
	return q.ItemBytes.Set && tenancy.ItemSize(attributes, object) > q.ItemBytes.Limit
}
