package export

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// runningInventories are the inventories the controller exports: each
// one's selected targets, item set and exporters. mu guards the maps and
// every state's targets and exporters. The item handler holds it while it
// applies an event to the item sets, and syncInventory while it reads the
// item index for a new selection: no item event falls between the two.
// The item sets have locks of their own (itemset.go), taken under mu.
type runningInventories struct {
	mu    sync.Mutex
	byKey map[plumbing.InventoryKey]*inventoryState
	// byNamespace indexes them by the namespace of their items: an
	// Inventory's own, "" for ClusterInventories.
	byNamespace map[string]map[plumbing.InventoryKey]*inventoryState
	// applied holds, per item informer (namespaced, cluster), the
	// resourceVersion of the last item event applied to every item set.
	applied [2]atomic.Uint64
}

// inventoryState is the controller's state of one inventory.
type inventoryState struct {
	key       plumbing.InventoryKey
	items     *itemSet
	targets   map[string]bool // selected target names
	exporters map[exporterKey]*exporter
}

func newRunningInventories() *runningInventories {
	return &runningInventories{byKey: map[plumbing.InventoryKey]*inventoryState{},
		byNamespace: map[string]map[plumbing.InventoryKey]*inventoryState{}}
}

// update makes the inventory key select targets, with its item set
// holding what items returns (read under the lock when the selection
// changed), and run exactly the exporters of desired: it pokes those
// running, since the spec may have changed (generation, intervals), and
// starts the others with start. It returns the exporters no longer
// desired, for the caller to stop outside the lock.
func (r *runningInventories) update(key plumbing.InventoryKey, targets map[string]bool, items func() map[string]*exportedItem,
	desired map[exporterKey]bool, start func(exporterKey, *itemSet) *exporter) (stopping []*exporter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byKey[key]
	if s == nil {
		s = &inventoryState{key: key, items: newItemSet(r.appliedRV(key)), exporters: map[exporterKey]*exporter{}}
		r.byKey[key] = s
		ns := key.ItemNamespace()
		if r.byNamespace[ns] == nil {
			r.byNamespace[ns] = map[plumbing.InventoryKey]*inventoryState{}
		}
		r.byNamespace[ns][key] = s
	}
	if !maps.Equal(s.targets, targets) || s.targets == nil {
		s.targets = targets
		s.items.replace(items())
	}
	for k, e := range s.exporters {
		if !desired[k] {
			stopping = append(stopping, e)
			delete(s.exporters, k)
		}
	}
	for k := range desired {
		if e, ok := s.exporters[k]; ok {
			e.poke()
			continue
		}
		s.exporters[k] = start(k, s.items)
	}
	return stopping
}

// drop forgets an inventory and returns its exporters, to be stopped.
func (r *runningInventories) drop(key plumbing.InventoryKey) []*exporter {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.byKey[key]
	delete(r.byKey, key)
	delete(r.byNamespace[key.ItemNamespace()], key)
	if s == nil {
		return nil
	}
	return slices.Collect(maps.Values(s.exporters))
}

// dropAll forgets every inventory and returns all exporters, to be stopped.
func (r *runningInventories) dropAll() []*exporter {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []*exporter
	for _, s := range r.byKey {
		for _, e := range s.exporters {
			all = append(all, e)
		}
	}
	r.byKey = map[plumbing.InventoryKey]*inventoryState{}
	r.byNamespace = map[string]map[plumbing.InventoryKey]*inventoryState{}
	return all
}

// stopExporters stops exporters, each waiting for its run to end: never
// under a lock the item handler or another exporter may want.
func stopExporters(exporters []*exporter) {
	for _, e := range exporters {
		e.stop()
	}
}

// exporterCount is how many exporters the inventory runs.
func (r *runningInventories) exporterCount(key plumbing.InventoryKey) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.byKey[key]; s != nil {
		return len(s.exporters)
	}
	return 0
}

// keysIn names the inventories whose items are in namespace ns.
func (r *runningInventories) keysIn(ns string) []plumbing.InventoryKey {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Collect(maps.Keys(r.byNamespace[ns]))
}

// pokeSink wakes the exporters of a sink (its spec or Secret reference changed).
func (r *runningInventories) pokeSink(k sinkKey) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.byKey {
		for key, e := range s.exporters {
			if key.family == k.family && key.namespace == k.namespace && key.name == k.name {
				e.poke()
			}
		}
	}
}

// pokeNamespace wakes the exporters of the inventories whose items are in ns.
func (r *runningInventories) pokeNamespace(ns string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.byNamespace[ns] {
		for _, e := range s.exporters {
			e.poke()
		}
	}
}

// upsert applies an item's add or update to the item sets of the
// inventories selecting its target.
func (r *runningInventories) upsert(e *exportedItem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.byNamespace[e.item.Namespace] {
		if s.targets[e.item.Target] {
			s.items.upsert(e)
		}
	}
	r.markApplied(e.item)
}

// remove applies an item's deletion to the item sets holding it. final
// says whether it is the deletion's own state: the final state of a
// missed deletion carries an older revision, which proves nothing about
// what was applied.
func (r *runningInventories) remove(it *sink.Item, final bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.byNamespace[it.Namespace] {
		s.items.remove(it.Key(), it)
	}
	if final {
		r.markApplied(it)
	}
}

// markApplied records that the item event of it has been applied to
// every item set (called after them, under mu): a run that takes its
// batch afterwards may claim every change up to it.
func (r *runningInventories) markApplied(it *sink.Item) {
	rv, err := strconv.ParseUint(it.ResourceVersion, 10, 64)
	if err != nil {
		return
	}
	a := &r.applied[0]
	if it.Namespace == "" {
		a = &r.applied[1]
	}
	if rv > a.Load() {
		a.Store(rv)
	}
}

// appliedRV is the cursor of an inventory's item informer, "" before any event.
func (r *runningInventories) appliedRV(k plumbing.InventoryKey) func() string {
	a := &r.applied[0]
	if k.Cluster {
		a = &r.applied[1]
	}
	return func() string {
		if v := a.Load(); v > 0 {
			return strconv.FormatUint(v, 10)
		}
		return ""
	}
}
