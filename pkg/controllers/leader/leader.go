// Package leader runs Kollect's embedded controllers on exactly one
// replica: every replica serves the API, the one holding the Lease
// kollect-controllers in the host cluster also runs the controllers. A
// replica that loses the lease stops its controllers before it campaigns
// again; one that shuts down stops them and then releases the lease, so the
// next leader starts at once instead of after the lease duration.
package leader

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/collect"
	"kollect.dev/kollect/pkg/controllers/export"
	"kollect.dev/kollect/pkg/controllers/fleet"
	"kollect.dev/kollect/pkg/controllers/lease"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/shard"
)

// LeaseName is the Lease the replicas compete for.
const LeaseName = "kollect-controllers"

// Options configure the controllers and their leader election.
type Options struct {
	// LeaderElect runs the controllers only on the holder of the lease.
	// Off, every replica runs them: only for a single replica.
	LeaderElect bool
	// Namespace holds the Lease in the host cluster.
	Namespace string
	// LeaseDuration, RenewDeadline and RetryPeriod are the usual
	// client-go leader election timings.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ResyncPeriod is the time between full walks of the collector.
	ResyncPeriod time.Duration
	// Workers is how many objects the collector reconciles at once.
	Workers int
	// ClusterName names the host cluster in everything exported; empty
	// derives it from the host cluster (DefaultClusterName).
	ClusterName string
	// SinkClientMaxAge is how long a sink client built from a Secret is
	// used before the Secret is read again.
	SinkClientMaxAge time.Duration
	// ExportWatchdog is how often an idle exporter refreshes its status entry.
	ExportWatchdog time.Duration
	// RequesterMaxAge, when positive, stops the objects whose requester was
	// recorded longer ago than this (RequesterExpired) until re-affirmed.
	RequesterMaxAge time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		LeaderElect:      true,
		Namespace:        "kollect-system",
		LeaseDuration:    15 * time.Second,
		RenewDeadline:    10 * time.Second,
		RetryPeriod:      2 * time.Second,
		ResyncPeriod:     collect.DefaultResyncPeriod,
		Workers:          collect.DefaultWorkers,
		ExportWatchdog:   export.DefaultWatchdog,
		SinkClientMaxAge: export.DefaultClientMaxAge,
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.LeaderElect, "leader-elect", o.LeaderElect,
		"Run the controllers only on the replica holding the Lease "+LeaseName+" in --leader-election-namespace of the host cluster. Every replica serves the API either way.")
	fs.StringVar(&o.Namespace, "leader-election-namespace", o.Namespace, "Namespace of the leader election Lease in the host cluster.")
	fs.DurationVar(&o.LeaseDuration, "leader-election-lease-duration", o.LeaseDuration,
		"How long the other replicas wait after the leader's last renewal before taking over.")
	fs.DurationVar(&o.RenewDeadline, "leader-election-renew-deadline", o.RenewDeadline,
		"How long the leader keeps trying to renew before it stops its controllers.")
	fs.DurationVar(&o.RetryPeriod, "leader-election-retry-period", o.RetryPeriod, "Time between attempts to acquire or renew the lease.")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", o.ResyncPeriod,
		"Time between full walks comparing the cluster's objects with the stored items (the safety net under incremental collection).")
	fs.IntVar(&o.Workers, "collect-workers", o.Workers, "Objects extracted and written concurrently by the collector.")
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName,
		"Name of the host cluster (a DNS-1123 label), part of every key a sink stores: Postgres rows and cursors, snapshot paths, NATS subjects, event ids and sources, so that clusters sharing a sink never touch each other's data. Empty: the UID of the host cluster's kube-system namespace.")
	fs.DurationVar(&o.SinkClientMaxAge, "sink-client-max-age", o.SinkClientMaxAge,
		"How long an exporter uses a sink connection built from the sink's Secret before it reads the Secret again and reconnects (credential rotation).")
	fs.DurationVar(&o.ExportWatchdog, "export-watchdog-period", o.ExportWatchdog,
		"How often an exporter with nothing to export refreshes its status entry (the seed's 30s watchdog for interval 0s).")
	fs.DurationVar(&o.RequesterMaxAge, "requester-max-age", o.RequesterMaxAge,
		"When positive, Targets, ClusterTargets, Inventories, ClusterInventories and sinks whose status.requester was recorded longer ago than this stop acting (Degraded, reason RequesterExpired) until an update re-affirms the requester: a change of references, or of the kollect.dev/reaffirm annotation. 0 turns it off.")
}

// Validate checks the flags.
func (o *Options) Validate() []error {
	var errs []error
	if o.LeaderElect {
		if o.Namespace == "" {
			errs = append(errs, errors.New("--leader-election-namespace is required with --leader-elect"))
		}
		if o.timings().Validate() != nil {
			errs = append(errs, fmt.Errorf("leader election needs 0 < --leader-election-retry-period (%s) < --leader-election-renew-deadline (%s) < --leader-election-lease-duration (%s)",
				o.RetryPeriod, o.RenewDeadline, o.LeaseDuration))
		}
	}
	if o.ResyncPeriod <= 0 {
		errs = append(errs, fmt.Errorf("--resync-period must be positive, got %s", o.ResyncPeriod))
	}
	if o.ExportWatchdog < time.Second {
		errs = append(errs, fmt.Errorf("--export-watchdog-period must be at least 1s, got %s", o.ExportWatchdog))
	}
	if o.RequesterMaxAge < 0 {
		errs = append(errs, fmt.Errorf("--requester-max-age must not be negative, got %s", o.RequesterMaxAge))
	}
	if o.ClusterName != "" {
		for _, msg := range validation.IsDNS1123Label(o.ClusterName) {
			errs = append(errs, fmt.Errorf("--cluster-name %q: %s", o.ClusterName, msg))
		}
	}
	if o.SinkClientMaxAge < time.Second {
		errs = append(errs, fmt.Errorf("--sink-client-max-age must be at least 1s, got %s", o.SinkClientMaxAge))
	}
	if o.Workers < 1 {
		errs = append(errs, fmt.Errorf("--collect-workers must be at least 1, got %d", o.Workers))
	}
	return errs
}

// timings are the Leases' timings: the controllers', the replicas' and the
// members'.
func (o *Options) timings() lease.Timings {
	return lease.Timings{LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod}
}

// Identity names this replica in the Lease: $POD_NAME when set, else the
// host name with a random suffix (two processes on one host differ).
func Identity() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "kollect"
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// epochOf is a term's epoch: the Lease's acquireTime in microseconds. A
// later acquisition has a later time (the next leader takes over only once
// the lease expired, and replicas' clocks agree far better than a lease
// duration), including after the Lease was deleted and created again, when
// its transitions count starts over.
func epochOf(rec *resourcelock.LeaderElectionRecord) int64 { return rec.AcquireTime.UnixMicro() }

// readEpoch reads this term's epoch from the Lease, retrying until it can
// or ctx ends (ok false): a leader never holds the Lease idle.
func (o *Options) readEpoch(ctx context.Context, lock resourcelock.Interface, logger klog.Logger) (epoch int64, ok bool) {
	_ = wait.PollUntilContextCancel(ctx, o.RetryPeriod, true, func(ctx context.Context) (bool, error) {
		rec, _, err := lock.Get(ctx)
		if err != nil || rec.HolderIdentity != lock.Identity() {
			logger.Info("Cannot read this term's epoch from the Lease yet", "err", err)
			return false, nil
		}
		epoch, ok = epochOf(rec), true
		return true, nil
	})
	return epoch, ok
}

// watchEpoch ends the term when the Lease shows another acquisition by
// this replica.
func (o *Options) watchEpoch(ctx context.Context, lock resourcelock.Interface, epoch int64, endTerm context.CancelFunc) {
	_ = wait.PollUntilContextCancel(ctx, o.RetryPeriod, false, func(ctx context.Context) (bool, error) {
		rec, _, err := lock.Get(ctx)
		if err == nil && rec.HolderIdentity == lock.Identity() && epochOf(rec) != epoch {
			endTerm()
			return true, nil
		}
		return false, nil
	})
}

// DefaultClusterName names the host cluster when --cluster-name is empty:
// the UID of its kube-system namespace, which no other cluster shares and
// which survives restarts of Kollect. It waits for the host cluster.
func DefaultClusterName(ctx context.Context, kube kubernetes.Interface) (string, error) {
	var name string
	err := wait.PollUntilContextCancel(ctx, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		ns, err := kube.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
		if err != nil {
			klog.FromContext(ctx).Info("Cannot read the kube-system namespace to name the cluster; retrying (set --cluster-name to avoid this)", "err", err)
			return false, nil
		}
		name = string(ns.UID)
		return name != "", nil
	})
	return name, err
}

// Configs are the embedded controllers' configurations.
type Configs struct {
	Collect collect.Config
	Export  export.Config
	// Fleet's collector configuration is Collect's; the rest is its own.
	Fleet fleet.Config
}

// Run runs the collector and the exporter while this replica leads, until
// ctx is done.
func (o *Options) Run(ctx context.Context, host *rest.Config, cfg Configs) error {
	metrics.Register()
	identity := Identity()
	cfg.Collect.Identity = identity
	cfg.Collect.ResyncPeriod, cfg.Collect.Workers = o.ResyncPeriod, o.Workers
	cfg.Export.Watchdog, cfg.Export.ClientMaxAge = o.ExportWatchdog, o.SinkClientMaxAge
	kube, err := kubernetes.NewForConfig(host)
	if err != nil {
		return err
	}
	if cfg.Export.ClusterName = o.ClusterName; cfg.Export.ClusterName == "" {
		if cfg.Export.ClusterName, err = DefaultClusterName(ctx, kube); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).Info("Exporting as cluster", "cluster", cfg.Export.ClusterName)
	cfg.Collect.Cluster = cfg.Export.ClusterName
	cfg.Collect.RequesterMaxAge, cfg.Export.RequesterMaxAge = o.RequesterMaxAge, o.RequesterMaxAge
	// keep runs a controller until ctx is done: one that fails is started
	// again, so that a leader never holds the lease idle.
	keep := func(ctx context.Context, name string, start func(context.Context) error) {
		_ = wait.PollUntilContextCancel(ctx, 5*time.Second, true, func(ctx context.Context) (bool, error) {
			if err := start(ctx); err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Controller failed; restarting it", "controller", name)
			}
			return false, nil
		})
	}
	run := func(ctx context.Context, epoch int64) {
		cfg := cfg
		cfg.Export.Epoch = epoch
		var wg sync.WaitGroup
		wg.Go(func() {
			keep(ctx, "collect", func(ctx context.Context) error {
				c, err := collect.New(cfg.Collect)
				if err != nil {
					return err
				}
				return c.Run(ctx)
			})
		})
		wg.Go(func() {
			keep(ctx, "export", func(ctx context.Context) error {
				c, err := export.New(cfg.Export)
				if err != nil {
					return err
				}
				return c.Run(ctx)
			})
		})
		wg.Wait()
	}
	// Member clusters are collected on every replica, each by its owner
	// (pkg/controllers/fleet); the host cluster and the exports by the
	// leader only.
	var fleetDone sync.WaitGroup
	defer fleetDone.Wait()
	fcfg := cfg.Fleet
	fcfg.Collect = cfg.Collect
	if o.LeaderElect {
		ring := shard.New(kube.CoordinationV1().Leases(o.Namespace), identity, o.timings())
		fleetDone.Go(func() { ring.Run(ctx) })
		fcfg.Ring, fcfg.LeaseNamespace, fcfg.Leases = ring, o.Namespace, o.timings()
	}
	fleetDone.Go(func() {
		keep(ctx, "fleet", func(ctx context.Context) error {
			c, err := fleet.New(fcfg)
			if err != nil {
				return err
			}
			return c.Run(ctx)
		})
	})

	if !o.LeaderElect {
		metrics.Leader.Set(1)
		defer metrics.Leader.Set(0)
		// One replica, no Lease: its start time orders its terms.
		run(ctx, time.Now().UnixMicro())
		return nil
	}
	lock := lease.NewLock(kube.CoordinationV1(), o.Namespace, LeaseName, identity)
	// The collector writes items only while the Lease is confirmed within
	// the renew deadline, the bound the elector itself gives up at, and
	// only under the hold (term) it was started in.
	var term atomic.Pointer[lease.Term]
	cfg.Collect.Holding = func() bool { t := term.Load(); return t != nil && t.Holding() }
	logger := klog.FromContext(ctx).WithValues("lease", o.Namespace+"/"+LeaseName, "identity", identity)
	lead := func(runCtx context.Context, t lease.Term) {
		term.Store(&t)
		metrics.Leader.Set(1)
		defer metrics.Leader.Set(0)
		// The controllers run with this term's epoch. The elector may
		// re-acquire the Lease without calling us again (after a pause,
		// once another leader released it): a new acquisition is a new
		// epoch, so they restart with it.
		for runCtx.Err() == nil {
			epoch, ok := o.readEpoch(runCtx, lock, logger)
			if !ok {
				break
			}
			termCtx, endTerm := context.WithCancel(runCtx)
			go o.watchEpoch(termCtx, lock, epoch, endTerm)
			logger.Info("Leading: starting the controllers", "epoch", epoch)
			run(klog.NewContext(termCtx, logger), epoch)
			endTerm()
		}
		logger.Info("Controllers stopped")
	}
	for ctx.Err() == nil {
		if err := lease.Hold(ctx, lock, o.timings(), logger, lead); err != nil {
			return err
		}
		if ctx.Err() == nil {
			logger.Info("Lost the lease; campaigning again")
		}
	}
	return nil
}
