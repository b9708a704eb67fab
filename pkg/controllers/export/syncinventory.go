package export

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/tenancy"
)

// syncInventory brings the export of one Inventory or ClusterInventory in
// line with the object in the cache: one exporter per sink reference, all
// following the item set of the targets it selects. A deleted inventory's
// export is removed from the sinks whose deletionPolicy is Delete before
// its finalizer goes. Reconciles are sequential (one worker).
func (c *Controller) syncInventory(ctx context.Context, key plumbing.InventoryKey) error {
	// Read the inventory from the cache: one that is gone exports nothing
	// more (its cleanup ran while it was being deleted).
	obj, err := c.getInventory(key)
	if err != nil {
		return err
	}
	if obj == nil {
		stopExporters(c.running.drop(key))
		return nil
	}

	// The first inventory starts the item informers.
	if err := c.startItemInformers(ctx); err != nil {
		return err
	}
	inv, err := inventoryOf(obj)
	if err != nil {
		return err
	}

	// A deleted inventory stops exporting; while it holds the finalizer,
	// remove what it exported, then let it go.
	if inv.meta.DeletionTimestamp != nil {
		stopExporters(c.running.drop(key))
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

	// Find the targets it selects: their items are what it exports.
	selected, err := c.selectedTargets(key, inv)
	if err != nil {
		return err
	}

	// Run one exporter per sink reference (none while suspended), each
	// following the item set of the selected targets, and stop the rest.
	// The exporters run until they are stopped, not for this sync: they
	// get the worker's context, which ends with Run's.
	start := func(k exporterKey, items *itemSet) *exporter {
		e := newExporter(c, k, items)
		e.start(ctx)
		return e
	}
	items := func() map[string]*exportedItem { return c.itemsOf(key, selected) }
	stopExporters(c.running.update(key, selected, items, wantedExporters(key, inv), start))
	return nil
}

// wantedExporters are the exporters of an inventory's sink references;
// none while it is suspended.
func wantedExporters(key plumbing.InventoryKey, inv *inventory) map[exporterKey]bool {
	wanted := map[exporterKey]bool{}
	if inv.suspend {
		return wanted
	}
	for _, r := range inv.refs {
		wanted[exporterKey{inv: key, family: r.family, namespace: r.namespace, name: r.name}] = true
	}
	return wanted
}

// setFinalizer adds or removes the export finalizer with a fresh read.
func (c *Controller) setFinalizer(ctx context.Context, key plumbing.InventoryKey, present bool) error {
	api := c.kollect.KollectV1alpha1()
	if key.Cluster {
		return finalizers.Set[*v1alpha1.ClusterInventory](ctx, api.ClusterInventories(), key.Name, Finalizer, fieldManager, present)
	}
	return finalizers.Set[*v1alpha1.Inventory](ctx, api.Inventories(key.Namespace), key.Name, Finalizer, fieldManager, present)
}

const fieldManager = "kollect-exporter"

// cleanup removes what a deleted inventory exported to the sinks whose
// deletionPolicy is Delete: the document, the rows, or a delete event per item.
func (c *Controller) cleanup(ctx context.Context, key plumbing.InventoryKey, inv *inventory) error {
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
