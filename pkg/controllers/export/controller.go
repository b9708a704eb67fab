// Package export is the exporter: it delivers the items of each Inventory
// and ClusterInventory to the sinks they reference (DESIGN.md §5, seed 000).
//
// An item set per inventory holds its items (those of the targets it
// selects) with an incrementally maintained checksum, fed by informers on
// InventoryItems and ClusterInventoryItems: list, then watch from that
// resourceVersion. One exporter goroutine per (inventory, sink) follows
// the set: a material change is exported after a short batching window,
// an unchanged payload only when its interval is due, a generation bump
// forces an export. Snapshot sinks get the whole document, database sinks
// the changed rows with the cursor in the same transaction, event sinks
// one event per changed item. Each exporter reports only its own
// status.sinkExports entry, written in process through the status
// subresource (entryWrites batches the entries reported together); the
// registry derives the aggregate on write.
package export

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/firstentries"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/netguard"
)

// loopbackQPS and loopbackBurst limit the controller's requests to its own
// server, and its in-process status entry writes.
const loopbackQPS, loopbackBurst = 200, 400

// Finalizer keeps an Inventory or ClusterInventory until what it exported
// to sinks with deletionPolicy Delete is removed.
const Finalizer = v1alpha1.ExportFinalizer

// Config is what the exporter needs from the server.
type Config struct {
	// Host reaches the host cluster: sink Secrets and Events.
	Host *rest.Config
	// Loopback reaches this server for writes (finalizers, sink status);
	// its kinds are read in process when Informers is set.
	Loopback *rest.Config
	// ClusterName (--cluster-name) names the host cluster in every key a
	// sink stores: rows, paths, subjects, event ids and sources.
	ClusterName string
	// Epoch is this leadership term's (the acquire time of the
	// controllers' Lease, in microseconds): every write carries it, and
	// sinks that can compare refuse an older one.
	Epoch int64
	// ClientMaxAge (--sink-client-max-age) is how long a sink client built
	// from a Secret is used before it is built again; 0 means
	// DefaultClientMaxAge.
	ClientMaxAge time.Duration
	// StateDir holds local working state (git clones).
	StateDir string
	// FileSinkRoot (--file-sink-root) is the directory file sinks write
	// under, each namespace's in DIR/<namespace>; empty refuses them.
	FileSinkRoot string
	// AllowLocalGitSinks (--allow-local-git-sinks) lets git sinks push to
	// repositories on the server's file system (file://).
	AllowLocalGitSinks bool
	// Watchdog is how often an idle exporter refreshes its status entry; 0
	// means DefaultWatchdog.
	Watchdog time.Duration
	// Authorizer re-checks, on every run, that the requester recorded on an
	// inventory still holds `use` on each sink and `list` on the items, and
	// before a sink's Secret is read that the sink's requester may still
	// `get` it (the server's delegated authorizer for the tenancy checks,
	// whose answers live under a second). Nil skips the checks: only a
	// server without authorization has none.
	Authorizer authorizer.Authorizer
	// TenantMode (--tenant-mode) exports nothing for ClusterInventories;
	// deleting one still cleans up its sinks.
	TenantMode bool
	// Dialer makes every connection of the network sinks and their probes
	// (--allow-private-sink-endpoints, --allowed-sink-cidrs,
	// --sink-dns-server). Nil refuses every network sink.
	Dialer *netguard.Dialer
	// RequesterMaxAge (--requester-max-age), when positive, stops the
	// inventories and sinks whose requester was recorded longer ago
	// (RequesterExpired).
	RequesterMaxAge time.Duration
	// SinkExports stores the exporters' status entries, in process.
	SinkExports SinkExportWriter
	// FirstEntries, when set, is offered the controller (once its caches
	// are synced, until it stops) to give new inventories the entries it
	// knows at once (firstentries.go).
	FirstEntries *firstentries.Slot
	// Informers, when set, list and watch this server's kinds in process
	// (the loopback client otherwise).
	Informers informers.Source
}

// SinkExportWriter stores exporters' entries in an inventory's
// status.sinkExports in one update, each replacing the entry of the same
// sink family and name, and returns each entry's outcome and the
// inventory's resourceVersion after the write that stored it. uid, when
// set, must be the inventory's.
type SinkExportWriter interface {
	WriteSinkExports(ctx context.Context, cluster bool, namespace, name, uid string, entries []*v1alpha1.SinkExportStatus) (resourceVersions []string, errs []error)
}

// Controller runs the export controllers: a worker that reconciles
// inventories (syncInventory), one exporter goroutine per (inventory,
// sink), a worker that probes sinks (probe.go) and the sink requester
// loop (sinkrequester.go). Beside its clients, caches and queues it holds
// the running inventories, under their own lock (running.go).
type Controller struct {
	cfg      Config
	watchdog time.Duration

	kube    kubernetes.Interface
	kollect versioned.Interface
	// recorder posts Warning Events through a client with a rate limit of
	// its own: queued behind one tenant's many Events, another's Secret
	// reads (kube) delayed its exports by minutes.
	recorder *plumbing.EventRecorder
	// entryLimiter paces the in-process status entry writes.
	entryLimiter flowcontrol.RateLimiter
	// entries coalesces the entries of an inventory reported together.
	entries *entryWrites

	factory kollectinformers.SharedInformerFactory
	// itemFactory holds the item informers, started with the first
	// inventory: a server that only collects keeps no second copy of the
	// items. itemsStarted belongs to the inventory worker, which starts them.
	itemFactory         kollectinformers.SharedInformerFactory
	itemsStarted        bool
	inventories         kollectlisters.InventoryLister
	clusterInventories  kollectlisters.ClusterInventoryLister
	targets             kollectlisters.TargetLister
	clusterTargets      kollectlisters.ClusterTargetLister
	snapshotSinks       kollectlisters.SnapshotSinkLister
	databaseSinks       kollectlisters.DatabaseSinkLister
	eventSinks          kollectlisters.EventSinkLister
	scopes              kollectlisters.ScopeLister
	clusterScopes       kollectlisters.ClusterScopeLister
	items, clusterItems cache.SharedIndexInformer

	queue  workqueue.TypedRateLimitingInterface[plumbing.InventoryKey]
	probes workqueue.TypedRateLimitingInterface[sinkKey]

	// running holds the inventories being exported: their item sets and
	// exporters.
	running *runningInventories
	// stopped is closed once Run's context is done: the status writes
	// several exporters share, and the first entries offered to the
	// registry, end with the controller rather than with one exporter.
	stopped chan struct{}
}

// New builds the controller: its clients, caches, queues and Event
// recorder. Nothing runs before Run.
func New(cfg Config) (*Controller, error) {
	if cfg.Host == nil || cfg.Loopback == nil {
		return nil, errors.New("the exporter needs the host and loopback configurations")
	}
	if cfg.ClusterName == "" {
		return nil, errors.New("the exporter needs the cluster name")
	}
	if cfg.SinkExports == nil {
		return nil, errors.New("the exporter needs the status entry writer")
	}
	if cfg.ClientMaxAge <= 0 {
		cfg.ClientMaxAge = DefaultClientMaxAge
	}
	if cfg.StateDir == "" {
		cfg.StateDir = filepath.Join(os.TempDir(), "kollect-export")
	}
	watchdog := cfg.Watchdog
	if watchdog <= 0 {
		watchdog = DefaultWatchdog
	}
	clients, err := plumbing.NewClients(cfg.Host, plumbing.Limits{QPS: 20, Burst: 40}, cfg.Loopback, plumbing.Limits{QPS: loopbackQPS, Burst: loopbackBurst})
	if err != nil {
		return nil, err
	}
	eventsCfg := rest.CopyConfig(clients.HostConfig)
	eventsCfg.RateLimiter = nil // the QPS and burst, not a limiter shared with kube
	eventsClient, err := kubernetes.NewForConfig(eventsCfg)
	if err != nil {
		return nil, err
	}
	metrics.RegisterExport()
	c := &Controller{
		cfg:          cfg,
		watchdog:     watchdog,
		kube:         clients.Kube,
		kollect:      clients.Kollect,
		recorder:     plumbing.NewEventRecorder(eventsClient, "kollect-exporter"),
		entryLimiter: flowcontrol.NewTokenBucketRateLimiter(loopbackQPS, loopbackBurst),
		queue:        plumbing.NewQueue[plumbing.InventoryKey]("kollect_export_inventories"),
		probes:       plumbing.NewQueue[sinkKey]("kollect_export_probes"),
		running:      newRunningInventories(),
		stopped:      make(chan struct{}),
	}
	c.entries = newEntryWrites(entryLinger, c.writeEntries)
	c.entries.alone = func(t entryInventory) bool { return c.running.exporterCount(t.inv) <= 1 }
	c.setupInformers()
	return c, nil
}

// setupInformers builds the informers, their listers and the item
// informers' index and transform, and adds the event handlers (handlers.go).
func (c *Controller) setupInformers() {
	c.factory = kollectinformers.NewSharedInformerFactory(c.kollect, 0)
	informers.InProcess(c.factory, c.cfg.Informers, &v1alpha1.Inventory{}, &v1alpha1.ClusterInventory{},
		&v1alpha1.Target{}, &v1alpha1.ClusterTarget{}, &v1alpha1.SnapshotSink{}, &v1alpha1.DatabaseSink{},
		&v1alpha1.EventSink{}, &v1alpha1.Scope{}, &v1alpha1.ClusterScope{})
	k := c.factory.Kollect().V1alpha1()
	c.inventories = k.Inventories().Lister()
	c.clusterInventories = k.ClusterInventories().Lister()
	c.targets = k.Targets().Lister()
	c.clusterTargets = k.ClusterTargets().Lister()
	c.snapshotSinks = k.SnapshotSinks().Lister()
	c.databaseSinks = k.DatabaseSinks().Lister()
	c.eventSinks = k.EventSinks().Lister()
	c.scopes = k.Scopes().Lister()
	c.clusterScopes = k.ClusterScopes().Lister()

	c.itemFactory = kollectinformers.NewSharedInformerFactory(c.kollect, 0)
	informers.InProcess(c.itemFactory, c.cfg.Informers, &v1alpha1.InventoryItem{}, &v1alpha1.ClusterInventoryItem{})
	items := c.itemFactory.Kollect().V1alpha1()
	c.items = items.InventoryItems().Informer()
	c.clusterItems = items.ClusterInventoryItems().Informer()
	for _, inf := range []cache.SharedIndexInformer{c.items, c.clusterItems} {
		_ = inf.AddIndexers(cache.Indexers{targetIndex: byTarget})
		_ = inf.SetTransform(toExported)
	}

	c.addEventHandlers(k)
}

// Run starts the informers, the workers and the loops, and waits until
// ctx is done; it returns after every exporter stopped. A Controller runs
// once.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("controller", "export")
	ctx = klog.NewContext(ctx, logger)
	context.AfterFunc(ctx, func() { close(c.stopped) })
	// However Run returns, what New built stops.
	defer c.probes.ShutDown()
	defer c.queue.ShutDown()
	defer c.recorder.Shutdown()

	if err := c.recorder.Start(ctx); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.itemFactory.Shutdown() // started by the first inventory's sync
	for _, synced := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return nil
		}
	}
	if c.cfg.FirstEntries != nil {
		// Withdrawn as soon as the controller stops: the caches stop with
		// it, and so does the recording of Events.
		withdraw := c.cfg.FirstEntries.Offer(c)
		defer context.AfterFunc(ctx, withdraw)()
		defer withdraw()
	}
	logger.Info("Exporter started")

	// One inventory worker: syncInventory relies on reconciles being
	// sequential (it starts the item informers and the exporters).
	inventories := &plumbing.Worker[plumbing.InventoryKey]{Queue: c.queue, Sync: c.syncInventory, Kind: plumbing.InventoryKey.Kind}
	probes := &plumbing.Worker[sinkKey]{Queue: c.probes, Sync: c.probe, Kind: sinkKey.kind, LogLevel: 2}
	var wg sync.WaitGroup
	wg.Go(func() { inventories.Run(ctx) })
	wg.Go(func() { probes.Run(ctx) })
	wg.Go(func() { c.reprobeLoop(ctx) })
	wg.Go(func() { c.sinkRequesterLoop(ctx) })
	<-ctx.Done()
	c.queue.ShutDown()
	c.probes.ShutDown()
	wg.Wait()

	stopExporters(c.running.dropAll())
	logger.Info("Exporter stopped")
	return nil
}

// stopping reports whether Run's context is done: the caches are stale,
// and Events are no longer recorded.
func (c *Controller) stopping() bool {
	select {
	case <-c.stopped:
		return true
	default:
		return false
	}
}

func (c *Controller) settings() settings {
	return settings{epoch: c.cfg.Epoch, watchdog: c.watchdog, clientMaxAge: c.cfg.ClientMaxAge}
}
