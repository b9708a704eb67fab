// Package fleet runs the collection of member clusters: for every
// MemberCluster it reads the kubeconfig Secret on the authority of the
// user who registered it, builds a guarded client (pkg/memberconfig),
// runs a collector for the member (pkg/controllers/collect, member mode),
// probes the member, and reports in the MemberCluster's status. A deleted
// MemberCluster's items are deleted before its finalizer goes.
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

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/collect"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/informers"
	"kollect.dev/kollect/pkg/controllers/plumbing"
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
}

// Controller runs one collector per MemberCluster.
type Controller struct {
	cfg     Config
	kube    kubernetes.Interface
	kollect versioned.Interface

	factory kollectinformers.SharedInformerFactory
	members kollectlisters.MemberClusterLister
	queue   workqueue.TypedRateLimitingInterface[string]

	// mu guards running: the members whose collector runs, by name.
	mu      sync.Mutex
	running map[string]*member
}

// member is one member's running collector and what its probes found.
type member struct {
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
	clients, err := plumbing.NewClients(cfg.Collect.Host, plumbing.Limits{QPS: 20, Burst: 40}, cfg.Collect.Loopback, plumbing.Limits{QPS: 50, Burst: 100})
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, kube: clients.Kube, kollect: clients.Kollect,
		queue: plumbing.NewQueue[string]("kollect_fleet_members"), running: map[string]*member{}}
	c.factory = kollectinformers.NewSharedInformerFactory(clients.Kollect, 0)
	informers.InProcess(c.factory, cfg.Collect.Informers, &v1alpha1.MemberCluster{})
	inf := c.factory.Kollect().V1alpha1().MemberClusters()
	c.members = inf.Lister()
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

func (c *Controller) enqueue(obj any) {
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// Run runs until ctx is done, then stops every member's collector.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("fleet")
	ctx = klog.NewContext(ctx, logger)
	defer func() {
		c.queue.ShutDown()
		c.factory.Shutdown()
		c.mu.Lock()
		running := c.running
		c.running = map[string]*member{}
		c.mu.Unlock()
		for _, m := range running {
			m.stop()
		}
	}()
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

// sync makes one member's collector match its MemberCluster: started,
// restarted with a new kubeconfig, or stopped; its items deleted when the
// MemberCluster is; its status reported.
func (c *Controller) sync(ctx context.Context, name string) error {
	mc, err := c.members.Get(name)
	if apierrors.IsNotFound(err) {
		c.stop(name)
		return nil
	}
	if err != nil {
		return err
	}
	if mc.DeletionTimestamp != nil {
		c.stop(name)
		if err := c.deleteItems(ctx, name); err != nil {
			return err
		}
		return finalizers.Set[*v1alpha1.MemberCluster](ctx, c.kollect.KollectV1alpha1().MemberClusters(), name, v1alpha1.ItemsFinalizer, fieldManager, false)
	}
	if !hasFinalizer(mc) {
		if err := finalizers.Set[*v1alpha1.MemberCluster](ctx, c.kollect.KollectV1alpha1().MemberClusters(), name, v1alpha1.ItemsFinalizer, fieldManager, true); err != nil {
			return err
		}
	}

	// The kubeconfig, read on the authority of the member's requester.
	cfg, fingerprint, class, err := c.memberConfig(ctx, mc)
	if err != nil {
		if class == "" {
			return err // transient: retried
		}
		// Unusable: the collector stops, the items stay.
		c.stop(name)
		return c.report(ctx, mc, nil, class, err.Error())
	}
	m := c.start(ctx, mc, cfg, fingerprint)
	return c.report(ctx, mc, m, "", "")
}

// memberConfig reads and checks a member's kubeconfig. A class says why
// it cannot be used; an error without one is transient.
func (c *Controller) memberConfig(ctx context.Context, mc *v1alpha1.MemberCluster) (*rest.Config, string, string, error) {
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
	cfg, err := memberconfig.RESTConfig(data, memberconfig.Options{Dialer: c.cfg.Dialer, AllowExec: c.cfg.AllowExec, UserAgent: "kollect-collector/" + mc.Name})
	if err != nil {
		return nil, "", memberconfig.ClassOf(err), err
	}
	return cfg, fmt.Sprintf("%s/%s/%d", secret.UID, secret.ResourceVersion, mc.Generation), "", nil
}

// start runs a member's collector, unless one built from the same
// kubeconfig runs already.
func (c *Controller) start(ctx context.Context, mc *v1alpha1.MemberCluster, cfg *rest.Config, fingerprint string) *member {
	c.mu.Lock()
	old := c.running[mc.Name]
	if old != nil && old.fingerprint == fingerprint {
		c.mu.Unlock()
		return old
	}
	delete(c.running, mc.Name)
	c.mu.Unlock()
	if old != nil {
		old.stop()
	}

	logger := klog.FromContext(ctx).WithValues("member", mc.Name)
	var err error
	runCtx, cancel := context.WithCancel(ctx)
	m := &member{fingerprint: fingerprint, cancel: cancel, done: make(chan struct{})}
	ccfg := c.cfg.Collect
	ccfg.Cluster = mc.Name
	ccfg.Member = &collect.Member{Source: cfg, UnreachableSince: m.since}
	var collector *collect.Collector
	ccfg.Mapper, err = kindmapper.ForHost(cfg)
	if err == nil {
		collector, err = collect.New(ccfg)
	}
	if err != nil {
		cancel()
		m.setProbe("", memberconfig.KubeconfigInvalid, err)
		close(m.done)
		return m
	}
	m.collector = collector
	c.mu.Lock()
	c.running[mc.Name] = m
	c.mu.Unlock()
	go func() {
		defer close(m.done)
		var wg sync.WaitGroup
		wg.Go(func() { c.probe(runCtx, mc.Name, m, cfg) })
		if err := collector.Run(klog.NewContext(runCtx, logger)); err != nil && runCtx.Err() == nil {
			logger.Error(err, "Member collector stopped")
		}
		cancel()
		wg.Wait()
	}()
	logger.Info("Collecting from member")
	return m
}

// probe asks the member for its version every interval and reports a
// change of reachability.
func (c *Controller) probe(ctx context.Context, name string, m *member, cfg *rest.Config) {
	for {
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		version, err := memberconfig.Probe(pctx, cfg)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if m.setProbe(version, memberconfig.ClassOf(err), err) {
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

// setProbe records a probe; true when reachability changed.
func (m *member) setProbe(version, class string, err error) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	wasUnreachable := !m.unreachableSince.IsZero()
	if err == nil {
		m.version, m.lastSync, m.unreachableSince, m.errClass, m.err = version, time.Now(), time.Time{}, "", ""
		return wasUnreachable
	}
	m.errClass, m.err = class, err.Error()
	if m.unreachableSince.IsZero() {
		m.unreachableSince = time.Now()
	}
	return !wasUnreachable
}

func (m *member) since() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreachableSince
}

func (m *member) stop() {
	m.cancel()
	<-m.done
}

func (c *Controller) stop(name string) {
	c.mu.Lock()
	m := c.running[name]
	delete(c.running, name)
	c.mu.Unlock()
	if m != nil {
		m.stop()
	}
}

// report writes status.collection; the registry derives the conditions.
func (c *Controller) report(ctx context.Context, mc *v1alpha1.MemberCluster, m *member, class, msg string) error {
	obs := applyv1alpha1.MemberObservation().WithObservedGeneration(mc.Generation).WithOwner(c.cfg.Collect.Identity)
	if m != nil {
		m.mu.Lock()
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
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	num := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	t := func(p *metav1.Time) time.Time {
		if p == nil {
			return time.Time{}
		}
		return p.Time
	}
	reachable := obs.Reachable != nil && *obs.Reachable
	if prev.Owner != str(obs.Owner) || prev.Reachable != reachable || prev.ServerVersion != str(obs.ServerVersion) ||
		prev.ItemCount != num(obs.ItemCount) || prev.ErrorClass != str(obs.ErrorClass) || prev.LastError != str(obs.LastError) ||
		prev.ObservedGeneration != num(obs.ObservedGeneration) || !t(prev.UnreachableSince).Equal(t(obs.UnreachableSince)) {
		return false
	}
	return time.Since(t(prev.LastSyncTime)) < time.Minute
}

// deleteItems deletes every item collected from a member, of every target.
func (c *Controller) deleteItems(ctx context.Context, name string) error {
	selector := labels.SelectorFromSet(labels.Set{kollect.LabelCluster: name})
	for _, store := range []*itemstore.Store{c.cfg.Collect.Items, c.cfg.Collect.ClusterItems} {
		var stored []itemstore.Stored
		if _, err := store.List(ctx, "", selector, func(s itemstore.Stored) { stored = append(stored, s) }); err != nil {
			return err
		}
		for _, s := range stored {
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
