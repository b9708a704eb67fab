package collect

import (
	"context"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Items are the collector's to write while its replica leads, and its
// index of them (target → item → hash) is what it compares the cluster
// with. Another writer breaks that: a former leader, paused in the middle
// of its writes, that resumes after this replica took over stores an
// item's older content, deletes an item, or creates one for an object that
// is gone, and nothing in the cluster changes to make this collector look
// again before its next full walk. So the collector watches the stored
// items. A change it did not make (after the resourceVersion the index
// holds for the item, and not what the index says) replaces the index's
// record with what is stored and queues the item's source: that object's
// sync then writes, or deletes, what the item should be.
//
// The collector's own writes come back too. They are at or before the
// index's resourceVersion, unless the event overtakes the write's return;
// then the source's sync runs once more and finds nothing to do.

// storedPositions is where each item kind's storage is now: the watches
// start there, before the first full walk reads the items, so that no
// write falls between the two. It retries until ctx ends.
func (c *Collector) storedPositions(ctx context.Context) (items, clusterItems string, err error) {
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
// ctx ends. When the position is lost (expired), it starts again from now
// and asks for a full walk, which reads what it missed from storage.
func (c *Collector) watchItems(ctx context.Context, store itemStore, cluster bool, rv string) {
	logger := klog.FromContext(ctx).WithValues("kind", store.kind())
	retry := func(err error, msg string) {
		if ctx.Err() == nil {
			logger.Error(err, msg)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = store.position(ctx); err != nil {
				retry(err, "Reading the stored items' resourceVersion failed; retrying")
				continue
			}
			c.requestWalk()
		}
		w, err := store.watch(ctx, rv)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			retry(err, "Watching the stored items failed; retrying")
			continue
		}
		rv = c.itemEvents(ctx, w, store, cluster, rv)
	}
}

// itemEvents handles one watch's events and returns the position it
// reached, "" when the watch ended because that position expired.
func (c *Collector) itemEvents(ctx context.Context, w watch.Interface, store itemStore, cluster bool, rv string) string {
	defer w.Stop()
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv
		}
		switch ev.Type {
		case watch.Error:
			err := apierrors.FromObject(ev.Object)
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return ""
			}
			klog.FromContext(ctx).V(2).Info("The stored items' watch ended; watching again", "kind", store.kind(), "err", err)
			return rv
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil && m.GetResourceVersion() != "" {
				rv = m.GetResourceVersion()
			}
		case watch.Added, watch.Modified, watch.Deleted:
			if s, ok := store.stored(ev.Object); ok {
				rv = strconv.FormatUint(s.rv, 10)
				c.itemChanged(ctx, cluster, ev.Type == watch.Deleted, s)
			}
		}
	}
}

// itemChanged compares a stored item's change with the index and, when the
// collector did not make it, records what is stored and queues the
// sources concerned.
func (c *Collector) itemChanged(ctx context.Context, cluster, deleted bool, s storedItem) {
	c.mu.Lock()
	t := c.targetOfLocked(cluster, s.namespace, s.target)
	if t == nil || t.cfg == nil {
		// No target collects it now: a full walk deletes the items of
		// targets that are gone, and one runs when a target resumes.
		c.mu.Unlock()
		return
	}
	e := t.items[s.name]
	if e != nil && s.rv <= e.rv {
		c.mu.Unlock()
		return
	}
	var sources []string
	switch {
	case deleted && e == nil:
	case deleted:
		c.unindexLocked(t, s.name)
		sources = append(sources, e.objKey)
	case e != nil && e.hash == s.hash && e.objKey == s.objKey && e.labels == s.labels:
		e.rv = s.rv
	default:
		if e != nil && e.objKey != s.objKey {
			// The item claims another source: both are looked at again.
			if t.byObject[e.objKey] == s.name {
				delete(t.byObject, e.objKey)
			}
			sources = append(sources, e.objKey)
		}
		c.indexLocked(t, s.name, entryOf(s))
		sources = append(sources, s.objKey)
	}
	key := t.key
	c.mu.Unlock()
	if len(sources) == 0 {
		return
	}
	klog.FromContext(ctx).V(2).Info("A stored item changed without this collector; syncing its source again",
		"target", key.String(), "item", s.name, "resourceVersion", s.rv, "deleted", deleted)
	for _, objKey := range sources {
		ns, name, _ := cache.SplitMetaNamespaceKey(objKey)
		c.objectQueue.Add(objectKey{target: key, namespace: ns, name: name}.queued())
	}
	if deleted {
		c.statusQueue.AddAfter(key, statusDelay)
	}
}

// targetOfLocked finds the target whose items carry the kollect.dev/target
// label value label. Names longer than a label value are shortened
// (labelValue), and only those need a search.
func (c *Collector) targetOfLocked(cluster bool, namespace, label string) *target {
	if t := c.state[targetKey{Cluster: cluster, Namespace: namespace, Name: label}]; t != nil {
		return t
	}
	if len(label) < 17 || label[len(label)-17] != '-' {
		return nil
	}
	for key, t := range c.state {
		if key.Cluster == cluster && key.Namespace == namespace && len(key.Name) > len(label) && labelValue(key.Name) == label {
			return t
		}
	}
	return nil
}

// requestWalk asks for a full walk soon; requests while one is pending
// are one.
func (c *Collector) requestWalk() {
	select {
	case c.walkRequests <- struct{}{}:
	default:
	}
}
