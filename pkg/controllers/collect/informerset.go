package collect

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
	"kollect.dev/kollect/pkg/kindmapper"
)

// informerSet runs one informer per collected resource, shared by every
// target collecting it, in the smallest shape that serves them all
// (source.Combine): a target whose needs change restarts it in the new
// shape. It also holds the kind mapper the targets resolve their kinds
// with, which it resets when a resource stops being served. Its mutex
// guards the map and each informer's users.
type informerSet struct {
	client   rest.Interface
	mapper   *kindmapper.Mapper
	handlers informerHandlers

	mu    sync.Mutex
	byGVR map[schema.GroupVersionResource]*gvrInformer
	// gvrOf is the resource each user watches.
	gvrOf map[targetKey]schema.GroupVersionResource
}

// informerHandlers are what the informers tell the collector.
type informerHandlers struct {
	// object: an object was added, changed or deleted.
	object func(e *gvrInformer, obj any)
	// synced: the informer's cache is full; its users walk it.
	synced func(users []targetKey)
	// listError: listing failed before the first sync; its users report it.
	listError func(users []targetKey)
	// gone: the resource is no longer served; its users resolve their kind
	// again.
	gone func(users []targetKey)
}

// gvrInformer is the one informer of a resource.
type gvrInformer struct {
	gvr      schema.GroupVersionResource
	label    string // "group/version/resource" for metrics
	shape    source.Shape
	users    map[targetKey]source.Shape // guarded by informerSet.mu
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc

	synced atomic.Bool
	// listErr is the last list or watch error before the first sync.
	listErr atomic.Pointer[string]
	// gone is set when the resource stopped being served (its CRD was
	// deleted).
	gone atomic.Bool
}

func newInformerSet(client rest.Interface, mapper *kindmapper.Mapper, h informerHandlers) *informerSet {
	return &informerSet{client: client, mapper: mapper, handlers: h,
		byGVR: map[schema.GroupVersionResource]*gvrInformer{}, gvrOf: map[targetKey]schema.GroupVersionResource{}}
}

// mapping resolves a kind through discovery (refreshed on a miss, so kinds
// installed later are found).
func (s *informerSet) mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	return s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
}

// use makes key a user of gvr with the given needs and returns the
// informer: started, or restarted when its shape must change or its
// resource was gone and is served again.
func (s *informerSet) use(ctx context.Context, key targetKey, gvr schema.GroupVersionResource, need source.Shape) *gvrInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.gvrOf[key]; ok && old != gvr {
		s.releaseLocked(ctx, key)
	}
	e := s.byGVR[gvr]
	if e == nil {
		e = &gvrInformer{gvr: gvr, users: map[targetKey]source.Shape{}}
	}
	e.users[key] = need
	s.gvrOf[key] = gvr
	if shape := source.Combine(e.users); e.informer == nil || shape != e.shape || e.gone.Load() {
		e = s.restartLocked(ctx, e, shape)
	}
	return e
}

// release removes a target from its informer, stopping the informer when
// it was the last user and narrowing it when that helps.
func (s *informerSet) release(ctx context.Context, key targetKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked(ctx, key)
}

func (s *informerSet) releaseLocked(ctx context.Context, key targetKey) {
	gvr, ok := s.gvrOf[key]
	if !ok {
		return
	}
	delete(s.gvrOf, key)
	e := s.byGVR[gvr]
	if e == nil {
		return
	}
	delete(e.users, key)
	if len(e.users) == 0 {
		s.stopLocked(e)
		delete(s.byGVR, gvr)
		return
	}
	if shape := source.Combine(e.users); shape != e.shape {
		s.restartLocked(ctx, e, shape)
	}
}

// of is the informer a target uses, nil when it uses none.
func (s *informerSet) of(key targetKey) *gvrInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gvr, ok := s.gvrOf[key]; ok {
		return s.byGVR[gvr]
	}
	return nil
}

// objectsIn lists the objects of one namespace ("" for all) the informer holds.
func (e *gvrInformer) objectsIn(namespace string) []any {
	indexer := e.informer.GetIndexer()
	switch {
	case e.shape.Namespace != "" && namespace != "" && namespace != e.shape.Namespace:
		return nil
	case namespace == "" || e.shape.Namespace != "":
		return indexer.List()
	}
	objs, _ := indexer.ByIndex(cache.NamespaceIndex, namespace)
	return objs
}

// usersOf lists an informer's users; none once it has been replaced.
func (s *informerSet) usersOf(e *gvrInformer) []targetKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byGVR[e.gvr] != e {
		return nil
	}
	return slices.Collect(maps.Keys(e.users))
}

// stopAll stops every informer.
func (s *informerSet) stopAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.byGVR {
		s.stopLocked(e)
	}
	s.byGVR = map[schema.GroupVersionResource]*gvrInformer{}
	s.gvrOf = map[targetKey]schema.GroupVersionResource{}
}

// restartLocked replaces an informer by one of another shape (or starts
// the first one). Its users walk again once it has synced.
func (s *informerSet) restartLocked(ctx context.Context, old *gvrInformer, shape source.Shape) *gvrInformer {
	if old.informer != nil {
		s.stopLocked(old)
	}
	e := &gvrInformer{gvr: old.gvr, label: old.gvr.Group + "/" + old.gvr.Version + "/" + old.gvr.Resource, shape: shape, users: maps.Clone(old.users)}
	s.byGVR[e.gvr] = e
	s.startLocked(ctx, e)
	return e
}

func (s *informerSet) stopLocked(e *gvrInformer) {
	if e.cancel != nil {
		e.cancel()
		e.cancel = nil
		metrics.Informers.Dec()
	}
}

func (s *informerSet) startLocked(parent context.Context, e *gvrInformer) {
	ctx, cancel := context.WithCancel(parent)
	e.cancel = cancel
	// An informer of one namespace needs no index of namespaces: it was
	// one more entry per object.
	indexers := cache.Indexers{}
	if e.shape.Namespace == "" {
		indexers[cache.NamespaceIndex] = source.NamespaceIndex
	}
	inf := cache.NewSharedIndexInformer(source.NewListWatch(s.client, e.gvr, e.shape), &source.Object{}, 0, indexers)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsNotFound(err) && e.gone.CompareAndSwap(false, true) {
			// The reflector would retry forever against a resource that no
			// longer exists; its targets find out and report KindNotFound.
			s.mapper.Reset()
			s.handlers.gone(s.usersOf(e))
		}
		if !e.synced.Load() {
			msg := err.Error()
			e.listErr.Store(&msg)
			s.handlers.listError(s.usersOf(e))
		}
	})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { s.handlers.object(e, obj) },
		UpdateFunc: func(oldObj, newObj any) {
			// Resyncs and repeated deliveries change nothing.
			o, ok1 := oldObj.(*source.Object)
			n, ok2 := newObj.(*source.Object)
			if ok1 && ok2 && o.ResourceVersion() == n.ResourceVersion() {
				return
			}
			s.handlers.object(e, newObj)
		},
		DeleteFunc: func(obj any) { s.handlers.object(e, obj) },
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
		s.handlers.synced(s.usersOf(e))
	}()
}
