package collect

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
)

// walk compares a target's objects (all, or one namespace's) with its
// index and queues every object that may differ: those it collects, and
// those the index knows of.
func (c *Collector) walk(key targetKey, namespace string) {
	spec, inf := c.targets.spec(key), c.informers.of(key)
	if spec == nil || inf == nil || !inf.synced.Load() {
		return
	}
	indexer := inf.informer.GetIndexer()
	var objs []any
	switch {
	case namespace != "":
		objs, _ = indexer.ByIndex(cache.NamespaceIndex, namespace)
	case spec.namespaced && !key.Cluster:
		objs, _ = indexer.ByIndex(cache.NamespaceIndex, key.Namespace)
	default:
		objs = indexer.List()
	}
	for _, o := range objs {
		if obj, ok := o.(*source.Object); ok && c.matches(key, spec, obj) {
			c.objectQueue.Add(objectKey{target: key, namespace: obj.Namespace(), name: obj.Name()}.queued())
		}
	}
	// The queue de-duplicates: objects both matched and indexed run once.
	for _, objKey := range c.index.known(c.index.target(key), namespace) {
		c.queueObject(key, objKey)
	}
}

// resyncLoop runs the full walk every resync period, or sooner when a
// watch of the stored items lost its place. The walk at start runs in Run.
func (c *Collector) resyncLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait.Jitter(c.cfg.ResyncPeriod, 0.1)):
		case <-c.walkRequests:
		}
		if err := c.resync(ctx); err != nil && ctx.Err() == nil {
			klog.FromContext(ctx).Error(err, "Full walk failed")
		}
	}
}

// requestWalk asks for a full walk soon; requests while one is pending
// are one.
func (c *Collector) requestWalk() {
	select {
	case c.walkRequests <- struct{}{}:
	default:
	}
}

// resync is the full walk: it reads every stored item, rebuilds the index
// from storage (the source of truth, whoever wrote last), deletes the items
// of targets that no longer exist, and walks every target.
func (c *Collector) resync(ctx context.Context) error {
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	start := time.Now()

	// Read what storage holds, by the target its label names.
	stored := map[targetKey][]storedItem{}
	byLabel := func(cluster bool) func(storedItem) {
		return func(s storedItem) {
			key := targetKey{Cluster: cluster, Namespace: s.namespace, Name: s.target}
			stored[key] = append(stored[key], s)
		}
	}
	if err := c.itemStore.list(ctx, "", labels.Everything(), byLabel(false)); err != nil {
		return err
	}
	if err := c.clusterItemStore.list(ctx, "", labels.Everything(), byLabel(true)); err != nil {
		return err
	}

	// Map label values back to targets, read after the items so that
	// every item written for a target finds it: the targets that exist, and
	// those the index knows.
	existing := map[targetKey]targetKey{}
	var all []targetKey
	if ts, err := c.targetLister.List(labels.Everything()); err == nil {
		for _, t := range ts {
			all = append(all, targetKey{Namespace: t.Namespace, Name: t.Name})
		}
	}
	if cts, err := c.clusterTargetLister.List(labels.Everything()); err == nil {
		for _, t := range cts {
			all = append(all, targetKey{Cluster: true, Name: t.Name})
		}
	}
	known := c.index.keys()
	for _, key := range append(all, known...) {
		existing[targetKey{Cluster: key.Cluster, Namespace: key.Namespace, Name: labelValue(key.Name)}] = key
	}
	byTarget := map[targetKey][]storedItem{}
	var orphans, clusterOrphans []storedItem
	for labelKey, items := range stored {
		key, ok := existing[labelKey]
		switch {
		case ok:
			byTarget[key] = items
		case labelKey.Cluster:
			clusterOrphans = append(clusterOrphans, items...)
		default:
			orphans = append(orphans, items...)
		}
	}

	// Rebuild the index from it; every target walks again at its next sync.
	c.index.rebuild(byTarget)
	c.targets.requestWalks()

	if len(orphans)+len(clusterOrphans) > 0 {
		klog.FromContext(ctx).Info("Deleting items of targets that no longer exist", "items", len(orphans)+len(clusterOrphans))
		if err := c.deleteItems(ctx, c.itemStore, orphans); err != nil {
			return err
		}
		if err := c.deleteItems(ctx, c.clusterItemStore, clusterOrphans); err != nil {
			return err
		}
	}
	for _, key := range all {
		c.targetQueue.Add(key)
	}
	metrics.FullWalkDuration.Observe(time.Since(start).Seconds())
	return nil
}
