package export

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	kollectv1alpha1 "kollect.dev/kollect/pkg/generated/informers/externalversions/kollect/v1alpha1"
)

// addEventHandlers says what each informer's events do: queue an
// inventory, wake exporters, probe a sink, or apply an item to the item
// sets holding it. Each update handler lets through only the changes its
// readers read.
func (c *Controller) addEventHandlers(k kollectv1alpha1.Interface) {
	// The exporters' own status writes come back as updates: only what
	// a reconcile reads may queue one, or every write would cause the next.
	_, _ = k.Inventories().Informer().AddEventHandler(filtered(c.enqueueInventory, inventoryChanged))
	_, _ = k.ClusterInventories().Informer().AddEventHandler(filtered(c.enqueueInventory, inventoryChanged))

	// A target's labels decide which inventories select it; its status
	// (written by the collector) does not.
	_, _ = k.Targets().Informer().AddEventHandler(filtered(c.targetChanged, labelsChanged))
	_, _ = k.ClusterTargets().Informer().AddEventHandler(filtered(c.targetChanged, labelsChanged))

	// Sinks and scopes are read at export time: poke the exporters that use
	// them, and probe changed sinks. A sink's own status writes (probes)
	// must not wake every exporter using it: only spec changes count.
	_, _ = k.SnapshotSinks().Informer().AddEventHandler(filtered(c.sinkChanged(v1alpha1.SinkFamilySnapshot), generationChanged))
	_, _ = k.DatabaseSinks().Informer().AddEventHandler(filtered(c.sinkChanged(v1alpha1.SinkFamilyDatabase), generationChanged))
	_, _ = k.EventSinks().Informer().AddEventHandler(filtered(c.sinkChanged(v1alpha1.SinkFamilyEvent), generationChanged))
	// Scope status (quota usage) changes with every item: only the spec matters.
	_, _ = k.Scopes().Informer().AddEventHandler(filtered(c.scopeChanged, generationChanged))
	_, _ = k.ClusterScopes().Informer().AddEventHandler(filtered(c.scopeChanged, generationChanged))

	_, _ = c.items.AddEventHandler(c.itemHandler())
	_, _ = c.clusterItems.AddEventHandler(c.itemHandler())
}

func (c *Controller) enqueueInventory(obj any) {
	if m, ok := unwrap(obj).(metav1.Object); ok {
		c.queue.Add(inventoryKeyOf(m))
	}
}

// targetChanged queues the inventories that may select the target.
// Inventories without state yet (created before their targets) are
// queued by their own informer.
func (c *Controller) targetChanged(obj any) {
	switch o := unwrap(obj).(type) {
	case *v1alpha1.Target:
		c.enqueue(c.running.keysIn(o.Namespace))
	case *v1alpha1.ClusterTarget:
		c.enqueue(c.running.keysIn(""))
	}
}

func (c *Controller) enqueue(keys []plumbing.InventoryKey) {
	for _, k := range keys {
		c.queue.Add(k)
	}
}

// sinkChanged wakes a sink's exporters and probes it.
func (c *Controller) sinkChanged(family v1alpha1.SinkFamily) func(any) {
	return func(obj any) {
		m, ok := unwrap(obj).(metav1.Object)
		if !ok {
			return
		}
		key := sinkKey{family: family, namespace: m.GetNamespace(), name: m.GetName()}
		c.running.pokeSink(key)
		c.probes.Add(key)
	}
}

// scopeChanged wakes the exporters of the inventories a scope governs:
// the namespace's Inventories, or every ClusterInventory for a ClusterScope.
func (c *Controller) scopeChanged(obj any) {
	if m, ok := unwrap(obj).(metav1.Object); ok {
		c.running.pokeNamespace(m.GetNamespace())
	}
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

func labelsChanged(old, obj metav1.Object) bool { return !maps.Equal(old.GetLabels(), obj.GetLabels()) }

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
