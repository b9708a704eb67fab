// Package fleet runs the collection of member clusters. Every replica runs
// it; each member is collected by the replica that owns it (the ring of
// pkg/controllers/shard) and only while that replica holds the member's
// Lease kollect-member-<name> (pkg/controllers/lease), which also fences
// every item and status write. For each member it owns, a replica reads
// the kubeconfig Secret on the authority of the user who registered it,
// builds a guarded client (pkg/memberconfig), runs a collector for the
// member (pkg/controllers/collect, member mode), probes the member, and
// reports in the MemberCluster's status. A deleted MemberCluster's items
// are deleted before its finalizer goes.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/collect"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/lease"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/controllers/shard"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectinformers "kollect.dev/kollect/pkg/generated/informers/externalversions"
	kollectlisters "kollect.dev/kollect/pkg/generated/listers/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/itemstore"
	"kollect.dev/kollect/pkg/kindmapper"
	"kollect.dev/kollect/pkg/memberconfig"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/tenancy"
)

const (
	fieldManager = "kollect-fleet"
	// DefaultProbeInterval is how often a member is asked for its version:
	// an unreachable member is reported within two intervals and the
	// probe's timeout.
	DefaultProbeInterval = 10 * time.Second
	probeTimeout         = 5 * time.Second
	// classSecretForbidden: the member's requester may not get the Secret.
	classSecretForbidden = "SecretForbidden"
	// classNameTaken: the member is named like the host cluster
	// (--cluster-name), whose items carry that name already.
	classNameTaken = "NameTaken"
)

// Config is what the fleet controller needs from the server.
type Config struct {
	// Collect is the host collector's configuration; each member's
	// collector is a copy with Cluster and Member set.
	Collect collect.Config
	// Dialer makes every connection to members: the sink endpoint policy.
	Dialer *netguard.Dialer
	// AllowExec (--allow-member-exec) admits exec and auth-provider
	// kubeconfigs.
	AllowExec bool
	// ProbeInterval is the time between probes; 0 means DefaultProbeInterval.
	ProbeInterval time.Duration
	// Ring, when set, spreads the members over the live replicas, and
	// each member's collection runs only while this replica holds the
	// member's Lease in LeaseNamespace. Unset, this one replica collects
	// every member without Leases.
	Ring           *shard.Ring
	LeaseNamespace string
	Leases         lease.Timings
}

// MemberLeasePrefix starts the name of each member's Lease.
const MemberLeasePrefix = "kollect-member-"

// Controller runs one collector per MemberCluster.
type Controller struct {
	cfg     Config
	kube    kubernetes.Interface
	kollect versioned.Interface

	factory kollectinformers.SharedInformerFactory
	members kollectlisters.MemberClusterLister
	targets kollectlisters.ClusterTargetLister
	queue   workqueue.TypedRateLimitingInterface[string]

	// mu guards owned: the members this replica owns, by name.
	mu    sync.Mutex
	owned map[string]*member
}

// member is a member cluster this replica owns: the campaign for its
// Lease and, while the Lease is held, its collection.
type member struct {
	cancel context.CancelFunc // ends the campaign
	done   chan struct{}      // closed once it ended and the Lease is released

	mu     sync.Mutex
	term   context.Context // while the Lease is held
	fenced func() bool     // the term's fence; nil without a ring
	run    *collection
}

// collection is one member's running collector and what its probes found.
type collection struct {
	fingerprint string // what the collector was built from
	cancel      context.CancelFunc
	done        chan struct{}
	collector   *collect.Collector

	mu               sync.Mutex
	version          string
	lastSync         time.Time
	unreachableSince time.Time
	errClass, err    string
}

// New builds the controller and its informer; Run starts it.
func New(cfg Config) (*Controller, error) {
	if cfg.Collect.Host == nil || cfg.Collect.Loopback == nil || cfg.Dialer == nil {
		return nil, errors.New("the fleet controller needs the host and loopback configurations and the dialer")
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.Ring != nil {
		if err := cfg.Leases.Validate(); err != nil {
			return nil, err
		}
	}
	clients, err := plumbing.NewClients(cfg.Collect.Host, plumbing.Limits{QPS: 20, Burst: 40}, cfg.Collect.Loopback, plumbing.Limits{QPS: 50, Burst: 100})
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, kube: clients.Kube, kollect: clients.Kollect,
		queue: plumbing.NewQueue[string]("kollect_fleet_members"), owned: map[string]*member{}}
	c.factory = kollectinformers.NewSharedInformerFactory(clients.Kollect, 0)
	informers.InProcess(c.factory, cfg.Collect.Informers, &v1alpha1.MemberCluster{}, &v1alpha1.ClusterTarget{})
	inf := c.factory.Kollect().V1alpha1().MemberClusters()
	c.members = inf.Lister()
	c.targets = c.factory.Kollect().V1alpha1().ClusterTargets().Lister()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, obj any) {
			// Status writes (ours) change nothing to act on.
			o, ok1 := old.(*v1alpha1.MemberCluster)
			n, ok2 := obj.(*v1alpha1.MemberCluster)
			if ok1 && ok2 && o.Generation == n.Generation && o.DeletionTimestamp.Equal(n.DeletionTimestamp) &&
				maps.Equal(o.Labels, n.Labels) && len(o.Finalizers) == len(n.Finalizers) {
				return
			}
			c.enqueue(obj)
		},
		DeleteFunc: c.enqueue,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Controller) enqueueAll() {
	list, err := c.members.List(labels.Everything())
	if err != nil {
		return
	}
	for _, mc := range list {
		c.queue.Add(mc.Name)
	}
	metrics.FleetReplicas.Set(float64(len(c.cfg.Ring.Replicas())))
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// Run runs until ctx is done, then stops every member's collector.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("fleet")
	ctx = klog.NewContext(ctx, logger)
	metrics.RegisterFleet()
	defer func() {
		c.queue.ShutDown()
		c.factory.Shutdown()
		c.mu.Lock()
		owned := c.owned
		c.owned = map[string]*member{}
		c.mu.Unlock()
		// Every collection stops, then every Lease is released.
		for _, m := range owned {
			m.cancel()
		}
		for name, m := range owned {
			<-m.done
			forget(name)
		}
	}()
	if c.cfg.Ring != nil {
		// A change of the live replicas may move any member.
		defer c.cfg.Ring.OnChange(c.enqueueAll)()
	}
	c.factory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer of %v did not sync", typ)
		}
	}
	w := &plumbing.Worker[string]{Queue: c.queue, Sync: c.sync, Kind: func(string) string { return "MemberCluster" }, LogLevel: 2}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { w.Run(ctx) })
	}
	logger.Info("Fleet controller started")
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

// sync makes one member's collection match its MemberCluster and this
// replica's ownership: a member another replica owns is released; one this
// replica owns is campaigned for, and while its Lease is held, collected
// (started, restarted with a new kubeconfig, or stopped), reported, and
// once deleted, its items deleted and its finalizer removed.
func (c *Controller) sync(ctx context.Context, name string) error {
	mc, err := c.members.Get(name)
	if apierrors.IsNotFound(err) {
		// Gone: its Lease goes too, once no replica holds it. Every
		// replica tries (one read where it is gone already): the owner
		// whose deletion of it failed, and a replica that held it after
		// the owner finished (the two disagreed on the owner).
		c.release(name)
		if c.cfg.Ring != nil {
			return c.deleteReleasedLease(ctx, name) // retried on error
		}
		return nil
	}
	if err != nil {
		return err
	}
	if c.cfg.Ring != nil && !c.cfg.Ring.Owns(name) {
		c.release(name)
		return nil
	}
	m := c.own(ctx, name)
	if !m.holding() {
		if m.inTerm() {
			// Held, its renewal not confirmed just now: try again soon
			// rather than drop what this sync was for.
			c.queue.AddAfter(name, c.cfg.Leases.RetryPeriod)
		}
		return nil // else the campaign queues the member once it holds the Lease
	}
	// The host's items name the host's cluster: a member of that name
	// would take them for its own (and delete them with it).
	hostName := name == c.cfg.Collect.Cluster
	if mc.DeletionTimestamp != nil {
		m.stopCollection()
		if !hostName {
			if err := c.deleteItems(ctx, m, name); err != nil {
				return err
			}
		}
		if err := c.reportToTargets(ctx, m, mc, nil); err != nil {
			return err
		}
		if err := finalizers.Set[*v1alpha1.MemberCluster](ctx, c.kollect.KollectV1alpha1().MemberClusters(), name, v1alpha1.ItemsFinalizer, fieldManager, false); err != nil {
			return err
		}
		// The member is gone: so is its Lease, once released.
		c.release(name)
		if c.cfg.Ring != nil {
			if err := c.deleteReleasedLease(ctx, name); err != nil {
				// The MemberCluster's removal syncs it again, and retries.
				klog.FromContext(ctx).Info("Cannot delete a deleted member's Lease; trying again", "member", name, "err", err)
			}
		}
		return nil
	}
	if !hasFinalizer(mc) {
		if err := finalizers.Set[*v1alpha1.MemberCluster](ctx, c.kollect.KollectV1alpha1().MemberClusters(), name, v1alpha1.ItemsFinalizer, fieldManager, true); err != nil {
			return err
		}
	}

	if hostName {
		m.stopCollection()
		// Not collected: the entries of a collector that ran before the
		// host took its name (a rename, an upgrade) are withdrawn.
		if err := c.reportToTargets(ctx, m, mc, nil); err != nil {
			return err
		}
		return c.report(ctx, mc, m, nil, classNameTaken, fmt.Sprintf(
			"the host cluster is named %q (--cluster-name): its items carry that name, so a member cannot; register it under another name", name))
	}

	// The kubeconfig, read on the authority of the member's requester.
	cfg, fingerprint, class, err := c.memberConfig(ctx, mc, m.fingerprint())
	if err != nil {
		if class == "" {
			return err // transient: retried
		}
		// Unusable: the collector stops, the items stay, and the
		// ClusterTargets say since when the member is not collected.
		m.stopCollection()
		if err := c.leaveUnselected(ctx, m, mc); err != nil {
			return err
		}
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		if err := c.reportToTargets(ctx, m, mc, &now); err != nil {
			return err
		}
		// No probe runs: the Secret is read again after a probe interval,
		// so that a fixed one is taken up without an edit of the member.
		c.queue.AddAfter(name, c.cfg.ProbeInterval)
		return c.report(ctx, mc, m, nil, class, err.Error())
	}
	run := c.start(mc, m, cfg, fingerprint)
	if run == nil && cfg == nil {
		// The collector it was to keep stopped meanwhile: build it anew.
		c.queue.Add(name)
		return nil
	}
	return c.report(ctx, mc, m, run, "", "")
}

// fingerprint is what the member's running collector was built from; ""
// when none runs.
func (m *member) fingerprint() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.run == nil {
		return ""
	}
	return m.run.fingerprint
}

// own returns the member, starting the campaign for its Lease when this
// replica did not own it yet.
func (c *Controller) own(ctx context.Context, name string) *member {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.owned[name]; m != nil {
		return m
	}
	logger := klog.FromContext(ctx).WithValues("member", name)
	campaignCtx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	m := &member{cancel: cancel, done: make(chan struct{})}
	c.owned[name] = m
	// hold collects while the Lease is held: the term ends when it is
	// lost or released, and the collection stops before it is released.
	hold := func(term context.Context, fence func() bool) {
		logger.Info("Holding the member's Lease")
		m.mu.Lock()
		m.term, m.fenced = term, fence
		m.mu.Unlock()
		metrics.FleetMembersOwned.Inc()
		c.queue.Add(name)
		<-term.Done()
		metrics.FleetMembersOwned.Dec()
		m.mu.Lock()
		m.term = nil
		m.mu.Unlock()
		m.stopCollection()
		forget(name) // the next holder reports it
	}
	go func() {
		defer close(m.done)
		if c.cfg.Ring == nil {
			hold(campaignCtx, nil)
			return
		}
		lock := lease.NewLock(c.kube.CoordinationV1(), c.cfg.LeaseNamespace, MemberLeasePrefix+name, c.cfg.Collect.Identity)
		held := func(term context.Context, t lease.Term) { hold(term, t.Holding) }
		for campaignCtx.Err() == nil {
			if err := lease.Hold(campaignCtx, lock, c.cfg.Leases, logger, held); err != nil {
				logger.Error(err, "Cannot campaign for the member's Lease")
				select {
				case <-campaignCtx.Done():
				case <-time.After(c.cfg.Leases.RetryPeriod):
				}
			}
		}
	}()
	return m
}

// release gives up a member this replica owned, if it did: its collection
// stops, then its Lease is released for the new owner.
func (c *Controller) release(name string) {
	c.mu.Lock()
	m := c.owned[name]
	delete(c.owned, name)
	c.mu.Unlock()
	if m != nil {
		m.cancel()
		<-m.done
		forget(name)
		klog.Background().Info("Released the member to its new owner", "member", name)
	}
}

// deleteReleasedLease deletes a member's Lease if no replica holds it, and
// only the version read: replicas that briefly disagree on the owner may
// have another one campaigning, and the Lease it took must stay.
func (c *Controller) deleteReleasedLease(ctx context.Context, name string) error {
	leases := c.kube.CoordinationV1().Leases(c.cfg.LeaseNamespace)
	l, err := leases.Get(ctx, MemberLeasePrefix+name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if ptr.Deref(l.Spec.HolderIdentity, "") != "" {
		return nil // its holder deletes it when it lets go
	}
	err = leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID, ResourceVersion: &l.ResourceVersion}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or taken meanwhile
	}
	return err
}

// forget drops a member's series: another replica reports it now.
func forget(name string) {
	metrics.FleetMemberReachable.DeleteLabelValues(name)
	metrics.FleetMemberLastSync.DeleteLabelValues(name)
}

// inTerm tells whether a hold of the member's Lease is running.
func (m *member) inTerm() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term != nil && m.term.Err() == nil
}

// holding tells whether this replica may write for the member now: it
// holds the Lease, confirmed within the renew deadline.
func (m *member) holding() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.term != nil && m.term.Err() == nil && (m.fenced == nil || m.fenced())
}

// memberConfig reads and checks a member's kubeconfig. A class says why
// it cannot be used; an error without one is transient. When the Secret
// and the MemberCluster are what the running collector was built from
// (running, its fingerprint), the configuration is not built again and is
// nil: building it resolves the server's name, which may take up to the
// resolver's timeout, and a sync runs after every probe (the dialer checks
// the endpoint policy on every connection anyway).
func (c *Controller) memberConfig(ctx context.Context, mc *v1alpha1.MemberCluster, running string) (*rest.Config, string, string, error) {
	ref := mc.Spec.KubeconfigSecretRef
	key := ref.Key
	if key == "" {
		key = "kubeconfig"
	}
	if authz := c.cfg.Collect.Authorizer; authz != nil {
		denied, err := tenancy.MayGetSecret(ctx, authz, mc.Status.Requester, ref.Namespace, ref.Name)
		if err != nil {
			return nil, "", "", err
		}
		if denied != nil {
			return nil, "", classSecretForbidden, errors.New(denied.Message)
		}
	}
	secret, err := c.kube.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, "", memberconfig.SecretNotFound, fmt.Errorf("Secret %s/%s not found", ref.Namespace, ref.Name)
	}
	if err != nil {
		return nil, "", "", err
	}
	data, ok := secret.Data[key]
	if !ok {
		return nil, "", memberconfig.SecretNotFound, fmt.Errorf("Secret %s/%s has no key %q", ref.Namespace, ref.Name, key)
	}
	fingerprint := fmt.Sprintf("%s/%s/%d", secret.UID, secret.ResourceVersion, mc.Generation)
	if running != "" && running == fingerprint {
		return nil, fingerprint, "", nil
	}
	cfg, err := memberconfig.RESTConfig(data, memberconfig.Options{Dialer: c.cfg.Dialer, AllowExec: c.cfg.AllowExec, UserAgent: "kollect-collector/" + mc.Name})
	if err != nil {
		return nil, "", memberconfig.ClassOf(err), err
	}
	return cfg, fingerprint, "", nil
}

// start runs a member's collector while the Lease is held, unless one
// built from the same kubeconfig runs already.
func (c *Controller) start(mc *v1alpha1.MemberCluster, m *member, cfg *rest.Config, fingerprint string) *collection {
	m.mu.Lock()
	old, term := m.run, m.term
	if old != nil && old.fingerprint == fingerprint {
		m.mu.Unlock()
		return old
	}
	m.run = nil
	m.mu.Unlock()
	if old != nil {
		old.stop()
	}
	if term == nil || cfg == nil {
		return nil
	}

	logger := klog.FromContext(term).WithValues("member", mc.Name)
	var err error
	runCtx, cancel := context.WithCancel(term)
	run := &collection{fingerprint: fingerprint, cancel: cancel, done: make(chan struct{})}
	ccfg := c.cfg.Collect
	ccfg.Cluster = mc.Name
	ccfg.Member = &collect.Member{Source: cfg, UnreachableSince: run.since}
	ccfg.Holding = m.holding
	var collector *collect.Collector
	ccfg.Mapper, err = kindmapper.ForHost(cfg)
	if err == nil {
		collector, err = collect.New(ccfg)
	}
	if err != nil {
		cancel()
		run.setProbe(mc.Name, "", memberconfig.KubeconfigInvalid, err)
		close(run.done)
		return run
	}
	run.collector = collector
	m.mu.Lock()
	if m.term != term {
		// The term ended meanwhile: nothing may run under it.
		m.mu.Unlock()
		cancel()
		close(run.done)
		return nil
	}
	m.run = run
	m.mu.Unlock()
	go func() {
		defer close(run.done)
		var wg sync.WaitGroup
		wg.Go(func() { c.probe(runCtx, mc.Name, run, cfg) })
		if err := collector.Run(klog.NewContext(runCtx, logger)); err != nil && runCtx.Err() == nil {
			logger.Error(err, "Member collector stopped")
		}
		cancel()
		wg.Wait()
	}()
	logger.Info("Collecting from member")
	return run
}

// probe asks the member for its version every interval and reports a
// change of reachability.
func (c *Controller) probe(ctx context.Context, name string, m *collection, cfg *rest.Config) {
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		version, err := memberconfig.Probe(pctx, cfg)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if m.setProbe(name, version, memberconfig.ClassOf(err), err) {
			m.collector.RequeueStatuses()
		}
		// Each probe also syncs the member: its Secret is read again (a
		// rotated kubeconfig restarts the collector), its status refreshed.
		c.queue.Add(name)
		select {
		case <-ctx.Done():
			return
		case <-time.After(c.cfg.ProbeInterval):
		}
	}
}

// setProbe records a probe of the member name; true when reachability
// changed.
func (m *collection) setProbe(name, version, class string, err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	wasUnreachable := !m.unreachableSince.IsZero()
	if err == nil {
		m.version, m.lastSync, m.unreachableSince, m.errClass, m.err = version, time.Now(), time.Time{}, "", ""
		metrics.FleetMemberReachable.WithLabelValues(name).Set(1)
		metrics.FleetMemberLastSync.WithLabelValues(name).Set(float64(m.lastSync.Unix()))
		return wasUnreachable
	}
	metrics.FleetMemberReachable.WithLabelValues(name).Set(0)
	m.errClass, m.err = class, err.Error()
	if m.unreachableSince.IsZero() {
		m.unreachableSince = time.Now()
	}
	return !wasUnreachable
}

func (m *collection) since() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreachableSince
}

func (m *collection) stop() {
	m.cancel()
	<-m.done
}

// stopCollection stops the member's collector, if one runs.
func (m *member) stopCollection() {
	m.mu.Lock()
	run := m.run
	m.run = nil
	m.mu.Unlock()
	if run != nil {
		run.stop()
	}
}

// report writes status.collection; the registry derives the conditions.
func (c *Controller) report(ctx context.Context, mc *v1alpha1.MemberCluster, owner *member, m *collection, class, msg string) error {
	obs := applyv1alpha1.MemberObservation().WithObservedGeneration(mc.Generation).WithOwner(c.cfg.Collect.Identity)
	if m != nil {
		m.mu.Lock()
		if m.unreachableSince.IsZero() && m.lastSync.IsZero() && m.errClass == "" {
			// Not probed yet (a new collector, or a new owner's): the
			// first probe reports, rather than a passing Reachable=False.
			m.mu.Unlock()
			return nil
		}
		reachable := m.unreachableSince.IsZero() && !m.lastSync.IsZero()
		obs.WithReachable(reachable)
		if m.version != "" {
			obs.WithServerVersion(m.version)
		}
		if !m.lastSync.IsZero() {
			obs.WithLastSyncTime(metav1.NewTime(m.lastSync.Truncate(time.Second)))
		}
		if !m.unreachableSince.IsZero() {
			obs.WithUnreachableSince(metav1.NewTime(m.unreachableSince.Truncate(time.Second)))
		}
		class, msg = m.errClass, m.err
		m.mu.Unlock()
		if m.collector != nil {
			obs.WithItemCount(m.collector.ItemCount())
		}
	} else {
		obs.WithReachable(false)
	}
	if class != "" {
		obs.WithErrorClass(class).WithLastError(plumbing.Truncate(msg, 1024))
	}
	if prev := mc.Status.Collection; prev != nil && sameReport(prev, obs) {
		return nil
	}
	if !owner.holding() {
		return nil // the new holder reports
	}
	_, err := c.kollect.KollectV1alpha1().MemberClusters().ApplyStatus(ctx,
		applyv1alpha1.MemberCluster(mc.Name).WithStatus(applyv1alpha1.MemberClusterStatus().WithCollection(obs)),
		metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// sameReport says whether a report says what the stored one does, the
// last sync time aside: it changes with every probe and is written only
// with something else, or every minute.
func sameReport(prev *v1alpha1.MemberObservation, obs *applyv1alpha1.MemberObservationApplyConfiguration) bool {
	t := func(p *metav1.Time) time.Time { return ptr.Deref(p, metav1.Time{}).Time }
	if prev.Owner != ptr.Deref(obs.Owner, "") || prev.Reachable != ptr.Deref(obs.Reachable, false) ||
		prev.ServerVersion != ptr.Deref(obs.ServerVersion, "") || prev.ItemCount != ptr.Deref(obs.ItemCount, 0) ||
		prev.ErrorClass != ptr.Deref(obs.ErrorClass, "") || prev.LastError != ptr.Deref(obs.LastError, "") ||
		prev.ObservedGeneration != ptr.Deref(obs.ObservedGeneration, 0) || !t(prev.UnreachableSince).Equal(t(obs.UnreachableSince)) {
		return false
	}
	return time.Since(t(prev.LastSyncTime)) < time.Minute
}

// reportToTargets speaks for a member whose collector cannot, in the
// ClusterTargets' status.clusters, under the member's field manager: with
// unreachable nil it withdraws the member's entries (the member is gone);
// else it marks the entries of the targets that select it unreachable
// since then, keeping what the collector last reported (or adding one, of
// no items, where it never reported), until a collector runs and reports
// again.
func (c *Controller) reportToTargets(ctx context.Context, m *member, mc *v1alpha1.MemberCluster, unreachable *metav1.Time) error {
	name := mc.Name
	targets, err := c.targets.List(labels.Everything())
	if err != nil {
		return err
	}
	opts := metav1.ApplyOptions{FieldManager: collect.MemberFieldManager(name), Force: true}
	for _, ct := range targets {
		i := slices.IndexFunc(ct.Status.Clusters, func(e v1alpha1.ClusterCollection) bool { return e.Name == name })
		status := applyv1alpha1.ClusterTargetStatus()
		switch {
		case unreachable == nil:
			if i < 0 {
				continue
			}
		case !selects(ct, mc):
			continue // (an entry of a target that no longer selects it is withdrawn: leaveUnselected)
		case i < 0:
			// Selected and never reported (created, or the member labelled
			// in, while its collector cannot run): no items of it yet.
			if ct.DeletionTimestamp != nil {
				continue
			}
			status.WithClusters(applyv1alpha1.ClusterCollection().WithName(name).
				WithCollection(collect.ObservationApply(&v1alpha1.CollectionObservation{})).WithUnreachableSince(*unreachable))
		case ct.Status.Clusters[i].UnreachableSince != nil:
			continue
		default:
			e := ct.Status.Clusters[i]
			status.WithClusters(applyv1alpha1.ClusterCollection().WithName(name).
				WithCollection(collect.ObservationApply(&e.Collection)).WithUnreachableSince(*unreachable))
		}
		if !m.holding() {
			return errors.New("the member's Lease is no longer confirmed")
		}
		_, err := c.kollect.KollectV1alpha1().ClusterTargets().ApplyStatus(ctx, applyv1alpha1.ClusterTarget(ct.Name).WithStatus(status), opts)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// leaveUnselected does for a member whose collector cannot run what the
// collector would do for the ClusterTargets that no longer select it:
// deletes the member's items of each and withdraws its entry from their
// status.clusters. Only targets still holding an entry are looked at, so
// the items are listed once, not at every sync.
func (c *Controller) leaveUnselected(ctx context.Context, m *member, mc *v1alpha1.MemberCluster) error {
	targets, err := c.targets.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, ct := range targets {
		if ct.DeletionTimestamp != nil || !slices.ContainsFunc(ct.Status.Clusters, func(e v1alpha1.ClusterCollection) bool { return e.Name == mc.Name }) {
			continue // the host's collector deletes a deleted target's items
		}
		if selects(ct, mc) {
			continue
		}
		selector := labels.SelectorFromSet(labels.Set{kollect.LabelTarget: collect.TargetLabelValue(ct.Name), kollect.LabelCluster: mc.Name})
		var stored []itemstore.Stored
		if _, err := c.cfg.Collect.ClusterItems.List(ctx, "", selector, func(s itemstore.Stored) { stored = append(stored, s) }); err != nil {
			return err
		}
		for _, s := range stored {
			if !m.holding() {
				return errors.New("the member's Lease is no longer confirmed")
			}
			if err := c.cfg.Collect.ClusterItems.Delete(ctx, s.Namespace, s.Name); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
		if !m.holding() {
			return errors.New("the member's Lease is no longer confirmed")
		}
		_, err := c.kollect.KollectV1alpha1().ClusterTargets().ApplyStatus(ctx,
			applyv1alpha1.ClusterTarget(ct.Name).WithStatus(applyv1alpha1.ClusterTargetStatus()),
			metav1.ApplyOptions{FieldManager: collect.MemberFieldManager(mc.Name), Force: true})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// selects says whether a ClusterTarget collects from a member, as the
// member's collector decides it.
func selects(ct *v1alpha1.ClusterTarget, mc *v1alpha1.MemberCluster) bool {
	if ct.Spec.ClusterSelector == nil || mc.DeletionTimestamp != nil {
		return false
	}
	sel, err := metav1.LabelSelectorAsSelector(ct.Spec.ClusterSelector)
	return err == nil && sel.Matches(labels.Set(mc.Labels))
}

// deleteItems deletes every item collected from a member, of every target,
// while this replica holds the member's Lease.
func (c *Controller) deleteItems(ctx context.Context, m *member, name string) error {
	selector := labels.SelectorFromSet(labels.Set{kollect.LabelCluster: name})
	for _, store := range []*itemstore.Store{c.cfg.Collect.Items, c.cfg.Collect.ClusterItems} {
		var stored []itemstore.Stored
		if _, err := store.List(ctx, "", selector, func(s itemstore.Stored) { stored = append(stored, s) }); err != nil {
			return err
		}
		for _, s := range stored {
			if !m.holding() {
				return errors.New("the member's Lease is no longer confirmed")
			}
			if err := store.Delete(ctx, s.Namespace, s.Name); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

func hasFinalizer(mc *v1alpha1.MemberCluster) bool {
	return slices.Contains(mc.Finalizers, v1alpha1.ItemsFinalizer)
}
