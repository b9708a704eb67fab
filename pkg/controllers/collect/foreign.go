package collect

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/itemstore"
)

// Items are the collector's to write while its replica leads, and its
// index of them (target → item → hash) is what it compares the cluster
// with. Another writer breaks that: a former leader, paused in the middle
// of its writes, that resumes after this replica took over stores an
// item's older content, deletes an item, or creates one for an object that
// is gone, and nothing in the cluster changes to make this collector look
// again before its next full walk. So the collector watches the stored
// items. A change it did not make marks the item suspect and queues the
// object the index gives it (for an item the index does not hold, the
// object the item claims). That object's sync reads the suspect items
// from storage: it writes again the object's own item when storage does
// not hold what the index says, and deletes the others, which no object
// holds. The watch never changes the index itself, so an item keeps its
// place in the quota while it is being repaired and the index is only
// written by the object's sync, one at a time.
//
// The collector's own writes come back too: an event matching the write
// in flight (inflight), or at or before the resourceVersion the index
// holds, is not news.

// storedPositions is where each item kind's storage is now: the watches
// start there, before the first full walk reads the items, so that no
// write falls between the two. It retries until ctx ends.
func (c *Collector) storedPositions(ctx context.Context) (items, clusterItems uint64, err error) {
	err = wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if items, err = c.itemStore.position(ctx); err == nil {
			clusterItems, err = c.clusterItemStore.position(ctx)
		}
		if err != nil {
			klog.FromContext(ctx).Error(err, "Reading the stored items' resourceVersion failed; retrying")
			return false, nil
		}
		return true, nil
	})
	return items, clusterItems, err
}

// watchItems follows one item kind's changes from resourceVersion rv until
// ctx ends. When the position is lost (compacted), it starts again from
// now and asks for a full walk, which reads what it missed from storage.
func (c *Collector) watchItems(ctx context.Context, store itemStore, cluster bool, rv uint64) {
	logger := klog.FromContext(ctx).WithValues("kind", store.kind())
	for ctx.Err() == nil {
		if rv == 0 {
			var err error
			if rv, err = store.position(ctx); err != nil {
				if ctx.Err() == nil {
					logger.Error(err, "Reading the stored items' resourceVersion failed; retrying")
					select {
					case <-ctx.Done():
					case <-time.After(time.Second):
					}
				}
				continue
			}
			c.requestWalk()
		}
		rv = c.itemEvents(ctx, store.watch(ctx, rv), cluster, rv)
	}
}

// itemEvents handles one watch's events and returns the position it
// reached, 0 when the watch ended because that position expired.
func (c *Collector) itemEvents(ctx context.Context, events <-chan itemstore.Event, cluster bool, rv uint64) uint64 {
	for ev := range events {
		switch ev.Type {
		case watch.Error:
			if apierrors.IsResourceExpired(ev.Err) || apierrors.IsGone(ev.Err) {
				return 0
			}
			if ctx.Err() == nil {
				klog.FromContext(ctx).V(2).Info("The stored items' watch ended; watching again", "err", ev.Err)
				select {
				case <-ctx.Done():
				case <-time.After(time.Second):
				}
			}
			return rv
		case watch.Bookmark:
			rv = uint64(ev.Revision)
		case watch.Added, watch.Modified, watch.Deleted:
			rv = uint64(ev.Revision)
			if ev.Own {
				continue // this collector's own write, by its revision
			}
			s := storedOf(ev.Item)
			s.rv = rv
			c.itemChanged(ctx, cluster, ev.Type == watch.Deleted, s)
		}
	}
	return rv
}

// itemChanged compares a stored item's change with what the collector
// wrote or is writing and, when it did not make it, marks the item
// suspect and queues the object concerned.
func (c *Collector) itemChanged(ctx context.Context, cluster, deleted bool, s storedItem) {
	v := c.index.changed(cluster, deleted, s, c.existingTarget)
	if v.syncOwner {
		c.targetQueue.Add(v.owner)
	}
	switch {
	case !v.found:
		if !deleted {
			c.deleteOrphan(ctx, cluster, s)
		}
		return
	case v.objKey == "":
		return
	}
	klog.FromContext(ctx).V(2).Info("A stored item changed without this collector; syncing its object again",
		"target", v.owner.String(), "item", s.name, "resourceVersion", s.rv, "deleted", deleted, "object", v.objKey)
	if v.collecting {
		// Otherwise the walk when the target collects again syncs it.
		c.queueObject(v.owner, v.objKey)
	}
}

// verdict is what the index makes of a stored item's change.
type verdict struct {
	// found: the item's target is known or exists; owner is it, and
	// syncOwner says it exists but was not seen yet: its sync finds the
	// item.
	found, syncOwner bool
	owner            targetKey
	// objKey is the object whose sync repairs the item, "" when the change
	// is the collector's own; collecting tells whether its target collects.
	objKey     string
	collecting bool
}

// changed marks an item another writer changed suspect, with the object
// whose sync repairs it. exists finds a target the index does not know by
// its items' label.
func (x *itemIndex) changed(cluster, deleted bool, s storedItem, exists func(cluster bool, namespace, label string) (targetKey, bool)) verdict {
	x.mu.Lock()
	defer x.mu.Unlock()
	t, syncOwner := x.ownerLocked(cluster, s, exists)
	if t == nil {
		return verdict{}
	}
	v := verdict{found: true, syncOwner: syncOwner, owner: t.key, collecting: t.collecting}
	e, w := t.items[s.name], t.inflight[s.name]
	switch {
	case e != nil && s.rv <= e.rv:
		// An older event of the collector's own writes.
	case w != nil && w.matches(deleted, s):
	case w != nil:
		v.objKey = w.objKey
	case e != nil && !deleted && e.hash == s.hash && e.objKey == s.objKey && e.labels == s.labels:
	case e != nil:
		v.objKey = e.objKey
	case !deleted:
		v.objKey = s.objKey // an item no object holds
	}
	if v.objKey != "" {
		t.suspect[s.name] = v.objKey
	}
	return v
}

// ownerLocked is the target an item's change concerns: the one whose index
// holds the item or which is writing it, else the one its label names. A
// target that exists but was not seen yet gets its index (and a sync:
// sync), so that what it finds then includes the item. Nil: the item's
// target does not exist, or is being deleted and its items were deleted.
func (x *itemIndex) ownerLocked(cluster bool, s storedItem, exists func(cluster bool, namespace, label string) (targetKey, bool)) (t *indexed, sync bool) {
	t = x.targetOfLocked(cluster, s.namespace, s.target)
	if t != nil && (t.items[s.name] != nil || t.inflight[s.name] != nil) {
		return t, false
	}
	// Relabelled by hand: the index knows whose it is.
	for key, o := range x.targets {
		if key.Cluster == cluster && key.Namespace == s.namespace && (o.items[s.name] != nil || o.inflight[s.name] != nil) {
			return o, false
		}
	}
	if t != nil {
		return t, false
	}
	key, ok := exists(cluster, s.namespace, s.target)
	if !ok {
		return nil, false
	}
	return x.targetLocked(key), true
}

// existingTarget finds the Target (ClusterTarget) whose items carry the
// kollect.dev/target label value label, false when there is none or it is
// being deleted.
func (c *Collector) existingTarget(cluster bool, namespace, label string) (targetKey, bool) {
	var objs []metav1.Object
	if cluster {
		if ct, err := c.clusterTargetLister.Get(label); err == nil {
			objs = append(objs, ct)
		} else if list, err := c.clusterTargetLister.List(labels.Everything()); err == nil {
			for _, ct := range list {
				objs = append(objs, ct)
			}
		}
	} else {
		if tg, err := c.targetLister.Targets(namespace).Get(label); err == nil {
			objs = append(objs, tg)
		} else if list, err := c.targetLister.Targets(namespace).List(labels.Everything()); err == nil {
			for _, tg := range list {
				objs = append(objs, tg)
			}
		}
	}
	for _, o := range objs {
		if labelValue(o.GetName()) == label && o.GetDeletionTimestamp() == nil {
			return targetKey{Cluster: cluster, Namespace: namespace, Name: o.GetName()}, true
		}
	}
	return targetKey{}, false
}

// deleteOrphan deletes an item written for a target that does not exist
// (by a former leader, after the target and its items were deleted). Only
// a collector that saw the target writes its items, and this one's
// informers are synced: were the target new, the walk that follows its
// sync writes its items again.
func (c *Collector) deleteOrphan(ctx context.Context, cluster bool, s storedItem) {
	logger := klog.FromContext(ctx)
	if !c.holding() {
		return // another replica may lead: its collector sees the item too
	}
	store := c.storeFor(targetKey{Cluster: cluster})
	if err := store.delete(ctx, s.namespace, s.name); err != nil {
		logger.Error(err, "Deleting an item of a target that does not exist failed; a full walk will", "item", s.name, "target", s.target)
		c.requestWalk()
		return
	}
	countWrite(store.kind(), metrics.OpDelete)
	logger.V(2).Info("Deleted an item of a target that does not exist", "namespace", s.namespace, "item", s.name, "target", s.target)
}

// inflightWrite is an item write (or delete) the collector has started and
// not yet recorded in its index.
type inflightWrite struct {
	objKey  string
	hash    itemHash
	labels  string
	deleted bool
}

// matches tells whether a stored change is this write's.
func (w *inflightWrite) matches(deleted bool, s storedItem) bool {
	if deleted || w.deleted {
		return deleted == w.deleted
	}
	return w.hash == s.hash && w.objKey == s.objKey && w.labels == s.labels
}

// targetOfLocked finds the target whose items carry the kollect.dev/target
// label value label. Names longer than a label value are shortened
// (labelValue), and only those need a search.
func (x *itemIndex) targetOfLocked(cluster bool, namespace, label string) *indexed {
	if t := x.targets[targetKey{Cluster: cluster, Namespace: namespace, Name: label}]; t != nil {
		return t
	}
	if len(label) < 17 || label[len(label)-17] != '-' {
		return nil
	}
	for key, t := range x.targets {
		if key.Cluster == cluster && key.Namespace == namespace && len(key.Name) > len(label) && labelValue(key.Name) == label {
			return t
		}
	}
	return nil
}
