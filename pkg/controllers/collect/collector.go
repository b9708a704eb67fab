// Package collect is the collector: it turns the objects that Targets and
// ClusterTargets select in the host cluster into InventoryItems and
// ClusterInventoryItems, incrementally, deletions included.
//
// One dynamic informer per resource (resolved through discovery) is shared
// by every target of that kind. Informer events queue (target, object)
// keys; a worker extracts the object through the target's Profile, hashes
// the content and writes the item only when the hash differs from the one
// in an in-memory index of the stored items (target → item name → hash),
// and deletes the item when the object goes or stops matching. A full walk
// at start, after a target or its Profile changes, and every resync period
// compares the cluster with the stored items: it adds the missing, fixes
// the changed and removes the stale. Targets report what they collected in
// status.collection; the registry derives Ready and Degraded from it.
//
// Items are written straight to the server's etcd (pkg/itemstore), under
// the keys the registry serves them from; Targets are read and updated
// through the loopback client, and the collected objects, Namespaces and
// Events live in the host cluster.
package collect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/source"
	"kollect.dev/kollect/pkg/expression"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/itemstore"
	"kollect.dev/kollect/pkg/kindmapper"
	"kollect.dev/kollect/pkg/tenancy"
)

const (
	// fieldManager writes the collector's status and finalizers.
	fieldManager = "kollect-collector"
	// DefaultResyncPeriod is how often a full walk runs between the
	// incremental updates.
	DefaultResyncPeriod = 10 * time.Minute
	// DefaultWorkers is how many objects are extracted and written at once.
	DefaultWorkers = 8

	// statusDelay coalesces status reports: one write per target at most
	// this often while items change.
	statusDelay = time.Second
	// timeOnlyReportInterval is how often a report whose only change is
	// lastChangeTime is written.
	timeOnlyReportInterval = 30 * time.Second
	// kindRetryMin and kindRetryMax bound the retries of a target whose
	// kind is not served (yet).
	kindRetryMin, kindRetryMax = 2 * time.Second, 30 * time.Second
)

// Reasons the collector reports besides the API's own.
const (
	// ReasonProfileInvalid: the Profile does not compile (stored before a
	// validation rule, or Secrets without the opt-in).
	ReasonProfileInvalid = "ProfileInvalid"
	// ReasonKindNotNamespaced: a Target (namespaced) for a cluster-scoped kind.
	ReasonKindNotNamespaced = "KindNotNamespaced"
	// ReasonListFailed: the host cluster refuses to list the kind (RBAC).
	ReasonListFailed = "ListFailed"
	// ReasonInvalidSelector: a selector that does not compile.
	ReasonInvalidSelector = "InvalidSelector"
)

// Config is what the collector needs from the server.
type Config struct {
	// Host reaches the host cluster: the collected objects, Namespaces, Events.
	Host *rest.Config
	// Loopback reaches this server: Profiles, Targets, ClusterTargets.
	Loopback *rest.Config
	// Mapper resolves the kinds Profiles collect through the host
	// cluster's discovery, refreshed on a miss; the server shares it with
	// the registry's `list` check.
	Mapper *kindmapper.Mapper
	// Items and ClusterItems are where items are stored (the registry's
	// etcd, written directly).
	Items, ClusterItems *itemstore.Store
	// Informers, when set, list and watch this server's kinds in process
	// (the loopback client otherwise).
	Informers informers.Source
	// ResyncPeriod is the time between full walks; 0 means DefaultResyncPeriod.
	ResyncPeriod time.Duration
	// Workers is how many objects are reconciled at once; 0 means DefaultWorkers.
	Workers int
	// Identity names this replica in Events.
	Identity string
	// Authorizer re-checks that the requester recorded on a target may
	// still use its Profile and list what it collects (the server's
	// delegated authorizer). Nil skips the check: only a server without
	// authorization has none.
	Authorizer authorizer.Authorizer
	// TenantMode (--tenant-mode) collects nothing for ClusterTargets;
	// deleting one still deletes its items.
	TenantMode bool
	// RequesterMaxAge (--requester-max-age), when positive, stops the
	// targets whose requester was recorded longer ago (RequesterExpired).
	RequesterMaxAge time.Duration
	// Quotas are the server's defaults of the Scopes' maxItems and
	// maxItemBytes (--default-max-items, --default-max-item-bytes); the
	// zero value sets none (quota.go).
	Quotas tenancy.Quotas
	// Holding tells whether this replica's lease is confirmed recently
	// enough that no other replica can have taken over: item writes wait
	// for it. Nil: always (no leader election).
	Holding func() bool
}

// errLeaseUnconfirmed refuses an item write while this replica cannot tell
// it still leads: resumed after a pause, say, before the leader election
// notices that another replica took over.
var errLeaseUnconfirmed = errors.New("the controllers' lease is not confirmed: item writes wait")

// holding tells whether item writes may go ahead (Config.Holding).
func (c *Collector) holding() bool { return c.cfg.Holding == nil || c.cfg.Holding() }

// Collector runs the collection controller.
type Collector struct {
	cfg     Config
	workers int

	kube kubernetes.Interface
	// hostJSON reads the collected kinds as JSON (source.ListWatch).
	hostJSON rest.Interface
	kollect  versioned.Interface
	mapper   *kindmapper.Mapper

	itemStore, clusterItemStore itemStore

	kollectFactory      kollectinformers.SharedInformerFactory
	kubeFactory         kubeinformers.SharedInformerFactory
	profileLister       kollectlisters.ProfileLister
	targetLister        kollectlisters.TargetLister
	clusterTargetLister kollectlisters.ClusterTargetLister
	scopeLister         kollectlisters.ScopeLister
	clusterScopeLister  kollectlisters.ClusterScopeLister
	namespaces          corev1listers.NamespaceLister

	recorder events.EventRecorder

	targetQueue workqueue.TypedRateLimitingInterface[targetKey]
	objectQueue workqueue.TypedRateLimitingInterface[queuedObject]
	statusQueue workqueue.TypedRateLimitingInterface[targetKey]

	runCtx context.Context

	mu        sync.Mutex
	state     map[targetKey]*target
	informers map[schema.GroupVersionResource]*gvrInformer
	// usage counts the items of each namespace ("" for the cluster kinds)
	// against its quota.
	usage map[string]*quotaUsage

	// walkRequests asks for a full walk before the resync period is over
	// (foreign.go).
	walkRequests chan struct{}
}

// objectKey names one object for one target. An empty name asks for a walk
// of the namespace (after its labels changed).
type objectKey struct {
	target          targetKey
	namespace, name string
}

// target is the collector's state of one Target or ClusterTarget.
type target struct {
	key targetKey
	// cfg is what the target collects with; nil while it cannot collect
	// (no Profile, unknown kind, suspended).
	cfg      *targetConfig
	informer *gvrInformer

	items    map[string]*itemEntry // item name → entry
	byObject map[string]string     // source namespace/name → item name
	// inflight are the item writes started and not yet in the index, and
	// suspect the items another writer changed, each with the object
	// whose sync repairs it (foreign.go).
	inflight map[string]*inflightWrite
	suspect  map[string]string
	failed   map[string]string // source namespace/name → extraction error
	// overQuota are the matching objects not collected because of the
	// quota (source namespace/name → why), and quota the limits in force.
	overQuota map[string]overQuota
	quota     tenancy.QuotaSet

	generation int64
	suspended  bool
	reason     string
	lastError  string
	// partial is a denial the target collects despite: a ClusterTarget
	// including namespaces the ClusterScopes forbid. Reported when there
	// is no blocking reason.
	partial *tenancy.Denial

	walked     string // fingerprint of the configuration last walked with
	walkNeeded bool
	walkedOnce bool

	lastFullSync, lastChange time.Time
	kindRetry                time.Duration

	reported           *v1alpha1.CollectionObservation
	reportedNamespaces []string
	reportedAt         time.Time
}

// targetConfig is a target's compiled configuration; replaced as a whole.
type targetConfig struct {
	generation int64
	profile    types.NamespacedName
	// fingerprint identifies what extraction depends on: the target's
	// generation and the Profile's uid and resourceVersion.
	fingerprint string
	extractor   *extract.Extractor
	gvk         schema.GroupVersionKind
	gvr         schema.GroupVersionResource
	namespaced  bool
	sel         *selection
	// labels are the labels of the target's items, shared (cloned for
	// writes); labelsKey is their canonical string.
	labels    map[string]string
	labelsKey string
	// fields is what extraction reads of objects (source.ProfileFields).
	fields string
}

// New builds a collector; Run starts it.
func New(cfg Config) (*Collector, error) {
	if cfg.Host == nil || cfg.Loopback == nil || cfg.Mapper == nil || cfg.Items == nil || cfg.ClusterItems == nil {
		return nil, errors.New("the collector needs the host and loopback configurations, the kind mapper and both item writers")
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	host := rest.CopyConfig(cfg.Host)
	if host.QPS == 0 {
		// client-go's default of 5 is far too low for Events and discovery
		// alongside informers of many kinds.
		host.QPS, host.Burst = 50, 100
	}
	kube, err := kubernetes.NewForConfig(host)
	if err != nil {
		return nil, err
	}
	hostJSON, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(host))
	if err != nil {
		return nil, err
	}
	loopback := rest.CopyConfig(cfg.Loopback)
	loopback.QPS, loopback.Burst = 200, 400
	kc, err := versioned.NewForConfig(loopback)
	if err != nil {
		return nil, err
	}
	metrics.Register()
	c := &Collector{
		cfg:       cfg,
		workers:   workers,
		kube:      kube,
		hostJSON:  hostJSON,
		kollect:   kc,
		mapper:    cfg.Mapper,
		state:     map[targetKey]*target{},
		informers: map[schema.GroupVersionResource]*gvrInformer{},
		usage:     map[string]*quotaUsage{},

		walkRequests: make(chan struct{}, 1),
	}
	c.itemStore, c.clusterItemStore = etcdItems{cfg.Items}, etcdItems{cfg.ClusterItems}
	return c, nil
}

// Run collects until ctx is done, then stops every informer and worker and
// returns. A Collector runs once.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("collector")
	ctx = klog.NewContext(ctx, logger)
	c.runCtx = ctx
	c.targetQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[targetKey](),
		workqueue.TypedRateLimitingQueueConfig[targetKey]{Name: "kollect_collect_targets"})
	c.objectQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[queuedObject](),
		workqueue.TypedRateLimitingQueueConfig[queuedObject]{Name: "kollect_collect_objects"})
	c.statusQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[targetKey](),
		workqueue.TypedRateLimitingQueueConfig[targetKey]{Name: "kollect_collect_status"})

	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.kube.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer broadcaster.Shutdown()
	c.recorder = broadcaster.NewRecorder(scheme, "kollect-collector")

	var wg sync.WaitGroup
	defer func() {
		c.targetQueue.ShutDown()
		c.objectQueue.ShutDown()
		c.statusQueue.ShutDown()
		wg.Wait()
		c.mu.Lock()
		for _, e := range c.informers {
			c.stopInformerLocked(e)
		}
		c.informers = map[schema.GroupVersionResource]*gvrInformer{}
		c.mu.Unlock()
		metrics.Items.WithLabelValues("InventoryItem").Set(0)
		metrics.Items.WithLabelValues("ClusterInventoryItem").Set(0)
		logger.Info("Collector stopped")
	}()

	if err := c.startInformers(ctx); err != nil {
		return err
	}
	defer c.kollectFactory.Shutdown()
	defer c.kubeFactory.Shutdown()

	// The stored items' watches start from before the index reads them.
	itemsFrom, clusterItemsFrom, err := c.storedPositions(ctx)
	if err != nil {
		return nil // ctx done
	}
	// The index must hold the stored items before any worker compares with it.
	if err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.resync(ctx); err != nil {
			logger.Error(err, "Reading the stored items failed; retrying")
			return false, nil
		}
		return true, nil
	}); err != nil {
		return nil // ctx done
	}

	run := func(n int, f func()) {
		for range n {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
	}
	run(2, func() { processQueue(ctx, c.targetQueue, "Target", c.syncTarget) })
	run(c.workers, func() {
		processQueue(ctx, c.objectQueue, "Object", func(ctx context.Context, k queuedObject) error { return c.syncObject(ctx, k.key()) })
	})
	run(2, func() { processQueue(ctx, c.statusQueue, "Status", c.syncStatus) })
	run(1, func() { c.watchItems(ctx, c.itemStore, false, itemsFrom) })
	run(1, func() { c.watchItems(ctx, c.clusterItemStore, true, clusterItemsFrom) })
	run(1, func() {
		// The walk at start ran above; the next ones every resync period,
		// or sooner when a watch of the stored items lost its place.
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait.Jitter(c.cfg.ResyncPeriod, 0.1)):
			case <-c.walkRequests:
			}
			if err := c.resync(ctx); err != nil && ctx.Err() == nil {
				logger.Error(err, "Full walk failed")
			}
		}
	})
	logger.Info("Collector started", "workers", c.workers, "resyncPeriod", c.cfg.ResyncPeriod)
	<-ctx.Done()
	return nil
}

// startInformers starts the informers of Profiles, Targets, ClusterTargets
// (this server, through loopback) and Namespaces (the host cluster).
func (c *Collector) startInformers(ctx context.Context) error {
	c.kollectFactory = kollectinformers.NewSharedInformerFactory(c.kollect, 0)
	informers.InProcess(c.kollectFactory, c.cfg.Informers, &v1alpha1.Profile{}, &v1alpha1.Target{}, &v1alpha1.ClusterTarget{},
		&v1alpha1.Scope{}, &v1alpha1.ClusterScope{})
	api := c.kollectFactory.Kollect().V1alpha1()
	c.profileLister = api.Profiles().Lister()
	c.targetLister = api.Targets().Lister()
	c.clusterTargetLister = api.ClusterTargets().Lister()
	c.scopeLister = api.Scopes().Lister()
	c.clusterScopeLister = api.ClusterScopes().Lister()
	c.kubeFactory = kubeinformers.NewSharedInformerFactory(c.kube, 0)
	c.namespaces = c.kubeFactory.Core().V1().Namespaces().Lister()

	targetHandler := cache.ResourceEventHandlerFuncs{
		AddFunc: c.targetEvent,
		UpdateFunc: func(old, obj any) {
			// Status writes (the collector's own) change nothing to act on.
			o, ok1 := old.(metav1.Object)
			n, ok2 := obj.(metav1.Object)
			if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() && o.GetDeletionTimestamp().Equal(n.GetDeletionTimestamp()) &&
				slices.Equal(o.GetFinalizers(), n.GetFinalizers()) {
				return
			}
			c.targetEvent(obj)
		},
		DeleteFunc: c.targetEvent,
	}
	for _, inf := range []cache.SharedIndexInformer{api.Targets().Informer(), api.ClusterTargets().Informer()} {
		if _, err := inf.AddEventHandler(targetHandler); err != nil {
			return err
		}
	}
	if _, err := api.Profiles().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.profileEvent,
		UpdateFunc: func(old, obj any) { c.profileEvent(obj) },
		DeleteFunc: c.profileEvent,
	}); err != nil {
		return err
	}
	scopeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.scopeEvent,
		UpdateFunc: func(old, obj any) { c.scopeEvent(obj) },
		DeleteFunc: c.scopeEvent,
	}
	for _, inf := range []cache.SharedIndexInformer{api.Scopes().Informer(), api.ClusterScopes().Informer()} {
		if _, err := inf.AddEventHandler(scopeHandler); err != nil {
			return err
		}
	}
	if _, err := c.kubeFactory.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.namespaceEvent,
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(metav1.Object)
			n, ok2 := obj.(metav1.Object)
			if ok1 && ok2 && maps.Equal(o.GetLabels(), n.GetLabels()) {
				return
			}
			c.namespaceEvent(obj)
		},
		DeleteFunc: c.namespaceEvent,
	}); err != nil {
		return err
	}
	c.kollectFactory.Start(ctx.Done())
	c.kubeFactory.Start(ctx.Done())
	for typ, ok := range c.kollectFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	for typ, ok := range c.kubeFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	return nil
}

func (c *Collector) targetEvent(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch t := obj.(type) {
	case *v1alpha1.Target:
		c.targetQueue.Add(targetKey{Namespace: t.Namespace, Name: t.Name})
	case *v1alpha1.ClusterTarget:
		c.targetQueue.Add(targetKey{Cluster: true, Name: t.Name})
	}
}

// profileEvent queues the targets that use a Profile.
func (c *Collector) profileEvent(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*v1alpha1.Profile)
	if !ok {
		return
	}
	if ts, err := c.targetLister.Targets(p.Namespace).List(labels.Everything()); err == nil {
		for _, t := range ts {
			if t.Spec.ProfileRef.Name == p.Name {
				c.targetQueue.Add(targetKey{Namespace: t.Namespace, Name: t.Name})
			}
		}
	}
	if cts, err := c.clusterTargetLister.List(labels.Everything()); err == nil {
		for _, t := range cts {
			if t.Spec.ProfileRef.Namespace == p.Namespace && t.Spec.ProfileRef.Name == p.Name {
				c.targetQueue.Add(targetKey{Cluster: true, Name: t.Name})
			}
		}
	}
}

// namespaceEvent walks a namespace again for every target that may collect
// in it: its labels decide ClusterTarget selection and kollect.dev/watch.
func (c *Collector) namespaceEvent(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	n, ok := obj.(metav1.Object)
	if !ok {
		return
	}
	ns := n.GetName()
	c.mu.Lock()
	var keys []targetKey
	for key, t := range c.state {
		if t.cfg != nil && t.cfg.namespaced && (key.Cluster || key.Namespace == ns) {
			keys = append(keys, key)
		}
	}
	c.mu.Unlock()
	for _, key := range keys {
		c.objectQueue.Add(objectKey{target: key, namespace: ns}.queued())
		if key.Cluster {
			c.statusQueue.AddAfter(key, statusDelay)
		}
	}
}

// checkerRetry is how soon, at least, a target whose Profile could not be
// checked (expression.ErrCheckerUnavailable) is configured again: within
// twice that.
const checkerRetry = 5 * time.Second

// processQueue runs a worker until its queue shuts down: errors are retried
// with the queue's rate limiter.
func processQueue[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], kind string, sync func(context.Context, T) error) {
	logger := klog.FromContext(ctx)
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		func() {
			defer q.Done(key)
			err := sync(ctx, key)
			if err == nil {
				q.Forget(key)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, expression.ErrCheckerUnavailable) {
				// The server's, not the key's: the queue's backoff
				// would leave the target uncollected for minutes after
				// the checker is free again. Jittered, so that targets
				// refused together do not come back together.
				metrics.ReconcileErrors.WithLabelValues(kind, errorClass(err)).Inc()
				q.Forget(key)
				q.AddAfter(key, wait.Jitter(checkerRetry, 1))
				return
			}
			if errors.Is(err, errLeaseUnconfirmed) {
				// Not a failure of this key: it waits for the lease
				// without spending the queue's backoff.
				q.Forget(key)
				q.AddAfter(key, time.Second)
				return
			}
			metrics.ReconcileErrors.WithLabelValues(kind, errorClass(err)).Inc()
			logger.V(2).Info("Reconcile failed; retrying", "kind", kind, "key", fmt.Sprint(key), "err", err)
			q.AddRateLimited(key)
		}()
	}
}

// errorClass is a coarse label for kollect_reconcile_errors_total.
func errorClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return "forbidden"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case meta.IsNoMatchError(err):
		return "kind_not_found"
	default:
		return "other"
	}
}

// stateLocked returns the state of a target, creating it. The caller holds c.mu.
func (c *Collector) stateLocked(key targetKey) *target {
	t := c.state[key]
	if t == nil {
		t = &target{key: key, items: map[string]*itemEntry{}, byObject: map[string]string{}, failed: map[string]string{}, overQuota: map[string]overQuota{},
			inflight: map[string]*inflightWrite{}, suspect: map[string]string{}}
		c.state[key] = t
	}
	return t
}

// syncTarget reconciles one Target or ClusterTarget: finalizer, Profile,
// kind, informer, and a walk when what it collects changed.
func (c *Collector) syncTarget(ctx context.Context, key targetKey) error {
	v, err := c.getView(key)
	if err != nil {
		return err
	}
	if v == nil || v.deleting {
		return c.finish(ctx, key, v)
	}
	// The registry adds the finalizer on create; this restores one that an
	// update removed, or that an object older than that rule never had.
	if !v.finalizer {
		if err := c.setFinalizer(ctx, key, true); err != nil {
			return err
		}
	}

	c.mu.Lock()
	t := c.stateLocked(key)
	if t.reported == nil && v.collection != nil {
		// What an earlier leader reported: no second Event for the same failure.
		t.reported = v.collection.DeepCopy()
	}
	c.mu.Unlock()

	c.mu.Lock()
	prev := t.cfg
	if t.informer != nil && t.informer.gone.Load() {
		prev = nil // resolve the kind again: it may be gone
	}
	c.mu.Unlock()
	cfg, reason, msg, err := c.configure(v, prev)
	if err != nil {
		return err
	}
	quota := c.itemQuotas(key)
	var partial *tenancy.Denial
	switch {
	case reason == kollect.ReasonProfileNotFound:
		metrics.Resolved(key.kind(), "Profile", metrics.ResolutionNotFound)
	case reason == "" && !v.suspend:
		var denied *tenancy.Denial
		if denied, partial, err = c.admit(ctx, v, cfg); err != nil {
			return err
		}
		if denied != nil {
			reason, msg = denied.Reason, denied.Message
		}
	}
	c.mu.Lock()
	t.generation = v.generation
	t.suspended = v.suspend
	t.partial = partial
	switch {
	case reason != "":
		c.releaseInformerLocked(t)
		c.clearOverQuotaLocked(t)
		t.cfg, t.reason, t.lastError = nil, reason, msg
	case v.suspend:
		// Suspended: keep the items, stop watching and changing them.
		c.releaseInformerLocked(t)
		c.clearOverQuotaLocked(t)
		t.cfg, t.reason, t.lastError = nil, "", ""
	default:
		need := source.Shape{KeepManagedFields: cfg.extractor.KeepsManagedFields(), KeepLastApplied: cfg.extractor.KeepsLastApplied(), Fields: cfg.fields}
		if cfg.namespaced {
			if !key.Cluster {
				need.Namespace = key.Namespace
			} else if len(v.include) == 1 {
				need.Namespace = v.include[0]
			}
		}
		t.cfg, t.reason, t.kindRetry = cfg, "", 0
		if len(t.failed) == 0 {
			t.lastError = ""
		}
		if t.informer != nil && t.informer.gone.Load() {
			// The kind was gone and is served again: start over.
			c.restartInformerLocked(t.informer, t.informer.shape)
		}
		c.useInformerLocked(t, cfg.gvr, need)
	}
	c.setQuotaLocked(t, quota)
	var walk bool
	if t.cfg != nil && t.informer.synced.Load() {
		fp := fmt.Sprintf("%s/%p", t.cfg.fingerprint, t.informer)
		if walk = t.walked != fp || t.walkNeeded; walk {
			t.walked, t.walkNeeded, t.walkedOnce = fp, false, true
		}
	}
	retry := time.Duration(0)
	if reason == kollect.ReasonKindNotFound {
		t.kindRetry = min(max(2*t.kindRetry, kindRetryMin), kindRetryMax)
		retry = t.kindRetry
	}
	c.mu.Unlock()

	if walk {
		c.walk(key, "", true)
	}
	if retry > 0 {
		c.targetQueue.AddAfter(key, retry)
	}
	c.statusQueue.AddAfter(key, statusDelay)
	return nil
}

// configure compiles what a target collects, or returns prev when neither
// the target's spec nor its Profile changed. A reason says why it cannot
// collect; an error is transient (discovery failed) and retried.
func (c *Collector) configure(v *view, prev *targetConfig) (cfg *targetConfig, reason, msg string, err error) {
	p, err := c.profileLister.Profiles(v.profile.Namespace).Get(v.profile.Name)
	if apierrors.IsNotFound(err) {
		return nil, kollect.ReasonProfileNotFound, fmt.Sprintf("Profile %s not found", v.profile), nil
	}
	if err != nil {
		return nil, "", "", err
	}
	fingerprint := fmt.Sprintf("%d/%s/%s", v.generation, p.UID, p.ResourceVersion)
	var limits *tenancy.Limits
	if v.key.Cluster {
		// The ClusterScopes bound the namespaces it collects from.
		l, fp := c.clusterLimits()
		limits, fingerprint = &l, fingerprint+"/"+fp
	}
	if prev != nil && prev.fingerprint == fingerprint {
		return prev, "", "", nil
	}
	ext, err := extract.New(p)
	if errors.Is(err, expression.ErrCheckerUnavailable) {
		return nil, "", "", err // the server's, not the Profile's
	}
	if err != nil {
		return nil, ReasonProfileInvalid, fmt.Sprintf("Profile %s: %v", v.profile, err), nil
	}
	g := p.Spec.TargetGVK
	gvk := schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
	mapping, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		return nil, kollect.ReasonKindNotFound, fmt.Sprintf("the cluster does not serve %s", gvkString(gvk)), nil
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("resolving %s: %w", gvkString(gvk), err)
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	if !namespaced && !v.key.Cluster {
		return nil, ReasonKindNotNamespaced, fmt.Sprintf("%s is cluster-scoped: collect it with a ClusterTarget", gvkString(gvk)), nil
	}
	sel, err := newSelection(v, limits)
	if err != nil {
		return nil, ReasonInvalidSelector, err.Error(), nil
	}
	cfg = &targetConfig{
		generation:  v.generation,
		profile:     v.profile,
		fingerprint: fingerprint,
		extractor:   ext,
		fields:      source.ProfileFields(p),
		gvk:         gvk,
		gvr:         mapping.Resource,
		namespaced:  namespaced,
		sel:         sel,
	}
	cfg.labels = itemLabels(v.key, cfg)
	cfg.labelsKey = labelsKey(cfg.labels)
	return cfg, "", "", nil
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + " " + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + " " + gvk.Kind
}

// finish handles a target that is gone or being deleted: it stops
// collecting, deletes every item of the target, and removes the finalizer.
func (c *Collector) finish(ctx context.Context, key targetKey, v *view) error {
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	c.mu.Lock()
	t := c.state[key]
	hadItems := t != nil && len(t.items) > 0
	if t != nil {
		c.releaseInformerLocked(t)
		c.clearOverQuotaLocked(t)
		c.unindexAllLocked(t)
		delete(c.state, key)
	}
	c.mu.Unlock()
	if v == nil {
		// Deleted without the finalizer (removed by hand): clean up anyway.
		if hadItems {
			return c.deleteAllItems(ctx, key)
		}
		return nil
	}
	if !v.finalizer {
		return nil
	}
	if err := c.deleteAllItems(ctx, key); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Deleted the items of a deleted target", "target", key.String())
	return c.setFinalizer(ctx, key, false)
}

// walk compares a target's objects (all, or one namespace's) with its
// index and queues every difference and every object that may have one.
func (c *Collector) walk(key targetKey, namespace string, full bool) {
	c.mu.Lock()
	t := c.state[key]
	if t == nil || t.cfg == nil || t.informer == nil || !t.informer.synced.Load() {
		c.mu.Unlock()
		return
	}
	cfg, indexer := t.cfg, t.informer.informer.GetIndexer()
	var known []objectKey
	add := func(objKey string) {
		ns, name, _ := cache.SplitMetaNamespaceKey(objKey)
		if namespace == "" || ns == namespace {
			known = append(known, objectKey{target: key, namespace: ns, name: name})
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
	if full {
		t.lastFullSync = time.Now()
	}
	c.mu.Unlock()

	var objs []any
	switch {
	case namespace != "":
		objs, _ = indexer.ByIndex(cache.NamespaceIndex, namespace)
	case cfg.namespaced && !key.Cluster:
		objs, _ = indexer.ByIndex(cache.NamespaceIndex, key.Namespace)
	default:
		objs = indexer.List()
	}
	for _, o := range objs {
		if obj, ok := o.(*source.Object); ok && c.matches(key, cfg, obj) {
			c.objectQueue.Add(objectKey{target: key, namespace: obj.Namespace(), name: obj.Name()}.queued())
		}
	}
	// The queue de-duplicates: objects both matched and indexed run once.
	for _, k := range known {
		c.objectQueue.Add(k.queued())
	}
}

// syncObject makes the stored item of one (target, object) what it should
// be: created, updated, deleted, or left alone when its hash is unchanged.
func (c *Collector) syncObject(ctx context.Context, k objectKey) (err error) {
	if k.name == "" {
		c.walk(k.target, k.namespace, false)
		return nil
	}
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	c.mu.Lock()
	t := c.state[k.target]
	if t == nil || t.cfg == nil || t.informer == nil || !t.informer.synced.Load() {
		c.mu.Unlock()
		return nil
	}
	cfg, indexer, quota := t.cfg, t.informer.informer.GetIndexer(), t.quota
	objKey := objectKeyOf(k.namespace, k.name)
	oldName, had := t.byObject[objKey]
	var old itemEntry
	if had {
		old = *t.items[oldName]
	}
	suspects := t.takeSuspectsLocked(objKey)
	c.mu.Unlock()
	store := c.storeFor(k.target)
	// replace: storage does not hold the object's item as the index says.
	var replace bool
	// retain keeps the suspects for a later sync when this one ends
	// without writing the object's item (an extraction failure).
	var retain bool
	if len(suspects) > 0 {
		defer func() {
			if err != nil || retain {
				// Not repaired: the retry reads storage again.
				c.mu.Lock()
				for _, name := range suspects {
					t.suspect[name] = objKey
				}
				c.mu.Unlock()
			}
		}()
		if old, replace, err = c.repair(ctx, t, store, objKey, suspects, had, oldName, old); err != nil {
			return err
		}
	}

	raw, exists, err := indexer.GetByKey(objKey)
	if err != nil {
		return err
	}
	obj, _ := raw.(*source.Object)
	if !exists || obj == nil || !c.matches(k.target, cfg, obj) {
		c.setFailure(t, objKey, nil)
		c.setOverQuota(t, objKey, 0)
		if !had {
			return nil
		}
		return c.deleteItem(ctx, t, store, objKey, oldName)
	}

	source := obj.Source()
	name := extract.ItemName(k.target.Name, source)
	same := had && oldName == name && old.labels == cfg.labelsKey
	if same && old.extractedWith == cfg.fingerprint && old.sourceRV == source.ResourceVersion {
		// Nothing changed since the last extraction: no need to extract.
		c.countWrite(store.kind(), metrics.OpSkip)
		return nil
	}
	if !had {
		// A new item: while the quota is full it waits, unextracted.
		c.mu.Lock()
		room := c.hasRoomLocked(t)
		c.mu.Unlock()
		if !room {
			c.setOverQuota(t, objKey, overCount)
			return nil
		}
	}
	var content extract.Content
	object, err := obj.Decode()
	if err == nil {
		content, err = cfg.extractor.Extract(ctx, object)
	}
	if err != nil {
		metrics.ReconcileErrors.WithLabelValues(k.target.kind(), "extraction").Inc()
		c.setFailure(t, objKey, fmt.Errorf("%s %s: %w", source.Kind, objKey, err))
		retain = replace
		return nil
	}
	c.setFailure(t, objKey, nil)
	if tooLarge(quota, content.Attributes, content.Object) {
		// Not written; the previous item would claim content the object no
		// longer has.
		if had {
			if err := c.deleteItem(ctx, t, store, objKey, oldName); err != nil {
				return err
			}
		}
		c.setOverQuota(t, objKey, overSize)
		return nil
	}
	hash := extract.Hash(source, content)
	sum := hashOf(hash)
	entry := &itemEntry{objKey: objKey, hash: sum, labels: cfg.labelsKey, sourceRV: source.ResourceVersion, extractedWith: cfg.fingerprint}
	if same && old.hash == sum {
		c.countWrite(store.kind(), metrics.OpSkip)
		c.mu.Lock()
		if cur := t.items[name]; cur != nil && cur.hash == sum {
			cur.sourceRV, cur.extractedWith = source.ResourceVersion, cfg.fingerprint
		}
		c.mu.Unlock()
		return nil
	}
	if had && oldName != name {
		// The object was recreated under its name: a new uid, a new item.
		if err := c.deleteItem(ctx, t, store, objKey, oldName); err != nil {
			return err
		}
	}
	isNew := !had || oldName != name
	if isNew && !c.reserve(t, objKey) {
		c.setOverQuota(t, objKey, overCount)
		return nil
	}
	item := &desiredItem{namespace: k.target.Namespace, name: name, labels: maps.Clone(cfg.labels), source: source, content: content, hash: hash}
	c.mu.Lock()
	t.inflight[name] = &inflightWrite{objKey: objKey, hash: sum, labels: cfg.labelsKey}
	c.mu.Unlock()
	created, rv, err := store.put(ctx, item, had && oldName == name)
	if replace && apierrors.IsInvalid(err) {
		// Another writer changed what an update may not (the source's uid).
		if err = store.delete(ctx, k.target.Namespace, name); err == nil {
			created, rv, err = store.put(ctx, item, false)
		}
	}
	entry.rv = rv
	c.mu.Lock()
	delete(t.inflight, name)
	if err != nil {
		if isNew {
			c.releaseLocked(t)
		}
		c.mu.Unlock()
		return err
	}
	gone := c.state[k.target] != t
	if !gone {
		c.indexLocked(t, name, entry)
		c.setOverQuotaLocked(t, objKey, 0)
		t.lastChange = time.Now()
	}
	switch {
	case isNew && gone:
		c.releaseLocked(t)
	case isNew:
		c.commitLocked(t)
	}
	c.mu.Unlock()
	if created {
		c.countWrite(store.kind(), metrics.OpCreate)
	} else {
		c.countWrite(store.kind(), metrics.OpUpdate)
	}
	if gone {
		// The target was deleted while this item was written.
		return store.delete(ctx, k.target.Namespace, name)
	}
	c.statusQueue.AddAfter(k.target, statusDelay)
	return nil
}

// repair reads the suspect items of one object from storage (foreign.go).
// The object's own item, when storage does not hold what the index says,
// comes back with an entry that matches nothing, so that the sync writes
// it again in its place; any other item is one no object holds, and is
// deleted.
func (c *Collector) repair(ctx context.Context, t *target, store itemStore, objKey string, suspects []string, had bool, oldName string, old itemEntry) (itemEntry, bool, error) {
	replace := false
	for _, name := range suspects {
		if had && name == oldName {
			s, found, err := store.get(ctx, t.key.Namespace, name)
			if err != nil {
				return old, false, err
			}
			if !found || s.hash != old.hash || s.objKey != old.objKey || s.labels != old.labels {
				old, replace = itemEntry{objKey: old.objKey}, true
			}
			continue
		}
		c.mu.Lock()
		e := t.items[name]
		c.mu.Unlock()
		if e != nil && e.objKey != objKey {
			continue // another object's now; its sync repairs it
		}
		// Held by no object, or a second item of this one (a full walk
		// indexes whatever storage holds).
		if err := store.delete(ctx, t.key.Namespace, name); err != nil {
			return old, false, err
		}
		if e != nil {
			c.mu.Lock()
			if t.items[name] == e {
				c.unindexLocked(t, name)
			}
			c.mu.Unlock()
		}
		c.countWrite(store.kind(), metrics.OpDelete)
		klog.FromContext(ctx).V(2).Info("Deleted an item no object holds", "target", t.key.String(), "item", name, "object", objKey)
	}
	return old, replace, nil
}

// deleteItem deletes the item name of the object objKey and forgets it.
func (c *Collector) deleteItem(ctx context.Context, t *target, store itemStore, objKey, name string) error {
	c.mu.Lock()
	t.inflight[name] = &inflightWrite{objKey: objKey, deleted: true}
	c.mu.Unlock()
	err := store.delete(ctx, t.key.Namespace, name)
	c.mu.Lock()
	delete(t.inflight, name)
	if err == nil {
		c.unindexLocked(t, name)
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	c.countWrite(store.kind(), metrics.OpDelete)
	c.statusQueue.AddAfter(t.key, statusDelay)
	return nil
}

// setFailure records (err non-nil) or clears the extraction failure of an object.
func (c *Collector) setFailure(t *target, objKey string, err error) {
	c.mu.Lock()
	changed := false
	if err != nil {
		// Kept for every failing object: cut as status shows it.
		msg := shorten(err.Error(), maxLastError)
		changed = t.failed[objKey] != msg
		t.failed[objKey], t.lastError = msg, msg
	} else if _, ok := t.failed[objKey]; ok {
		delete(t.failed, objKey)
		if len(t.failed) == 0 && t.reason == "" {
			t.lastError = ""
		}
		changed = true
	}
	c.mu.Unlock()
	if changed {
		c.statusQueue.AddAfter(t.key, statusDelay)
	}
}

func (c *Collector) countWrite(kind, op string) {
	metrics.ItemWrites.WithLabelValues(kind, op).Inc()
}

// indexLocked records a stored item. The caller holds c.mu.
func (c *Collector) indexLocked(t *target, name string, e *itemEntry) {
	if _, ok := t.items[name]; !ok {
		metrics.Items.WithLabelValues(t.key.itemKind()).Inc()
		c.countItemLocked(t, 1)
	}
	t.items[name] = e
	t.byObject[e.objKey] = name
}

// unindexLocked forgets a deleted item. The caller holds c.mu.
func (c *Collector) unindexLocked(t *target, name string) {
	if e, ok := t.items[name]; ok {
		delete(t.items, name)
		if t.byObject[e.objKey] == name {
			delete(t.byObject, e.objKey)
		}
		metrics.Items.WithLabelValues(t.key.itemKind()).Dec()
		c.countItemLocked(t, -1)
		t.lastChange = time.Now()
	}
}

func (c *Collector) unindexAllLocked(t *target) {
	metrics.Items.WithLabelValues(t.key.itemKind()).Add(-float64(len(t.items)))
	c.countItemLocked(t, -int64(len(t.items)))
	t.items, t.byObject = map[string]*itemEntry{}, map[string]string{}
}

// resync is the full walk: it reads every stored item, rebuilds the index
// from storage (the source of truth, whoever wrote last), deletes the items
// of targets that no longer exist, and walks every target.
func (c *Collector) resync(ctx context.Context) error {
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	start := time.Now()
	stored := map[targetKey][]storedItem{}
	var orphans []storedItem
	var clusterOrphans []storedItem
	byLabel := func(cluster bool, s storedItem) {
		key := targetKey{Cluster: cluster, Namespace: s.namespace, Name: s.target}
		stored[key] = append(stored[key], s)
	}
	if err := c.itemStore.list(ctx, "", labels.Everything(), func(s storedItem) { byLabel(false, s) }); err != nil {
		return err
	}
	if err := c.clusterItemStore.list(ctx, "", labels.Everything(), func(s storedItem) { byLabel(true, s) }); err != nil {
		return err
	}

	// Map label values back to targets, read after the items so that
	// every item written for a target finds it.
	existing := map[targetKey]targetKey{}
	var all []targetKey
	if ts, err := c.targetLister.List(labels.Everything()); err == nil {
		for _, t := range ts {
			key := targetKey{Namespace: t.Namespace, Name: t.Name}
			existing[targetKey{Namespace: t.Namespace, Name: labelValue(t.Name)}] = key
			all = append(all, key)
		}
	}
	if cts, err := c.clusterTargetLister.List(labels.Everything()); err == nil {
		for _, t := range cts {
			key := targetKey{Cluster: true, Name: t.Name}
			existing[targetKey{Cluster: true, Name: labelValue(t.Name)}] = key
			all = append(all, key)
		}
	}

	c.mu.Lock()
	for key := range c.state {
		existing[targetKey{Cluster: key.Cluster, Namespace: key.Namespace, Name: labelValue(key.Name)}] = key
	}
	rebuilt := map[targetKey]bool{}
	for labelKey, items := range stored {
		key, ok := existing[labelKey]
		if !ok {
			if labelKey.Cluster {
				clusterOrphans = append(clusterOrphans, items...)
			} else {
				orphans = append(orphans, items...)
			}
			continue
		}
		t := c.stateLocked(key)
		c.rebuildIndexLocked(t, items)
		rebuilt[key] = true
	}
	for key, t := range c.state {
		if !rebuilt[key] {
			c.rebuildIndexLocked(t, nil)
		}
		t.walkNeeded = true
	}
	c.mu.Unlock()

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

// rebuildIndexLocked replaces a target's index by what storage holds,
// keeping what the old index knew about extraction when the item is the same.
func (c *Collector) rebuildIndexLocked(t *target, items []storedItem) {
	old, oldByObject := t.items, t.byObject
	c.unindexAllLocked(t)
	for _, s := range items {
		e := entryOf(s)
		if prev := old[s.name]; prev != nil && prev.hash == e.hash && prev.sourceRV == e.sourceRV {
			e.extractedWith = prev.extractedWith
		}
		c.indexLocked(t, s.name, e)
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
