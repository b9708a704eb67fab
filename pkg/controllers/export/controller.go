// Package export is the exporter: it delivers the items of each Inventory
// and ClusterInventory to the sinks they reference (DESIGN.md §5, seed 000).
//
// A view per inventory holds its items (those of the targets it selects)
// with an incrementally maintained checksum, fed by informers on
// InventoryItems and ClusterInventoryItems: list, then watch from that
// resourceVersion. One exporter goroutine per (inventory, sink) follows
// the view: a material change is exported after a short batching window,
// an unchanged payload only when its interval is due, a generation bump
// forces an export. Snapshot sinks get the whole document, database sinks
// the changed rows with the cursor in the same transaction, event sinks
// one event per changed item. Each exporter writes only its own
// status.sinkExports entry (server-side apply, its own field manager); the
// registry derives the aggregate on write.
package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/firstentries"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/tenancy"
)

// loopbackQPS and loopbackBurst limit the controller's requests to its own
// server, and its in-process status entry writes.
const loopbackQPS, loopbackBurst = 200, 400

// Finalizer keeps an Inventory or ClusterInventory until what it exported
// to sinks with deletionPolicy Delete is removed.
const Finalizer = v1alpha1.ExportFinalizer

const targetIndex = "target"

// Config is what the exporter needs from the server.
type Config struct {
	// Host reaches the host cluster: sink Secrets and Events.
	Host *rest.Config
	// Loopback reaches this server: inventories, targets, sinks, scopes, items.
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

// invKey names an Inventory (Cluster false) or a ClusterInventory.
type invKey struct {
	Cluster         bool
	Namespace, Name string
}

func (k invKey) String() string {
	if k.Cluster {
		return "ClusterInventory " + k.Name
	}
	return "Inventory " + k.Namespace + "/" + k.Name
}

func (k invKey) kind() string {
	if k.Cluster {
		return "ClusterInventory"
	}
	return "Inventory"
}

// inventoryState is the controller's state of one inventory.
type inventoryState struct {
	key       invKey
	view      *view
	targets   map[string]bool // selected target names
	exporters map[exporterKey]*exporter
}

// Controller runs the export controllers.
type Controller struct {
	cfg      Config
	watchdog time.Duration

	kube    kubernetes.Interface
	kollect versioned.Interface
	// events posts Warning Events with a rate limit of its own: queued
	// behind one tenant's many Events, another's Secret reads (kube)
	// delayed its exports by minutes.
	events kubernetes.Interface
	// entryLimiter paces the in-process status entry writes.
	entryLimiter flowcontrol.RateLimiter
	// entries coalesces the entries of an inventory reported together.
	entries *entryWrites

	factory kollectinformers.SharedInformerFactory
	// itemFactory holds the item informers, started with the first
	// inventory: a server that only collects keeps no second copy of the items.
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
	// applied holds, per item informer (namespaced, cluster), the
	// resourceVersion of the last item event applied to every view.
	applied [2]atomic.Uint64

	recorder events.EventRecorder
	queue    workqueue.TypedRateLimitingInterface[invKey]
	probes   workqueue.TypedRateLimitingInterface[sinkKey]

	runCtx context.Context

	mu    sync.Mutex
	state map[invKey]*inventoryState
	// byNamespace indexes inventories by the namespace of their items:
	// an Inventory's own, "" for ClusterInventories.
	byNamespace map[string]map[invKey]*inventoryState
}

// New builds the controller.
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
	host := rest.CopyConfig(cfg.Host)
	if host.QPS == 0 {
		host.QPS, host.Burst = 20, 40
	}
	kube, err := kubernetes.NewForConfig(host)
	if err != nil {
		return nil, err
	}
	eventsCfg := rest.CopyConfig(host)
	eventsCfg.RateLimiter = nil // the QPS and burst, not a limiter shared with kube
	eventsClient, err := kubernetes.NewForConfig(eventsCfg)
	if err != nil {
		return nil, err
	}
	loopback := rest.CopyConfig(cfg.Loopback)
	loopback.QPS, loopback.Burst = loopbackQPS, loopbackBurst
	kc, err := versioned.NewForConfig(loopback)
	if err != nil {
		return nil, err
	}
	metrics.RegisterExport()
	c := &Controller{
		cfg:          cfg,
		watchdog:     watchdog,
		kube:         kube,
		events:       eventsClient,
		kollect:      kc,
		entryLimiter: flowcontrol.NewTokenBucketRateLimiter(loopbackQPS, loopbackBurst),
		state:        map[invKey]*inventoryState{},
		byNamespace:  map[string]map[invKey]*inventoryState{},
	}
	c.entries = newEntryWrites(entryLinger, c.writeEntries)
	c.entries.alone = func(t entryTarget) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		s := c.state[t.inv]
		return s == nil || len(s.exporters) <= 1
	}
	return c, nil
}

// Run runs the exporters until ctx is done; it returns after every
// exporter stopped.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("controller", "export")
	ctx = klog.NewContext(ctx, logger)
	c.runCtx = ctx

	c.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[invKey](),
		workqueue.TypedRateLimitingQueueConfig[invKey]{Name: "kollect_export_inventories"})
	c.probes = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[sinkKey](),
		workqueue.TypedRateLimitingQueueConfig[sinkKey]{Name: "kollect_export_probes"})
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.events.EventsV1()})
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return err
	}
	defer broadcaster.Shutdown()
	sch := runtime.NewScheme()
	_ = scheme.AddToScheme(sch)
	_ = v1alpha1.AddToScheme(sch)
	c.recorder = broadcaster.NewRecorder(sch, "kollect-exporter")

	c.setupInformers()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	defer c.itemFactory.Shutdown()
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

	var wg sync.WaitGroup
	wg.Go(func() {
		for c.processInventory(ctx) {
		}
	})
	wg.Go(func() {
		for c.processProbe(ctx) {
		}
	})
	wg.Go(func() { c.reprobeLoop(ctx) })
	wg.Go(func() { c.sinkRequesterLoop(ctx) })
	<-ctx.Done()
	c.queue.ShutDown()
	c.probes.ShutDown()
	wg.Wait()

	c.mu.Lock()
	var all []*exporter
	for _, s := range c.state {
		for _, e := range s.exporters {
			all = append(all, e)
		}
	}
	c.state = map[invKey]*inventoryState{}
	c.byNamespace = map[string]map[invKey]*inventoryState{}
	c.mu.Unlock()
	for _, e := range all {
		e.stop()
	}
	logger.Info("Exporter stopped")
	return nil
}

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

	enqueueInv := func(obj any) {
		switch o := unwrap(obj).(type) {
		case *v1alpha1.Inventory:
			c.queue.Add(invKey{Namespace: o.Namespace, Name: o.Name})
		case *v1alpha1.ClusterInventory:
			c.queue.Add(invKey{Cluster: true, Name: o.Name})
		}
	}
	// The exporters' own status writes come back as updates: only what
	// a reconcile reads may queue one, or every write would cause the next.
	_, _ = k.Inventories().Informer().AddEventHandler(filtered(enqueueInv, inventoryChanged))
	_, _ = k.ClusterInventories().Informer().AddEventHandler(filtered(enqueueInv, inventoryChanged))

	// A target's labels decide which inventories select it; its status
	// (written by the collector) does not.
	targetChanged := func(obj any) {
		switch o := unwrap(obj).(type) {
		case *v1alpha1.Target:
			c.enqueueNamespace(o.Namespace)
		case *v1alpha1.ClusterTarget:
			c.enqueueNamespace("")
		}
	}
	labelsChanged := func(old, obj metav1.Object) bool { return !maps.Equal(old.GetLabels(), obj.GetLabels()) }
	_, _ = k.Targets().Informer().AddEventHandler(filtered(targetChanged, labelsChanged))
	_, _ = k.ClusterTargets().Informer().AddEventHandler(filtered(targetChanged, labelsChanged))

	// Sinks and scopes are read at export time: poke the exporters that use
	// them, and probe changed sinks. A sink's own status writes (probes)
	// must not wake every exporter using it: only spec changes count.
	sinkChanged := func(family v1alpha1.SinkFamily) func(any) {
		return func(obj any) {
			m, ok := unwrap(obj).(metav1.Object)
			if !ok {
				return
			}
			c.pokeSink(family, m.GetNamespace(), m.GetName())
			c.probes.Add(sinkKey{family: family, namespace: m.GetNamespace(), name: m.GetName()})
		}
	}
	_, _ = k.SnapshotSinks().Informer().AddEventHandler(filtered(sinkChanged(v1alpha1.SinkFamilySnapshot), generationChanged))
	_, _ = k.DatabaseSinks().Informer().AddEventHandler(filtered(sinkChanged(v1alpha1.SinkFamilyDatabase), generationChanged))
	_, _ = k.EventSinks().Informer().AddEventHandler(filtered(sinkChanged(v1alpha1.SinkFamilyEvent), generationChanged))
	scopeChanged := func(obj any) {
		if m, ok := unwrap(obj).(metav1.Object); ok {
			c.pokeNamespace(m.GetNamespace())
		}
	}
	// Scope status (quota usage) changes with every item: only the spec matters.
	_, _ = k.Scopes().Informer().AddEventHandler(filtered(scopeChanged, generationChanged))
	_, _ = k.ClusterScopes().Informer().AddEventHandler(filtered(scopeChanged, generationChanged))

	c.itemFactory = kollectinformers.NewSharedInformerFactory(c.kollect, 0)
	informers.InProcess(c.itemFactory, c.cfg.Informers, &v1alpha1.InventoryItem{}, &v1alpha1.ClusterInventoryItem{})
	items := c.itemFactory.Kollect().V1alpha1()
	c.items = items.InventoryItems().Informer()
	c.clusterItems = items.ClusterInventoryItems().Informer()
	byTarget := cache.Indexers{targetIndex: func(obj any) ([]string, error) {
		e, ok := obj.(*exportedItem)
		if !ok {
			return nil, nil
		}
		return []string{e.Namespace + "/" + e.item.Target}, nil
	}}
	_ = c.items.AddIndexers(byTarget)
	_ = c.clusterItems.AddIndexers(byTarget)
	_ = c.items.SetTransform(toExported)
	_ = c.clusterItems.SetTransform(toExported)
	_, _ = c.items.AddEventHandler(c.itemHandler())
	_, _ = c.clusterItems.AddEventHandler(c.itemHandler())
}

// exportedItem is what the item informers keep of an InventoryItem or a
// ClusterInventoryItem: the metadata the informer's keys and relists need,
// and the item in its exported form, converted once as it arrives rather
// than at every reconcile, then shared read-only by every view holding it.
type exportedItem struct {
	metav1.ObjectMeta
	item *sink.Item
	// key is item.Key(), built once: views are keyed by it.
	key string
	// digest is the item's share of a view's checksum: hashed once here,
	// not by each view at each (re)build, where it was most of the time
	// a first export of 10,000 items spent before its first write.
	digest sink.Digest
}

// exported wraps an item in its exported form as the informers keep it.
func exported(it *sink.Item) *exportedItem {
	key := it.Key()
	return &exportedItem{ObjectMeta: metav1.ObjectMeta{Namespace: it.Namespace, Name: it.Name,
		UID: types.UID(it.UID), ResourceVersion: it.ResourceVersion}, item: it, key: key, digest: sink.DigestOf(key, it.Hash)}
}

// itemOrNil is the entry's item, nil for no entry.
func (e *exportedItem) itemOrNil() *sink.Item {
	if e == nil {
		return nil
	}
	return e.item
}

// toExported is the item informers' transform.
func toExported(obj any) (any, error) {
	var it *sink.Item
	switch o := obj.(type) {
	case *v1alpha1.InventoryItem:
		it = fromItem(o)
	case *v1alpha1.ClusterInventoryItem:
		it = fromClusterItem(o)
	default:
		return obj, nil
	}
	return exported(it), nil
}

func unwrap(obj any) any {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// filtered calls f on adds and deletes, and on the updates changed accepts.
func filtered(f func(any), changed func(old, obj metav1.Object) bool) cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: f,
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(metav1.Object)
			n, ok2 := obj.(metav1.Object)
			if !ok1 || !ok2 || changed(o, n) {
				f(obj)
			}
		},
		DeleteFunc: f,
	}
}

func generationChanged(old, obj metav1.Object) bool {
	return old.GetGeneration() != obj.GetGeneration() || !old.GetDeletionTimestamp().Equal(obj.GetDeletionTimestamp())
}

// inventoryChanged accepts the updates a reconcile or an exporter reads:
// the spec, deletion, finalizers and the recorded requester; not the
// sinkExports entries the exporters write.
func inventoryChanged(old, obj metav1.Object) bool {
	if generationChanged(old, obj) || !slices.Equal(old.GetFinalizers(), obj.GetFinalizers()) {
		return true
	}
	requester := func(o metav1.Object) *v1alpha1.RequesterInfo {
		switch o := o.(type) {
		case *v1alpha1.Inventory:
			return o.Status.Requester
		case *v1alpha1.ClusterInventory:
			return o.Status.Requester
		}
		return nil
	}
	return !equality.Semantic.DeepEqual(requester(old), requester(obj))
}

// itemHandler applies item events to the views that include the item.
func (c *Controller) itemHandler() cache.ResourceEventHandlerFuncs {
	upsert := func(obj any) {
		e, ok := unwrap(obj).(*exportedItem)
		if !ok {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, s := range c.byNamespace[e.item.Namespace] {
			if s.targets[e.item.Target] {
				s.view.upsert(e)
			}
		}
		c.markApplied(e.item)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			e, ok := unwrap(obj).(*exportedItem)
			if !ok {
				return
			}
			it := e.item
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, s := range c.byNamespace[it.Namespace] {
				s.view.remove(it.Key(), it)
			}
			if _, unknown := obj.(cache.DeletedFinalStateUnknown); !unknown {
				// The final state of a missed deletion carries an older
				// revision: it proves nothing about what was applied.
				c.markApplied(it)
			}
		},
	}
}

func (c *Controller) enqueueNamespace(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for key := range c.byNamespace[ns] {
		c.queue.Add(key)
	}
	// Inventories without state yet (created before their targets) are
	// queued by their own informer; nothing else to do.
}

// pokeSink wakes the exporters of a sink (its spec or Secret reference changed).
func (c *Controller) pokeSink(family v1alpha1.SinkFamily, ns, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.state {
		for key, e := range s.exporters {
			if key.family == family && key.namespace == ns && key.name == name {
				e.poke()
			}
		}
	}
}

// pokeNamespace wakes the exporters of the inventories a scope governs:
// the namespace's Inventories, or every ClusterInventory for a ClusterScope.
func (c *Controller) pokeNamespace(ns string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.byNamespace[ns] {
		for _, e := range s.exporters {
			e.poke()
		}
	}
}

// markApplied records that the item event of it has been applied to
// every view (called after them, under c.mu): a run that takes its batch
// afterwards may claim every change up to it.
func (c *Controller) markApplied(it *sink.Item) {
	rv, err := strconv.ParseUint(it.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	a := &c.applied[0]
	if it.Namespace == "" {
		a = &c.applied[1]
	}
	if rv > a.Load() {
		a.Store(rv)
	}
}

// appliedRV is the cursor of an inventory's item informer, "" before any event.
func (c *Controller) appliedRV(k invKey) func() string {
	a := &c.applied[0]
	if k.Cluster {
		a = &c.applied[1]
	}
	return func() string {
		if v := a.Load(); v > 0 {
			return strconv.FormatUint(v, 10)
		}
		return ""
	}
}

func (c *Controller) settings() settings {
	return settings{epoch: c.cfg.Epoch, watchdog: c.watchdog, clientMaxAge: c.cfg.ClientMaxAge}
}

// warn emits a Warning Event about an inventory, as the cache holds it,
// in the host cluster.
func (c *Controller) warn(k invKey, reason, note string) {
	obj, err := c.getInventory(k)
	if err != nil || obj == nil {
		return
	}
	c.warnAt(k, string(obj.GetUID()), obj.GetResourceVersion(), reason, note)
}

// warnAt emits a Warning Event about one version of an inventory in the
// host cluster. ClusterInventory events go to the default namespace, as
// Kubernetes does for cluster-scoped objects; their note names no sink,
// since more users read Events there (the built-in view role bound in
// default) than may read the ClusterInventory and its status.
func (c *Controller) warnAt(k invKey, uid, resourceVersion, reason, note string) {
	if k.Cluster {
		note = clusterEventNote
	}
	ref := &corev1.ObjectReference{
		APIVersion:      v1alpha1.SchemeGroupVersion.String(),
		Kind:            k.kind(),
		Namespace:       k.Namespace,
		Name:            k.Name,
		UID:             types.UID(uid),
		ResourceVersion: resourceVersion,
	}
	c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, reason, "Export", "%s", truncate(strings.ToValidUTF8(note, ""), maxNote))
}

// clusterEventNote is the note of every ClusterInventory Event.
const clusterEventNote = "see the ClusterInventory's status.sinkExports for the sinks and why; this Event is in namespace default, which more users may read than the ClusterInventory"

// getInventory reads an inventory from the cache; nil when it is gone.
func (c *Controller) getInventory(k invKey) (metav1.Object, error) {
	var obj metav1.Object
	var err error
	if k.Cluster {
		obj, err = c.clusterInventories.Get(k.Name)
	} else {
		obj, err = c.inventories.Inventories(k.Namespace).Get(k.Name)
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// inventorySpec is what the controller reads of either inventory kind.
type inventorySpec struct {
	meta       *metav1.ObjectMeta
	generation int64
	suspend    bool
	interval   *time.Duration
	refs       []resolvedRef
	status     *v1alpha1.InventoryStatus
	// selector returns whether a target (by name and labels) is exported.
	// It parses the label selector on first use: most readers of a spec
	// (an exporter's run, a create's first entries) match no target, and
	// the parse cost more than the rest of specOf together.
	selector func() (func(name string, lbls map[string]string) bool, error)
}

type resolvedRef struct {
	family          v1alpha1.SinkFamily
	namespace, name string
	interval        *time.Duration
}

func durationPtr(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.Duration
	return &v
}

func specOf(obj metav1.Object) (*inventorySpec, error) {
	out := &inventorySpec{}
	addRefs := func(family v1alpha1.SinkFamily, refs []v1alpha1.SinkReference, defaultNS string) {
		for _, r := range refs {
			ns := r.Namespace
			if ns == "" {
				ns = defaultNS
			}
			out.refs = append(out.refs, resolvedRef{family: family, namespace: ns, name: r.Name, interval: durationPtr(r.ExportMinInterval)})
		}
	}
	switch o := obj.(type) {
	case *v1alpha1.Inventory:
		out.meta, out.generation, out.suspend, out.status = &o.ObjectMeta, o.Generation, o.Spec.Suspend, &o.Status
		out.interval = durationPtr(o.Spec.ExportMinInterval)
		addRefs(v1alpha1.SinkFamilySnapshot, o.Spec.SnapshotSinkRefs, o.Namespace)
		addRefs(v1alpha1.SinkFamilyDatabase, o.Spec.DatabaseSinkRefs, o.Namespace)
		addRefs(v1alpha1.SinkFamilyEvent, o.Spec.EventSinkRefs, o.Namespace)
		ls := o.Spec.TargetSelector
		out.selector = sync.OnceValues(func() (func(string, map[string]string) bool, error) {
			sel, err := parseSelector(ls)
			if err != nil {
				return nil, err
			}
			if sel == nil {
				sel = labels.Everything()
			}
			return func(_ string, l map[string]string) bool { return sel.Matches(labels.Set(l)) }, nil
		})
	case *v1alpha1.ClusterInventory:
		out.meta, out.generation, out.suspend, out.status = &o.ObjectMeta, o.Generation, o.Spec.Suspend, &o.Status
		out.interval = durationPtr(o.Spec.ExportMinInterval)
		sinkNS := o.Spec.SinkNamespace
		if sinkNS == "" {
			sinkNS = "kollect-system"
		}
		addRefs(v1alpha1.SinkFamilySnapshot, o.Spec.SnapshotSinkRefs, sinkNS)
		addRefs(v1alpha1.SinkFamilyDatabase, o.Spec.DatabaseSinkRefs, sinkNS)
		addRefs(v1alpha1.SinkFamilyEvent, o.Spec.EventSinkRefs, sinkNS)
		names := map[string]bool{}
		for _, r := range o.Spec.TargetRefs {
			names[r.Name] = true
		}
		ls := o.Spec.TargetSelector
		out.selector = sync.OnceValues(func() (func(string, map[string]string) bool, error) {
			sel, err := parseSelector(ls)
			if err != nil {
				return nil, err
			}
			all := len(names) == 0 && sel == nil
			return func(name string, l map[string]string) bool {
				return all || names[name] || (sel != nil && sel.Matches(labels.Set(l)))
			}, nil
		})
	default:
		return nil, fmt.Errorf("unexpected inventory type %T", obj)
	}
	return out, nil
}

// parseSelector parses a target selector; nil when there is none.
func parseSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return nil, nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

// processInventory reconciles one inventory from the queue.
func (c *Controller) processInventory(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		if ctx.Err() == nil {
			klog.FromContext(ctx).Info("Reconciling failed; retrying", "inventory", key.String(), "err", err)
			metrics.ReconcileErrors.WithLabelValues(key.kind(), errorClass(err)).Inc()
		}
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func errorClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsForbidden(err):
		return "forbidden"
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "sink"
}

func (c *Controller) reconcile(ctx context.Context, key invKey) error {
	obj, err := c.getInventory(key)
	if err != nil {
		return err
	}
	if obj == nil {
		c.drop(key)
		return nil
	}
	// Only this worker starts them: reconciles are sequential.
	if !c.itemsStarted {
		c.itemFactory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), c.items.HasSynced, c.clusterItems.HasSynced) {
			return ctx.Err()
		}
		c.itemsStarted = true
	}
	spec, err := specOf(obj)
	if err != nil {
		return err
	}
	if spec.meta.DeletionTimestamp != nil {
		c.drop(key)
		if !slices.Contains(spec.meta.Finalizers, Finalizer) {
			return nil
		}
		if err := c.cleanup(ctx, key, spec); err != nil {
			return err
		}
		return c.setFinalizer(ctx, key, false)
	}
	// The registry adds the finalizer on create; this restores one that an
	// update removed, or that an object older than that rule never had.
	if !slices.Contains(spec.meta.Finalizers, Finalizer) {
		if err := c.setFinalizer(ctx, key, true); err != nil {
			return err
		}
	}

	selected, err := c.selectedTargets(key, spec)
	if err != nil {
		return err
	}

	c.mu.Lock()
	s := c.state[key]
	if s == nil {
		s = &inventoryState{key: key, view: newView(c.appliedRV(key)), exporters: map[exporterKey]*exporter{}}
		c.state[key] = s
		ns := key.Namespace
		if key.Cluster {
			ns = ""
		}
		if c.byNamespace[ns] == nil {
			c.byNamespace[ns] = map[invKey]*inventoryState{}
		}
		c.byNamespace[ns][key] = s
	}
	if !maps.Equal(s.targets, selected) || s.targets == nil {
		s.targets = selected
		s.view.replace(c.itemsOf(key, selected))
	}

	desired := map[exporterKey]bool{}
	if !spec.suspend {
		for _, r := range spec.refs {
			desired[exporterKey{inv: key, family: r.family, namespace: r.namespace, name: r.name}] = true
		}
	}
	var stopping []*exporter
	for k, e := range s.exporters {
		if !desired[k] {
			stopping = append(stopping, e)
			delete(s.exporters, k)
		}
	}
	for k := range desired {
		if e, ok := s.exporters[k]; ok {
			e.poke() // the spec may have changed: generation, intervals
			continue
		}
		e := newExporter(c, k, s.view)
		s.exporters[k] = e
		e.start(c.runCtx)
	}
	c.mu.Unlock()
	for _, e := range stopping {
		e.stop()
	}
	return nil
}

// itemsOf reads the items of the selected targets from the informer cache.
func (c *Controller) itemsOf(key invKey, targets map[string]bool) map[string]*exportedItem {
	inf, ns := c.items, key.Namespace
	if key.Cluster {
		inf, ns = c.clusterItems, ""
	}
	per := make([][]any, 0, len(targets))
	n := 0
	for t := range targets {
		objs, _ := inf.GetIndexer().ByIndex(targetIndex, ns+"/"+t)
		per = append(per, objs)
		n += len(objs)
	}
	out := make(map[string]*exportedItem, n)
	for _, objs := range per {
		for _, obj := range objs {
			if e, ok := obj.(*exportedItem); ok {
				out[e.key] = e
			}
		}
	}
	return out
}

// drop stops an inventory's exporters and forgets it.
func (c *Controller) drop(key invKey) {
	c.mu.Lock()
	s := c.state[key]
	delete(c.state, key)
	ns := key.Namespace
	if key.Cluster {
		ns = ""
	}
	delete(c.byNamespace[ns], key)
	c.mu.Unlock()
	if s == nil {
		return
	}
	for _, e := range s.exporters {
		e.stop()
	}
}

// setFinalizer adds or removes the export finalizer with a fresh read.
func (c *Controller) setFinalizer(ctx context.Context, key invKey, present bool) error {
	api := c.kollect.KollectV1alpha1()
	if key.Cluster {
		return finalizers.Set[*v1alpha1.ClusterInventory](ctx, api.ClusterInventories(), key.Name, Finalizer, fieldManager, present)
	}
	return finalizers.Set[*v1alpha1.Inventory](ctx, api.Inventories(key.Namespace), key.Name, Finalizer, fieldManager, present)
}

const fieldManager = "kollect-exporter"

// cleanup removes what a deleted inventory exported to the sinks whose
// deletionPolicy is Delete: the document, the rows, or a delete event per item.
func (c *Controller) cleanup(ctx context.Context, key invKey, spec *inventorySpec) error {
	inv := c.sinkInventory(key, spec.meta)
	// The view was dropped with the exporters: read the items again. A
	// selector that cannot be read leaves the export in place rather than
	// removing it without its items' deletions.
	items, err := c.itemsOfSpec(key, spec)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range spec.refs {
		obj, err := c.sinkObject(sinkKey{family: r.family, namespace: r.namespace, name: r.name})
		if apierrors.IsNotFound(err) {
			continue // nothing to clean up where the sink no longer exists
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if obj.policy != v1alpha1.DeletionPolicyDelete {
			continue
		}
		client, err := c.connect(ctx, obj)
		var denial *tenancy.Denial
		if errors.As(err, &denial) {
			// The sink may no longer be used on its requester's authority:
			// what it holds stays, rather than the deletion waiting forever.
			c.warn(key, "CleanupSkipped", fmt.Sprintf("the export in %s %s/%s is left in place: %s", r.family, r.namespace, r.name, denial.Message))
			continue
		}
		if err != nil {
			// connect scrubs its own errors.
			errs = append(errs, fmt.Errorf("%s/%s/%s: %w", r.family, r.namespace, r.name, err))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, exportTimeout)
		err = client.remove(cctx, inv, items, c.cfg.Epoch)
		cancel()
		_ = client.Close()
		if err != nil {
			msg := client.scrub(err.Error())
			c.warn(key, "CleanupFailed", fmt.Sprintf("removing the export from %s %s/%s failed: %s", r.family, r.namespace, r.name, msg))
			errs = append(errs, errors.New(msg))
		}
	}
	return errors.Join(errs...)
}

// selectedTargets names the targets the inventory key exports.
func (c *Controller) selectedTargets(key invKey, spec *inventorySpec) (map[string]bool, error) {
	selects, err := spec.selector()
	if err != nil {
		return nil, err
	}
	selected := map[string]bool{}
	add := func(t metav1.Object) {
		if selects(t.GetName(), t.GetLabels()) {
			selected[t.GetName()] = true
		}
	}
	if key.Cluster {
		targets, err := c.clusterTargets.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			add(t)
		}
	} else {
		targets, err := c.targets.Targets(key.Namespace).List(labels.Everything())
		if err != nil {
			return nil, err
		}
		for _, t := range targets {
			add(t)
		}
	}
	return selected, nil
}

func (c *Controller) itemsOfSpec(key invKey, spec *inventorySpec) ([]*sink.Item, error) {
	selected, err := c.selectedTargets(key, spec)
	if err != nil {
		return nil, err
	}
	m := c.itemsOf(key, selected)
	out := make([]*sink.Item, 0, len(m))
	for _, e := range m {
		out = append(out, e.item)
	}
	return out, nil
}

func (c *Controller) sinkInventory(key invKey, meta *metav1.ObjectMeta) sink.Inventory {
	return sink.Inventory{Cluster: c.cfg.ClusterName, Kind: key.kind(), Namespace: key.Namespace, Name: key.Name, UID: string(meta.UID)}
}

// writeEntry stores an exporter's status entry, with the entries of the
// inventory's other exporters reported meanwhile (entryWrites).
func (c *Controller) writeEntry(ctx context.Context, k exporterKey, uid string, entry *v1alpha1.SinkExportStatus, warning string) error {
	return c.entries.put(ctx, c.runCtx, k, uid, entry, warning)
}

// writeEntries stores a batch of one inventory's entries in one update,
// then emits the Warning Events of the entries stored: one per reason and
// write, regarding the inventory as that write left it. The recorder
// makes Events about one object version with one reason a series that
// keeps the first note; each write is a version of its own, and its note
// names every sink.
func (c *Controller) writeEntries(ctx context.Context, t entryTarget, b *entryBatch) []error {
	// In process, these writes pass no client rate limit or priority and
	// fairness: this limit, the loopback client's, stands in for them.
	// One outcome per entry: any the writer does not give is a failure.
	rvs, errs := make([]string, len(b.entries)), slices.Repeat([]error{errNotWritten}, len(b.entries))
	if err := c.entryLimiter.Wait(ctx); err != nil {
		errs = slices.Repeat([]error{err}, len(b.entries))
	} else {
		wrote, outcomes := c.cfg.SinkExports.WriteSinkExports(ctx, t.inv.Cluster, t.inv.Namespace, t.inv.Name, t.uid, b.entries)
		copy(rvs, wrote)
		copy(errs, outcomes)
	}
	var w warnings
	// last holds each exporter's last entry in the batch: an earlier one
	// (a restarted exporter's) was written over, and says nothing now.
	last := map[exporterKey]int{}
	for i, k := range b.keys {
		last[k] = i
	}
	for i, err := range errs {
		result := "ok"
		if err != nil {
			result = "error"
		}
		metrics.StatusEntryWrites.WithLabelValues(t.inv.kind(), result).Inc()
		if err != nil || b.warnings[i] == "" || last[b.keys[i]] != i {
			continue
		}
		k := b.keys[i]
		w.add(rvs[i], b.entries[i].Reason, k.family, k.namespace, k.name, b.warnings[i])
	}
	uid := t.uid
	if uid == "" && len(w.order) > 0 {
		// A write for whatever object holds the name: the cache's.
		obj, err := c.getInventory(t.inv)
		if err != nil || obj == nil {
			return errs
		}
		uid = string(obj.GetUID())
	}
	w.emit(c, t.inv, uid)
	return errs
}

// warnings are the Warning Events of entries written together: one per
// write (resourceVersion) and reason, its note naming every sink.
type warnings struct {
	order []warning
	notes map[warning][]sinkNote
}

type warning struct{ rv, reason string }

func (w *warnings) add(rv, reason string, family v1alpha1.SinkFamily, namespace, name, text string) {
	ev := warning{rv: rv, reason: reason}
	if w.notes == nil {
		w.notes = map[warning][]sinkNote{}
	}
	if _, ok := w.notes[ev]; !ok {
		w.order = append(w.order, ev)
	}
	w.notes[ev] = append(w.notes[ev], sinkNote{sink: fmt.Sprintf("%s %s/%s", family, namespace, name), text: text})
}

func (w *warnings) emit(c *Controller, k invKey, uid string) {
	for _, ev := range w.order {
		c.warnAt(k, uid, ev.rv, ev.reason, joinNotes(w.notes[ev]))
	}
}

// resolved is an exporter's configuration for one run, read from the caches.
type resolved struct {
	inventory  sink.Inventory
	generation int64
	entry      *v1alpha1.SinkExportStatus
	sinkFound  bool
	sink       *sinkObject
	sinkType   string
	interval   time.Duration
}

// entrySays reports whether the exporter's entry already shows this
// outcome, reason and message at this generation: writing it again would
// change nothing a reader looks at.
func (r *resolved) entrySays(outcome v1alpha1.ExportOutcome, reason, message string) bool {
	e := r.entry
	return e != nil && e.Outcome == outcome && e.Reason == reason && e.ObservedGeneration == r.generation &&
		e.Message == entryMessage(message)
}

// resolveFailure is a reference that does not resolve; reported as the entry's reason.
type resolveFailure struct{ reason, message string }

func (r *resolveFailure) Error() string { return r.reason + ": " + r.message }

// errInventoryDeleting is resolve's answer for an inventory being deleted.
var errInventoryDeleting = errors.New("the inventory is being deleted")

// resolve reads an exporter's configuration and re-checks its reference:
// the inventory's requester must not have expired, the sink must exist, the
// Scopes (or ClusterScopes) must still allow it, the requester recorded on
// the inventory must still hold `use` on it and `list` on the items, and
// the sink's own requester must not have expired and may still `get` its
// Secret. A reference that fails is a resolveFailure, reported in the entry.
func (c *Controller) resolve(ctx context.Context, k exporterKey) (*resolved, error) {
	obj, err := c.getInventory(k.inv)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("inventory gone")
	}
	spec, err := specOf(obj)
	if err != nil {
		return nil, err
	}
	if spec.meta.DeletionTimestamp != nil {
		// The controller stops the exporters and cleans up. Until then an
		// exporter must not take the deletion's generation bump for a
		// spec change and restate everything it is about to remove.
		return nil, errInventoryDeleting
	}
	out := &resolved{inventory: c.sinkInventory(k.inv, spec.meta), generation: spec.generation, sinkType: "unknown"}
	for i := range spec.status.SinkExports {
		e := &spec.status.SinkExports[i]
		if e.Family == k.family && e.Name == k.name && (e.Namespace == "" || e.Namespace == k.namespace) {
			out.entry = e
		}
	}
	var ref *resolvedRef
	for i := range spec.refs {
		r := &spec.refs[i]
		if r.family == k.family && r.namespace == k.namespace && r.name == k.name {
			ref = r
		}
	}
	if ref == nil {
		return nil, errors.New("reference removed")
	}
	kind, refType := k.inv.kind(), string(k.family)+"Sink"
	sinkObj, failure, err := c.resolveCached(k)
	if failure != nil {
		if failure.reason == v1alpha1.ReasonSinkNotFound {
			metrics.Resolved(kind, refType, metrics.ResolutionNotFound)
		}
		return out, failure
	}
	if err != nil {
		return nil, err
	}
	out.sinkFound, out.sink, out.sinkType = true, sinkObj, sinkObj.typ
	limits := c.limits(k.inv)
	denial := tenancy.RequesterExpired(spec.status.Requester, c.cfg.RequesterMaxAge, time.Now())
	if denial == nil {
		denial = limits.Sink(kollect.SinkFamily(k.family), k.namespace, k.name, k.inv.Cluster)
	}
	if denial == nil && c.cfg.Authorizer != nil {
		denial, err = tenancy.MayUse(ctx, c.cfg.Authorizer, spec.status.Requester, tenancy.ResourceOf(kollect.SinkFamily(k.family)), k.namespace, k.name)
		if err != nil {
			return nil, err
		}
	}
	if denial == nil && c.cfg.Authorizer != nil {
		// An export is a read of the items, on the requester's authority.
		itemsNS := k.inv.Namespace
		if k.inv.Cluster {
			itemsNS = ""
		}
		if denial, err = tenancy.MayListItems(ctx, c.cfg.Authorizer, spec.status.Requester, itemsNS); err != nil {
			return nil, err
		}
	}
	if denial == nil {
		if denial, err = c.sinkDenial(ctx, sinkObj); err != nil {
			return nil, err
		}
	}
	if denial != nil {
		metrics.Resolved(kind, refType, metrics.ResolutionForbidden)
		return out, &resolveFailure{reason: denial.Reason, message: denial.Message}
	}
	metrics.Resolved(kind, refType, metrics.ResolutionOK)
	out.interval = EffectiveInterval(ref.interval, sinkObj.interval, spec.interval, limits.Floor())
	return out, nil
}

// resolveCached runs the checks of resolve that read nothing but the
// caches, in resolve's order: tenant mode exports no ClusterInventory, and
// the sink must exist.
func (c *Controller) resolveCached(k exporterKey) (*sinkObject, *resolveFailure, error) {
	if c.cfg.TenantMode && k.inv.Cluster {
		d := tenancy.TenantModeDenial(k.inv.kind())
		return nil, &resolveFailure{reason: d.Reason, message: d.Message}, nil
	}
	sinkObj, err := c.sinkObject(sinkKey{family: k.family, namespace: k.namespace, name: k.name})
	if apierrors.IsNotFound(err) {
		return nil, &resolveFailure{reason: v1alpha1.ReasonSinkNotFound,
			message: fmt.Sprintf("%sSink %s/%s does not exist", k.family, k.namespace, k.name)}, nil
	}
	return sinkObj, nil, err
}

// limits are the Scopes of the inventory's namespace, or the ClusterScopes
// for a ClusterInventory; all of them apply, the strictest wins.
func (c *Controller) limits(k invKey) tenancy.Limits {
	if k.Cluster {
		list, _ := c.clusterScopes.List(labels.Everything())
		return tenancy.ClusterScopeLimits(list)
	}
	list, _ := c.scopes.Scopes(k.Namespace).List(labels.Everything())
	return tenancy.ScopeLimits(list)
}

// sinkObject reads a sink from the cache.
func (c *Controller) sinkObject(k sinkKey) (*sinkObject, error) {
	var obj metav1.Object
	var err error
	switch k.family {
	case v1alpha1.SinkFamilySnapshot:
		obj, err = c.snapshotSinks.SnapshotSinks(k.namespace).Get(k.name)
	case v1alpha1.SinkFamilyDatabase:
		obj, err = c.databaseSinks.DatabaseSinks(k.namespace).Get(k.name)
	default:
		obj, err = c.eventSinks.EventSinks(k.namespace).Get(k.name)
	}
	if err != nil {
		return nil, err
	}
	return sinkObjectOf(obj)
}

// readSecret reads a sink's Secret from the host cluster. Its data never
// leaves the sink client. A sink that may not be used on its requester's
// authority (sinkDenial) is refused with the *tenancy.Denial, before
// anything is read: the exporter and the prober build every sink client
// through here.
func (c *Controller) readSecret(ctx context.Context, obj *sinkObject) (sink.Secret, string, error) {
	denial, err := c.sinkDenial(ctx, obj)
	if err != nil {
		return nil, "", err
	}
	if denial != nil {
		return nil, "", denial
	}
	ref := obj.secretRef
	if ref == nil {
		return nil, "", nil
	}
	s, err := c.kube.CoreV1().Secrets(obj.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("Secret %s/%s does not exist: %w", obj.GetNamespace(), ref.Name, sink.ErrPermanent)
		}
		return nil, "", fmt.Errorf("reading Secret %s/%s: %w", obj.GetNamespace(), ref.Name, err)
	}
	return sink.Secret(s.Data), s.ResourceVersion, nil
}

// sinkDenial re-checks what a sink does on its own requester's authority:
// the requester must not have expired (--requester-max-age) and, for a
// sink with a secretRef, must still be allowed to `get` the Secret. An
// error means the authorizer could not answer: retry, change nothing.
func (c *Controller) sinkDenial(ctx context.Context, obj *sinkObject) (*tenancy.Denial, error) {
	requester := obj.status.Requester
	if d := tenancy.RequesterExpired(requester, c.cfg.RequesterMaxAge, time.Now()); d != nil {
		d.Message = "the sink's requester: " + d.Message
		return d, nil
	}
	ref := obj.secretRef
	if ref == nil || c.cfg.Authorizer == nil {
		return nil, nil
	}
	return tenancy.MayGetSecret(ctx, c.cfg.Authorizer, requester, obj.GetNamespace(), ref.Name)
}

// sinkFieldManager owns the Ready condition of a sink its requester may
// no longer use; the prober owns it otherwise.
const sinkFieldManager = "kollect-sink-requester"

// sinkRequesterLoop re-checks every sink's requester each watchdog period,
// so that a sink no Inventory uses turns Ready=False (SecretForbidden,
// RequesterExpired) too. It writes a sink's status only on a transition:
// into a denial it sets Ready=False with the denial's reason; out of one it
// has the prober test the sink again, which then writes Ready.
func (c *Controller) sinkRequesterLoop(ctx context.Context) {
	t := time.NewTicker(c.watchdog)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, obj := range c.allSinks() {
			if ctx.Err() != nil {
				return
			}
			c.checkSinkRequester(ctx, sinkKey{family: obj.family, namespace: obj.GetNamespace(), name: obj.GetName()}, obj)
		}
	}
}

// requesterReasons are the Ready reasons sinkRequesterLoop writes.
var requesterReasons = map[string]bool{v1alpha1.ReasonSecretForbidden: true, v1alpha1.ReasonRequesterExpired: true}

func (c *Controller) checkSinkRequester(ctx context.Context, key sinkKey, obj *sinkObject) {
	if obj.GetDeletionTimestamp() != nil {
		return
	}
	denial, err := c.sinkDenial(ctx, obj)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot re-check a sink's requester; retrying next period", "sink", key, "err", err)
		return
	}
	ready := obj.ready()
	if denial == nil {
		if ready != nil && ready.Status == metav1.ConditionFalse && requesterReasons[ready.Reason] {
			c.probes.Add(key)
		}
		return
	}
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == denial.Reason && ready.Message == denial.Message {
		return
	}
	now := metav1.Now()
	cond := metav1apply.Condition().WithType(v1alpha1.ConditionReady).WithStatus(metav1.ConditionFalse).
		WithReason(denial.Reason).WithMessage(truncate(denial.Message, 1024)).
		WithObservedGeneration(obj.GetGeneration()).WithLastTransitionTime(now)
	if ready != nil && ready.Status == metav1.ConditionFalse {
		cond.WithLastTransitionTime(ready.LastTransitionTime)
	}
	if err := applySinkStatus(ctx, c.kollect, key, applyv1alpha1.SinkStatus().WithConditions(cond), sinkFieldManager); err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Writing a sink's requester denial failed", "sink", key, "err", err)
		}
		return
	}
	c.recorder.Eventf(&corev1.ObjectReference{
		APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: string(key.family) + "Sink",
		Namespace: key.namespace, Name: key.name, UID: obj.GetUID(), ResourceVersion: obj.GetResourceVersion(),
	}, nil, corev1.EventTypeWarning, denial.Reason, "UseSink", "%s", truncate(denial.Message, 1000))
}
