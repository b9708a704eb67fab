// Package shard spreads work over the live kollect-apiserver replicas.
// Each replica renews a Lease kollect-replica-<hash of its identity> in the
// host cluster; a replica is live while its Lease changes within the lease
// duration, as this replica observes it (its own: while its renewals
// succeed). A key's owner is the live replica with the highest random
// weight for it (rendezvous hashing): every replica computes the same
// owner from the same live set, and a replica that joins or leaves moves
// only the keys it wins or held — about 1/n of them.
//
// The owner is only who should do the work: two replicas may briefly
// disagree while their views of the live set differ, so the work itself is
// fenced by a Lease of its own (pkg/controllers/lease).
package shard

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"slices"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/controllers/lease"
)

const (
	// LeasePrefix starts the name of every replica's Lease.
	LeasePrefix = "kollect-replica-"
	// LabelRole marks the replicas' Leases, so that one list finds them.
	LabelRole = "kollect.dev/lease"
	// RoleReplica is LabelRole's value on a replica's Lease.
	RoleReplica = "replica"
	// staleAfter lease durations without a renewal, a replica's Lease is
	// deleted.
	staleAfter = 10
)

// Ring is the set of live replicas.
type Ring struct {
	leases   coordinationv1client.LeaseInterface
	identity string
	name     string // this replica's Lease
	timings  lease.Timings

	mu       sync.Mutex
	seen     map[string]observed // by Lease name
	renewed  time.Time           // this replica's last successful renewal
	live     []string            // identities, sorted
	onChange map[int]func()      // by registration
	nextID   int
}

// observed is what this replica last saw of another's Lease, and when it
// saw it change.
type observed struct {
	holder          string
	resourceVersion string
	at              time.Time
	duration        time.Duration
}

// New is the ring of the replicas whose Leases are in leases; this one is
// identity.
func New(leases coordinationv1client.LeaseInterface, identity string, t lease.Timings) *Ring {
	return &Ring{leases: leases, identity: identity, name: LeaseName(identity), timings: t, seen: map[string]observed{}, onChange: map[int]func(){}}
}

// LeaseName is the name of the Lease of the replica identity: identities
// (host names with a suffix, pod names) need not be valid object names.
func LeaseName(identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return LeasePrefix + hex.EncodeToString(sum[:8])
}

// OnChange registers f, called (from Run's goroutine) whenever the live
// set changes, until remove is called: a controller that restarts
// registers anew and must not leave its old self behind.
func (r *Ring) OnChange(f func()) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.nextID
	r.nextID++
	r.onChange[id] = f
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		delete(r.onChange, id)
	}
}

// Run renews this replica's Lease and refreshes the live set every retry
// period until ctx is done, then deletes the Lease so that the others take
// its work at once rather than after the lease duration.
func (r *Ring) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("lease", r.name, "identity", r.identity)
	ticker := time.NewTicker(r.timings.RetryPeriod)
	defer ticker.Stop()
	// A call that hangs must not freeze the live set: each is bounded by
	// the renew deadline.
	bounded := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, r.timings.RenewDeadline)
		defer cancel()
		return f(cctx)
	}
	for {
		if err := bounded(r.renew); err != nil && ctx.Err() == nil {
			logger.Info("Cannot renew this replica's Lease", "err", err)
		}
		if err := bounded(r.refresh); err != nil && ctx.Err() == nil {
			logger.Info("Cannot list the replicas' Leases", "err", err)
		}
		select {
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := r.leases.Delete(dctx, r.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				logger.Info("Cannot delete this replica's Lease; the others take over after its lease duration", "err", err)
			}
			return
		case <-ticker.C:
		}
	}
}

// renew writes this replica into its Lease.
func (r *Ring) renew(ctx context.Context) error {
	sent := time.Now()
	now := metav1.NewMicroTime(sent)
	spec := coordinationv1.LeaseSpec{HolderIdentity: &r.identity, RenewTime: &now,
		LeaseDurationSeconds: ptr.To(int32((r.timings.LeaseDuration + time.Second - 1) / time.Second))}
	l, err := r.leases.Get(ctx, r.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		spec.AcquireTime = &now
		_, err = r.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: r.name, Labels: map[string]string{LabelRole: RoleReplica}}, Spec: spec}, metav1.CreateOptions{})
	case err == nil:
		spec.AcquireTime = l.Spec.AcquireTime
		l.Spec = spec
		_, err = r.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.renewed = sent
	r.mu.Unlock()
	return nil
}

// refresh lists the replicas' Leases and recomputes the live set.
func (r *Ring) refresh(ctx context.Context) error {
	list, err := r.leases.List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(labels.Set{LabelRole: RoleReplica}).String()})
	if err != nil {
		// The live set still ages: replicas that stop renewing drop out.
		list = nil
	}
	now := time.Now()
	r.mu.Lock()
	if list != nil {
		seen := make(map[string]observed, len(list.Items))
		for _, l := range list.Items {
			if l.Name == r.name || l.Spec.HolderIdentity == nil || l.Spec.LeaseDurationSeconds == nil {
				continue
			}
			o := observed{holder: *l.Spec.HolderIdentity, resourceVersion: l.ResourceVersion,
				duration: time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second}
			switch prev, ok := r.seen[l.Name]; {
			case ok && prev.resourceVersion == l.ResourceVersion:
				o.at = prev.at
			case !ok && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Before(now):
				// First sight: trust its renewal time, so that a replica
				// that died before this one started is not taken for live.
				o.at = l.Spec.RenewTime.Time
			default:
				o.at = now
			}
			seen[l.Name] = o
		}
		r.seen = seen
	}
	var stale []string
	for name, o := range r.seen {
		if now.Sub(o.at) > staleAfter*o.duration {
			stale = append(stale, name)
		}
	}
	live := r.liveLocked(now)
	changed := !slices.Equal(live, r.live)
	r.live = live
	callbacks := slices.Collect(maps.Values(r.onChange))
	r.mu.Unlock()
	// A replica that died leaves its Lease behind: once it is long dead,
	// whoever sees it first deletes it (unless it was renewed meanwhile).
	for _, name := range stale {
		r.mu.Lock()
		rv := r.seen[name].resourceVersion
		r.mu.Unlock()
		if err := r.leases.Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}}); err == nil {
			klog.FromContext(ctx).Info("Deleted the Lease of a replica long gone", "lease", name)
		}
	}
	if changed {
		klog.FromContext(ctx).Info("Live replicas changed", "replicas", live)
		for _, f := range callbacks {
			f()
		}
	}
	return err
}

func (r *Ring) liveLocked(now time.Time) []string {
	var live []string
	if !r.renewed.IsZero() && now.Sub(r.renewed) < r.timings.LeaseDuration {
		live = append(live, r.identity)
	}
	for _, o := range r.seen {
		if now.Sub(o.at) < o.duration && o.holder != r.identity {
			live = append(live, o.holder)
		}
	}
	slices.Sort(live)
	return slices.Compact(live)
}

// Replicas are the live replicas' identities, sorted.
func (r *Ring) Replicas() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.live)
}

// Owns tells whether this replica owns key.
func (r *Ring) Owns(key string) bool {
	return Owner(r.Replicas(), key) == r.identity
}

// Owner is the replica of replicas with the highest weight for key (the
// lowest identity on a tie); "" when there is none.
func Owner(replicas []string, key string) string {
	var (
		owner string
		best  uint64
	)
	for _, id := range replicas {
		w := weight(id, key)
		if owner == "" || w > best || (w == best && id < owner) {
			owner, best = id, w
		}
	}
	return owner
}

func weight(replica, key string) uint64 {
	h := sha256.New()
	h.Write([]byte(replica))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return binary.BigEndian.Uint64(h.Sum(nil))
}
