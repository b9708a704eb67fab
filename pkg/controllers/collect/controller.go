// Package collect is the collector: it turns the objects that Targets and
// ClusterTargets select in the host cluster into InventoryItems and
// ClusterInventoryItems, incrementally, deletions included.
//
// The parts, each in its own file and each with its own lock where it has
// state:
//
//   - controller.go: the Collector, built with its informers and queues in
//     New, started by Run; the event handlers that fill the queues.
//   - sync_target.go: syncTarget, the reconcile of one Target or
//     ClusterTarget: finalizer, Profile, kind, access, informer, walk.
//   - targetspec.go: what a target collects, compiled (targetSpec), and
//     whether it collects an object.
//   - targets.go: the targets' state between syncs (targetSet).
//   - informerset.go: one informer per collected resource, shared by the
//     targets of its kind, in the shape they need (informerSet), and the
//     one kind mapper.
//   - sync_object.go: syncObject, one (target, object): extract, hash,
//     write or delete the item.
//   - itemindex.go: what the collector stored, per target (itemIndex):
//     what a sync compares with instead of reading storage; quota.go
//     counts it against the Scopes' quotas.
//   - walk.go: the walks: a target's objects against its index, and the
//     full walk that rebuilds the index from storage.
//   - foreign.go: the watch of the stored items, for writes this
//     collector did not make.
//   - status.go: status.collection of each target.
//   - access.go: the tenancy checks of a target at reconcile time.
//   - itemstore.go: how items are named, labelled and stored.
//
// Informer events queue (target, object) keys; a worker extracts the
// object through the target's Profile, hashes the content and writes the
// item only when the hash differs from the index's, and deletes the item
// when the object goes or stops matching. A full walk at start, after a
// target or its Profile changes, and every resync period compares the
// cluster with the stored items: it adds the missing, fixes the changed
// and removes the stale. Targets report what they collected in
// status.collection; the registry derives Ready and Degraded from it.
//
// Items are written straight to the server's etcd (pkg/itemstore), under
// the keys the registry serves them from; Targets and Profiles are read
// in process (Config.Informers) and written (finalizers, status) through
// the loopback client; the collected objects, Namespaces and Events live
// in the host cluster.
package collect

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/dynamic"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
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
	// Each write is one etcd round trip, mostly waiting for its fsync: with
	// 64 in flight etcd commits them in batches (docs/collection.md has the
	// figures).
	DefaultWorkers = 64

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
	// Loopback reaches this server: writes of Targets and ClusterTargets
	// (finalizers, status), and reads when Informers is unset.
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
	// Cluster names the cluster collected from in every item
	// (source.cluster, the kollect.dev/cluster label): the host's
	// --cluster-name, or a MemberCluster's name.
	Cluster string
	// Member, when set, makes this the collector of the MemberCluster
	// named Cluster; nil collects from the host cluster.
	Member *Member
}

// Member is what the collector of a member cluster needs besides the
// host's: it collects from Source, for the ClusterTargets whose
// clusterSelector selects the MemberCluster (Targets and ClusterTargets
// without a clusterSelector are the host's), reports in their
// status.clusters, and keeps to its own cluster's items. Config.Mapper
// resolves kinds in the member; Events and writes still go to the hub.
type Member struct {
	// Source reaches the member's API server.
	Source *rest.Config
	// UnreachableSince tells since when the member has not answered; zero
	// while it answers. Its items are kept meanwhile.
	UnreachableSince func() time.Time
}

// errLeaseUnconfirmed refuses an item write while this replica cannot tell
// it still leads: resumed after a pause, say, before the leader election
// notices that another replica took over.
var errLeaseUnconfirmed = errors.New("the controllers' lease is not confirmed: item writes wait")

// Collector runs the collection controller.
type Collector struct {
	cfg     Config
	workers int

	kube    kubernetes.Interface
	kollect versioned.Interface

	kollectFactory      kollectinformers.SharedInformerFactory
	kubeFactory         kubeinformers.SharedInformerFactory
	profileLister       kollectlisters.ProfileLister
	targetLister        kollectlisters.TargetLister
	clusterTargetLister kollectlisters.ClusterTargetLister
	scopeLister         kollectlisters.ScopeLister
	clusterScopeLister  kollectlisters.ClusterScopeLister
	memberLister        kollectlisters.MemberClusterLister
	namespaces          corev1listers.NamespaceLister

	events      *plumbing.EventRecorder
	targetQueue workqueue.TypedRateLimitingInterface[targetKey]
	objectQueue workqueue.TypedRateLimitingInterface[queuedObject]
	statusQueue workqueue.TypedRateLimitingInterface[targetKey]

	// The parts with state, each behind its own lock.
	targets   *targetSet
	informers *informerSet
	index     *itemIndex
	walks     *walkFeeder

	itemStore, clusterItemStore itemStore

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

// New builds a collector, its informers and queues; Run starts it. A
// Collector runs once.
func New(cfg Config) (*Collector, error) {
	if cfg.Host == nil || cfg.Loopback == nil || cfg.Mapper == nil || cfg.Items == nil || cfg.ClusterItems == nil {
		return nil, errors.New("the collector needs the host and loopback configurations, the kind mapper and both item stores")
	}
	if cfg.Member != nil && (cfg.Member.Source == nil || cfg.Cluster == "") {
		return nil, errors.New("a member's collector needs the member's configuration and name")
	}
	if cfg.ResyncPeriod <= 0 {
		cfg.ResyncPeriod = DefaultResyncPeriod
	}
	workers := cfg.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	clients, err := plumbing.NewClients(cfg.Host, plumbing.Limits{QPS: 50, Burst: 100}, cfg.Loopback, plumbing.Limits{QPS: 200, Burst: 400})
	if err != nil {
		return nil, err
	}
	// The collected objects and their Namespaces come from the source
	// cluster: the host's, or the member's.
	kube, kc := clients.Kube, clients.Kollect
	sourceKube, sourceConfig := kube, clients.HostConfig
	if cfg.Member != nil {
		sourceConfig = rest.CopyConfig(cfg.Member.Source)
		if sourceConfig.QPS == 0 {
			sourceConfig.QPS, sourceConfig.Burst = 50, 100
		}
		if sourceKube, err = kubernetes.NewForConfig(sourceConfig); err != nil {
			return nil, err
		}
	}
	sourceJSON, err := rest.UnversionedRESTClientFor(dynamic.ConfigFor(sourceConfig))
	if err != nil {
		return nil, err
	}
	metrics.Register()

	c := &Collector{
		cfg:              cfg,
		workers:          workers,
		kube:             kube,
		kollect:          kc,
		targetQueue:      plumbing.NewQueue[targetKey]("kollect_collect_targets"),
		objectQueue:      plumbing.NewQueue[queuedObject]("kollect_collect_objects"),
		statusQueue:      plumbing.NewQueue[targetKey]("kollect_collect_status"),
		targets:          newTargetSet(),
		itemStore:        collectorStore(cfg.Items, cfg),
		clusterItemStore: collectorStore(cfg.ClusterItems, cfg),
		walkRequests:     make(chan struct{}, 1),
	}
	c.index = newItemIndex(c.queueObject, c.queueStatus)
	c.walks = newWalkFeeder(c.objectQueue, workers)
	c.informers = newInformerSet(sourceJSON, cfg.Mapper, informerHandlers{
		object:    c.objectEvent,
		synced:    func(keys []targetKey) { c.queueTargets(keys) },
		listError: func(keys []targetKey) { c.queueStatuses(keys) },
		gone:      func(keys []targetKey) { c.queueTargets(keys) },
	})
	c.events = plumbing.NewEventRecorder(kube, "kollect-collector")

	// This server's kinds, in process when the server offers them.
	c.kollectFactory = kollectinformers.NewSharedInformerFactory(kc, 0)
	informers.InProcess(c.kollectFactory, cfg.Informers, &v1alpha1.Profile{}, &v1alpha1.Target{}, &v1alpha1.ClusterTarget{},
		&v1alpha1.Scope{}, &v1alpha1.ClusterScope{}, &v1alpha1.MemberCluster{})
	api := c.kollectFactory.Kollect().V1alpha1()
	c.profileLister = api.Profiles().Lister()
	c.targetLister = api.Targets().Lister()
	c.clusterTargetLister = api.ClusterTargets().Lister()
	c.scopeLister = api.Scopes().Lister()
	c.clusterScopeLister = api.ClusterScopes().Lister()
	if cfg.Member != nil {
		c.memberLister = api.MemberClusters().Lister()
	}
	c.kubeFactory = kubeinformers.NewSharedInformerFactory(sourceKube, 0)
	c.namespaces = c.kubeFactory.Core().V1().Namespaces().Lister()
	if err := c.addHandlers(); err != nil {
		return nil, err
	}
	return c, nil
}

// addHandlers connects the informers of this server's kinds and of
// Namespaces to the queues.
func (c *Collector) addHandlers() error {
	api := c.kollectFactory.Kollect().V1alpha1()
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
	if c.cfg.Member != nil {
		if _, err := api.MemberClusters().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: c.memberEvent,
			UpdateFunc: func(old, obj any) {
				o, ok1 := old.(*v1alpha1.MemberCluster)
				n, ok2 := obj.(*v1alpha1.MemberCluster)
				if ok1 && ok2 && maps.Equal(o.Labels, n.Labels) && o.Spec.Suspend == n.Spec.Suspend &&
					o.DeletionTimestamp.Equal(n.DeletionTimestamp) {
					return
				}
				c.memberEvent(obj)
			},
			DeleteFunc: c.memberEvent,
		}); err != nil {
			return err
		}
	}
	scopeHandler := cache.ResourceEventHandlerFuncs{
		AddFunc:    c.scopeEvent,
		UpdateFunc: func(_, obj any) { c.scopeEvent(obj) },
		DeleteFunc: c.scopeEvent,
	}
	for inf, h := range map[cache.SharedIndexInformer]cache.ResourceEventHandler{
		api.Targets().Informer():        targetHandler,
		api.ClusterTargets().Informer(): targetHandler,
		api.Scopes().Informer():         scopeHandler,
		api.ClusterScopes().Informer():  scopeHandler,
		api.Profiles().Informer(): cache.ResourceEventHandlerFuncs{
			AddFunc:    c.profileEvent,
			UpdateFunc: func(_, obj any) { c.profileEvent(obj) },
			DeleteFunc: c.profileEvent,
		},
		c.kubeFactory.Core().V1().Namespaces().Informer(): cache.ResourceEventHandlerFuncs{
			AddFunc: c.namespaceEvent,
			UpdateFunc: func(old, obj any) {
				// Only labels decide what a namespace's objects are collected by.
				o, ok1 := old.(metav1.Object)
				n, ok2 := obj.(metav1.Object)
				if ok1 && ok2 && maps.Equal(o.GetLabels(), n.GetLabels()) {
					return
				}
				c.namespaceEvent(obj)
			},
			DeleteFunc: c.namespaceEvent,
		},
	} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	return nil
}

// Run collects until ctx is done, then stops every informer and worker and
// returns.
func (c *Collector) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("collector")
	ctx = klog.NewContext(ctx, logger)
	if err := c.events.Start(ctx); err != nil {
		return err
	}
	defer c.events.Shutdown()

	var wg sync.WaitGroup
	defer func() {
		c.targetQueue.ShutDown()
		c.objectQueue.ShutDown()
		c.statusQueue.ShutDown()
		wg.Wait()
		c.informers.stopAll()
		c.kollectFactory.Shutdown()
		c.kubeFactory.Shutdown()
		// The item gauge sums every cluster's collector: take this one's out.
		for _, key := range c.index.keys() {
			c.index.remove(key)
		}
		logger.Info("Collector stopped")
	}()

	// Start the informers of this server's kinds and of Namespaces, and
	// wait for their caches.
	c.kollectFactory.Start(ctx.Done())
	c.kubeFactory.Start(ctx.Done())
	for _, synced := range []map[reflect.Type]bool{c.kollectFactory.WaitForCacheSync(ctx.Done()), c.kubeFactory.WaitForCacheSync(ctx.Done())} {
		for typ, ok := range synced {
			if !ok {
				return fmt.Errorf("informer of %v did not sync", typ)
			}
		}
	}

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
			wg.Go(f)
		}
	}
	targets := &plumbing.Worker[targetKey]{Queue: c.targetQueue, Sync: c.syncTarget, Kind: named[targetKey]("Target"), Waits: waits, LogLevel: 2}
	objects := &plumbing.Worker[queuedObject]{Queue: c.objectQueue, Kind: named[queuedObject]("Object"), Waits: waits, LogLevel: 2,
		Sync: func(ctx context.Context, k queuedObject) error {
			defer c.walks.feed() // room for a walk's next object
			return c.syncObject(ctx, k.key())
		}}
	statuses := &plumbing.Worker[targetKey]{Queue: c.statusQueue, Sync: c.syncStatus, Kind: named[targetKey]("Status"), Waits: waits, LogLevel: 2}
	run(2, func() { targets.Run(ctx) })
	run(c.workers, func() { objects.Run(ctx) })
	run(2, func() { statuses.Run(ctx) })
	run(1, func() { c.watchItems(ctx, c.itemStore, false, itemsFrom) })
	run(1, func() { c.watchItems(ctx, c.clusterItemStore, true, clusterItemsFrom) })
	run(1, func() { c.resyncLoop(ctx) })
	logger.Info("Collector started", "workers", c.workers, "resyncPeriod", c.cfg.ResyncPeriod)
	<-ctx.Done()
	return nil
}

// waits are the errors that are not a key's failure: a Profile the server
// could not check is tried again within 5 to 10 s (the queue's backoff
// would leave the target uncollected for minutes after the checker is
// free again; jittered, so that targets refused together do not come back
// together), and a write waiting for the lease after a second.
var waits = []plumbing.Wait{
	{Err: expression.ErrCheckerUnavailable, Delay: 5 * time.Second, Jitter: 1, Counted: true},
	{Err: errLeaseUnconfirmed, Delay: time.Second},
}

// named labels a queue's failures with the queue's kind.
func named[K comparable](kind string) func(K) string { return func(K) string { return kind } }

// holding tells whether item writes may go ahead (Config.Holding).
func (c *Collector) holding() bool { return c.cfg.Holding == nil || c.cfg.Holding() }

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

// scopeEvent syncs the targets a Scope or ClusterScope limits.
func (c *Collector) scopeEvent(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	switch s := obj.(type) {
	case *v1alpha1.Scope:
		if ts, err := c.targetLister.Targets(s.Namespace).List(labels.Everything()); err == nil {
			for _, t := range ts {
				c.targetQueue.Add(targetKey{Namespace: t.Namespace, Name: t.Name})
			}
		}
	case *v1alpha1.ClusterScope:
		if ts, err := c.clusterTargetLister.List(labels.Everything()); err == nil {
			for _, t := range ts {
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
	for _, key := range c.targets.collectingNamespaced(ns) {
		c.objectQueue.Add(objectKey{target: key, namespace: ns}.queued())
		if key.Cluster {
			c.statusQueue.AddAfter(key, statusDelay)
		}
	}
}

// objectEvent queues (target, object) for every user of an informer that
// may collect the object. Until the informer has synced, the walk that
// follows the sync syncs every object: the initial list is not queued.
func (c *Collector) objectEvent(e *gvrInformer, obj any) {
	metrics.CollectEvents.WithLabelValues(e.label).Inc()
	if !e.synced.Load() {
		return
	}
	ns, name, ok := source.NameOf(obj)
	if !ok {
		return
	}
	for _, k := range c.informers.usersOf(e) {
		if k.Cluster || k.Namespace == ns {
			c.objectQueue.Add(objectKey{target: k, namespace: ns, name: name}.queued())
		}
	}
}

// queueObject queues one object of a target; queueStatus a target's report.
func (c *Collector) queueObject(key targetKey, objKey string) {
	ns, name, _ := cache.SplitMetaNamespaceKey(objKey)
	c.objectQueue.Add(objectKey{target: key, namespace: ns, name: name}.queued())
}

func (c *Collector) queueStatus(key targetKey) { c.statusQueue.AddAfter(key, statusDelay) }

func (c *Collector) queueTargets(keys []targetKey) {
	for _, k := range keys {
		c.targetQueue.Add(k)
	}
}

func (c *Collector) queueStatuses(keys []targetKey) {
	for _, k := range keys {
		c.queueStatus(k)
	}
}
