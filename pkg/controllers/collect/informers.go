package collect

import (
	"context"
	"maps"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
)

// gvrInformer is the one dynamic informer of a resource, shared by every
// target collecting it. Its users and shape are guarded by Collector.mu.
type gvrInformer struct {
	gvr      schema.GroupVersionResource
	label    string // "group/version/resource" for metrics
	shape    source.Shape
	users    map[targetKey]source.Shape
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc

	synced atomic.Bool
	// listErr is the last list or watch error before the first sync.
	listErr atomic.Pointer[string]
	// gone is set when the resource stopped being served (its CRD was
	// deleted): the users resolve their kind again.
	gone atomic.Bool
}

// useInformer makes key a user of gvr with the given needs and returns the
// informer, starting it, or restarting it when its shape must change. The
// caller holds c.mu.
func (c *Collector) useInformerLocked(t *target, gvr schema.GroupVersionResource, need source.Shape) *gvrInformer {
	if t.informer != nil && t.informer.gvr != gvr {
		c.releaseInformerLocked(t)
	}
	e := c.informers[gvr]
	if e == nil {
		e = &gvrInformer{gvr: gvr, users: map[targetKey]source.Shape{}}
	} else if e.users[t.key] == need && t.informer == e {
		return e
	}
	e.users[t.key] = need
	if shape := source.Combine(e.users); e.informer == nil || shape != e.shape {
		e = c.restartInformerLocked(e, shape)
	}
	t.informer = e
	return e
}

// releaseInformerLocked removes a target from its informer, stopping the
// informer when it was the last user and narrowing it when that helps.
func (c *Collector) releaseInformerLocked(t *target) {
	e := t.informer
	if e == nil {
		return
	}
	t.informer = nil
	delete(e.users, t.key)
	if len(e.users) == 0 {
		c.stopInformerLocked(e)
		delete(c.informers, e.gvr)
		return
	}
	if shape := source.Combine(e.users); shape != e.shape {
		c.restartInformerLocked(e, shape)
	}
}

// restartInformerLocked replaces an informer by one of another shape (or
// starts the first one) and points every user at it. Users walk again once
// it has synced.
func (c *Collector) restartInformerLocked(old *gvrInformer, shape source.Shape) *gvrInformer {
	if old.informer != nil {
		c.stopInformerLocked(old)
	}
	e := &gvrInformer{gvr: old.gvr, label: old.gvr.Group + "/" + old.gvr.Version + "/" + old.gvr.Resource, shape: shape, users: maps.Clone(old.users)}
	c.informers[e.gvr] = e
	for key := range e.users {
		if u := c.state[key]; u != nil {
			u.informer = e
		}
	}
	c.startInformerLocked(e)
	return e
}

func (c *Collector) stopInformerLocked(e *gvrInformer) {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
		metrics.Informers.Dec()
	}
}

func (c *Collector) startInformerLocked(e *gvrInformer) {
	ctx, cancel := context.WithCancel(c.runCtx)
	e.cancel = cancel
	inf := cache.NewSharedIndexInformer(source.NewListWatch(c.hostJSON, e.gvr, e.shape), &source.Object{}, 0,
		cache.Indexers{cache.NamespaceIndex: source.NamespaceIndex})
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsNotFound(err) && e.gone.CompareAndSwap(false, true) {
			// The reflector would retry forever against a resource that no
			// longer exists; its targets find out and report KindNotFound.
			c.mapper.Reset()
			c.mu.Lock()
			for key := range e.users {
				c.targetQueue.Add(key)
			}
			c.mu.Unlock()
		}
		if !e.synced.Load() {
			msg := err.Error()
			e.listErr.Store(&msg)
			c.enqueueUsers(e, true)
		}
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { c.objectEvent(e, obj) },
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*source.Object)
			n, ok2 := newObj.(*source.Object)
			if ok1 && ok2 && o.ResourceVersion() == n.ResourceVersion() {
				return
			}
			c.objectEvent(e, newObj)
		},
		DeleteFunc: func(obj any) { c.objectEvent(e, obj) },
	})
	e.informer = inf
	metrics.Informers.Inc()
	klog.FromContext(ctx).V(2).Info("Starting informer", "resource", e.label, "namespace", e.shape.Namespace)
	go inf.RunWithContext(ctx)
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return
		}
		e.synced.Store(true)
		e.listErr.Store(nil)
		c.enqueueUsers(e, false)
	}()
}

// enqueueUsers queues the targets of an informer: for a full reconcile, or
// only for a status report.
func (c *Collector) enqueueUsers(e *gvrInformer, statusOnly bool) {
	c.mu.Lock()
	keys := make([]targetKey, 0, len(e.users))
	if c.informers[e.gvr] == e {
		for key := range e.users {
			keys = append(keys, key)
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		if statusOnly {
			c.statusQueue.AddAfter(key, statusDelay)
		} else {
			c.targetQueue.Add(key)
		}
	}
}

// objectEvent queues (target, object) for every user of the informer that
// may collect the object.
func (c *Collector) objectEvent(e *gvrInformer, obj any) {
	metrics.CollectEvents.WithLabelValues(e.label).Inc()
	ns, name, ok := source.NameOf(obj)
	if !ok {
		return
	}
	c.mu.Lock()
	var keys []targetKey
	if c.informers[e.gvr] == e {
		keys = make([]targetKey, 0, len(e.users))
		for k := range e.users {
			if k.Cluster || k.Namespace == ns {
				keys = append(keys, k)
			}
		}
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.objectQueue.Add(objectKey{target: k, namespace: ns, name: name}.queued())
	}
}
