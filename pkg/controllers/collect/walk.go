package collect

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
)

// walk compares a target's objects (all, or one namespace's) with its
// index: every object it collects, and every object the index knows of,
// is synced. The objects are handed to the object queue a few at a time
// (walkFeeder), so that a walk of a million objects holds a list of them,
// not a million keys in the queue.
func (c *Collector) walk(key targetKey, namespace string) {
	spec, inf := c.targets.spec(key), c.informers.of(key)
	if spec == nil || inf == nil || !inf.synced.Load() {
		return
	}
	full := namespace == ""
	if full && spec.namespaced && !key.Cluster {
		namespace = key.Namespace
	}
	t := c.index.existing(key)
	if t == nil {
		return // ended meanwhile
	}
	run := &walkRun{key: key, namespace: namespace, full: full}
	for _, o := range inf.objectsIn(namespace) {
		if obj, ok := o.(*source.Object); ok && c.matches(key, spec, obj) {
			run.objects = append(run.objects, obj)
		}
	}
	run.known = c.index.known(t, namespace)
	c.walks.start(run)
	c.walks.feed()
}

// walkFeeder hands the objects of the running walks to the object queue,
// keeping it at most a few times the workers long: each object a worker
// finishes makes room for the next. Events still go to the queue at once.
type walkFeeder struct {
	queue workqueue.TypedRateLimitingInterface[queuedObject]
	// limit is the queue length up to which walks add to it.
	limit int

	mu   sync.Mutex
	runs []*walkRun
	// turn is the walk that adds the next key: walks take turns, across
	// feeds too, so that a long one does not hold back the others.
	turn int
	// running tells, without the lock, whether any walk runs.
	running atomic.Bool
}

// walkRun is one walk: the objects it syncs, then those the index knew.
type walkRun struct {
	key       targetKey
	namespace string
	// full: the walk of all the target's objects, which replaces any other.
	full    bool
	objects []*source.Object
	known   []string
	next    int
}

func newWalkFeeder(queue workqueue.TypedRateLimitingInterface[queuedObject], workers int) *walkFeeder {
	return &walkFeeder{queue: queue, limit: 4 * workers}
}

// start adds a walk; a full walk of a target replaces its other walks, a
// walk of a namespace the one of the same namespace.
func (f *walkFeeder) start(run *walkRun) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = slices.DeleteFunc(f.runs, func(r *walkRun) bool {
		return r.key == run.key && (run.full || r.namespace == run.namespace && !r.full)
	})
	f.runs = append(f.runs, run)
	f.running.Store(true)
}

// stop ends the walks of a target.
func (f *walkFeeder) stop(key targetKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs = slices.DeleteFunc(f.runs, func(r *walkRun) bool { return r.key == key })
	f.running.Store(len(f.runs) > 0)
}

// feed queues the next objects of the walks, one walk after the other,
// while the queue has room.
func (f *walkFeeder) feed() {
	if !f.running.Load() {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.runs) > 0 && f.queue.Len() < f.limit {
		f.turn %= len(f.runs)
		r := f.runs[f.turn]
		if r.done() {
			f.runs = slices.Delete(f.runs, f.turn, f.turn+1)
			continue
		}
		f.queue.Add(r.nextKey().queued())
		f.turn++
	}
	f.runs = slices.DeleteFunc(f.runs, func(r *walkRun) bool { return r.done() })
	f.running.Store(len(f.runs) > 0)
}

// nextKey is the next object the walk syncs; the walk is not done.
func (r *walkRun) nextKey() objectKey {
	i := r.next
	r.next++
	if i < len(r.objects) {
		obj := r.objects[i]
		r.objects[i] = nil // synced once fed: its cache may let it go
		return objectKey{target: r.key, namespace: obj.Namespace(), name: obj.Name()}
	}
	ns, name, _ := cache.SplitMetaNamespaceKey(r.known[i-len(r.objects)])
	return objectKey{target: r.key, namespace: ns, name: name}
}

func (r *walkRun) done() bool { return r.next >= len(r.objects)+len(r.known) }

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
	listed := map[targetKey]bool{}
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
	for _, key := range all {
		listed[key] = true
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
	c.index.rebuild(byTarget, func(key targetKey) bool { return listed[key] })
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
