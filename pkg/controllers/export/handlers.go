package export

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

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
