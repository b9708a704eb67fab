package collect

import (
	"context"
	"fmt"
	"time"

	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/tenancy"
)

// syncTarget reconciles one Target or ClusterTarget: what it collects,
// whether it may, and the informer and walk that collect it. The objects
// themselves are synced by syncObject.
func (c *Collector) syncTarget(ctx context.Context, key targetKey) error {
	// Read the target from the cache; gone or being deleted, its items go.
	v, err := c.getTarget(key)
	if err != nil {
		return err
	}
	if v == nil || v.deleting {
		return c.finish(ctx, key, v)
	}

	// The registry adds the finalizer on create; restore one that an update
	// removed, or that an object older than that rule never had. The
	// host's collector holds it for every cluster's items.
	if !v.finalizer && c.cfg.Member == nil {
		if err := c.setFinalizer(ctx, key, true); err != nil {
			return err
		}
	}

	// Another cluster's target, or a member no longer selected: this
	// collector's items of it go.
	if !c.serves(v) {
		return c.leave(ctx, key, v)
	}

	// Compile what it collects (Profile, kind, selectors), reusing the last
	// compilation when nothing it depends on changed. A reason says why it
	// cannot collect.
	prev, _ := c.targets.get(key)
	if inf := c.informers.of(key); inf != nil && inf.gone.Load() {
		prev.spec = nil // resolve the kind again: it may be gone
	}
	spec, reason, message, err := c.compile(v, prev.spec)
	if err != nil {
		return err
	}

	// Ask again whether its requester may collect that, within the Scopes.
	var partial *tenancy.Denial
	switch {
	case reason == kollect.ReasonProfileNotFound:
		metrics.Resolved(key.Kind(), "Profile", metrics.ResolutionNotFound)
	case reason == "" && !v.suspend && !c.memberSuspended():
		var denied *tenancy.Denial
		if denied, partial, err = c.admit(ctx, v, spec); err != nil {
			return err
		}
		if denied != nil {
			reason, message = denied.Reason, denied.Message
		}
	}
	suspended := v.suspend || c.memberSuspended()
	collecting := reason == "" && !suspended
	if !collecting {
		// Suspended or unable to: keep the items, stop changing them.
		spec = nil
	}

	// Watch its kind in the shape its Profile needs, or stop watching.
	var inf *gvrInformer
	if collecting {
		inf = c.informers.use(ctx, key, spec.gvr, spec.shape(v))
	} else {
		c.informers.release(ctx, key)
	}
	c.index.setLimits(key, collecting, c.itemQuotas(key))

	// Record the outcome; walk its objects when what it collects, or the
	// informer it collects from, changed since the last walk.
	var walk bool
	var retry time.Duration
	c.targets.update(key, func(t *target) {
		if t.reported == nil && v.collection != nil {
			// What an earlier leader reported: no second Event for the
			// same failure.
			t.reported = v.collection.DeepCopy()
		}
		t.spec, t.generation, t.suspended, t.partial = spec, v.generation, suspended, partial
		t.reason, t.message = reason, message
		if collecting {
			t.kindRetry = 0
			if inf.synced.Load() {
				walked := fmt.Sprintf("%s/%p", spec.fingerprint, inf)
				if walk = t.walked != walked || t.walkNeeded; walk {
					t.walked, t.walkNeeded, t.walkedOnce = walked, false, true
					t.lastFullSync = time.Now()
				}
			}
		}
		if reason == kollect.ReasonKindNotFound {
			// A kind not served (yet) is looked up again, with backoff.
			t.kindRetry = min(max(2*t.kindRetry, kindRetryMin), kindRetryMax)
			retry = t.kindRetry
		}
	})
	if walk {
		c.walk(key, "")
	}
	if retry > 0 {
		c.targetQueue.AddAfter(key, retry)
	}
	c.queueStatus(key)
	return nil
}

// finish handles a target that is gone or being deleted: it stops
// collecting, deletes every item of the target, and removes the finalizer.
// The host's collector deletes the items of every cluster before it
// removes the finalizer; a member's deletes its own (what it wrote after
// the host's deletion, say) and leaves the finalizer alone.
func (c *Collector) finish(ctx context.Context, key targetKey, v *targetObject) error {
	if !c.holding() {
		return errLeaseUnconfirmed
	}
	c.informers.release(ctx, key)
	c.walks.stop(key)
	c.targets.remove(key)
	hadItems := c.index.remove(key)
	if c.cfg.Member != nil {
		if hadItems {
			return c.deleteAllItems(ctx, key)
		}
		return nil
	}
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
	if err := c.deleteEveryClustersItems(ctx, key); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Deleted the items of a deleted target", "target", key.String())
	return c.setFinalizer(ctx, key, false)
}
