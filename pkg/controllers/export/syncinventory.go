package export

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/tenancy"
)

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
	inv, err := inventoryOf(obj)
	if err != nil {
		return err
	}
	if inv.meta.DeletionTimestamp != nil {
		c.drop(key)
		if !slices.Contains(inv.meta.Finalizers, Finalizer) {
			return nil
		}
		if err := c.cleanup(ctx, key, inv); err != nil {
			return err
		}
		return c.setFinalizer(ctx, key, false)
	}
	// The registry adds the finalizer on create; this restores one that an
	// update removed, or that an object older than that rule never had.
	if !slices.Contains(inv.meta.Finalizers, Finalizer) {
		if err := c.setFinalizer(ctx, key, true); err != nil {
			return err
		}
	}

	selected, err := c.selectedTargets(key, inv)
	if err != nil {
		return err
	}

	c.mu.Lock()
	s := c.state[key]
	if s == nil {
		s = &inventoryState{key: key, items: newItemSet(c.appliedRV(key)), exporters: map[exporterKey]*exporter{}}
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
		s.items.replace(c.itemsOf(key, selected))
	}

	desired := map[exporterKey]bool{}
	if !inv.suspend {
		for _, r := range inv.refs {
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
		e := newExporter(c, k, s.items)
		s.exporters[k] = e
		e.start(c.runCtx)
	}
	c.mu.Unlock()
	for _, e := range stopping {
		e.stop()
	}
	return nil
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
func (c *Controller) cleanup(ctx context.Context, key invKey, inv *inventory) error {
	sinkInv := c.sinkInventory(key, inv.meta)
	// The item set was dropped with the exporters: read the items again. A
	// selector that cannot be read leaves the export in place rather than
	// removing it without its items' deletions.
	items, err := c.itemsOfInventory(key, inv)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range inv.refs {
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
		err = client.remove(cctx, sinkInv, items, c.cfg.Epoch)
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
