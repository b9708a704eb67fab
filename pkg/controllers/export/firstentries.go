package export

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/firstentries"
)

var _ firstentries.Source = (*Controller)(nil)

// FirstEntries returns the entries the exporters of a new inventory would
// write on their first run because its sink is not in the cache
// (resolveCached), exactly as they would write them: finding them stored,
// they write nothing (resolved.entrySays). The registry confirms each miss
// in storage. A suspended inventory has no exporters, and no entries; nor
// has one with more references than validation allows, which the create
// refuses (deriving its status from as many entries takes time quadratic
// in their number).
func (c *Controller) FirstEntries(obj metav1.Object) []v1alpha1.SinkExportStatus {
	if c.stopping() {
		return nil // the caches are stale
	}
	inv, err := inventoryOf(obj)
	if err != nil || inv.suspend || len(inv.refs) > validation.MaxSinkReferences {
		return nil
	}
	k := inventoryKeyOf(obj)
	now := metav1.Now()
	var out []v1alpha1.SinkExportStatus
	for _, r := range inv.refs {
		_, failure, _ := c.resolveCached(exporterKey{inv: k, family: r.family, namespace: r.namespace, name: r.name})
		if failure == nil || failure.reason != v1alpha1.ReasonSinkNotFound {
			continue
		}
		out = append(out, v1alpha1.SinkExportStatus{Family: r.family, Namespace: r.namespace, Name: r.name,
			ObservedGeneration: inv.generation, Outcome: v1alpha1.OutcomeFailed, LastAttemptTime: &now,
			Reason: failure.reason, Message: entryMessage(failure.message)})
	}
	return out
}

// Created emits the Warning Events of a stored new inventory's first
// entries, as writeEntries does for entries its exporters write: the
// first failure of a streak is announced once, regarding the inventory at
// the write that stored it. Unlike an exporter's, it waits
// firstWarningDelay and announces only the entries still stored then:
// `kubectl apply -f dir/` creates an inventory a moment before its sink
// when the files come in that order, and the sink's exporter then writes
// over the entry; the create's answer has warned its client already
// (common.FirstEntries), and an Event posted at once would stay about a
// sink that exists. An entry the exporter has not written over is still
// announced, even when its sink came and went meanwhile (the exporter
// found the entry saying so and wrote nothing). Waiting also keeps the
// Events' posts out of a burst of creates.
func (c *Controller) Created(obj metav1.Object) {
	if c.stopping() {
		return // the Events would not be recorded
	}
	inv, err := inventoryOf(obj)
	if err != nil {
		return
	}
	var first []v1alpha1.SinkExportStatus
	for _, e := range inv.status.SinkExports {
		if e.Outcome == v1alpha1.OutcomeFailed {
			first = append(first, e)
		}
	}
	if len(first) == 0 {
		return
	}
	k, uid, rv := inventoryKeyOf(obj), string(obj.GetUID()), obj.GetResourceVersion()
	time.AfterFunc(firstWarningDelay, func() { c.warnFirst(k, uid, rv, first) })
}

// firstWarningDelay is how long a new inventory's first entries stand
// before their Warning Event.
const firstWarningDelay = 5 * time.Second

// warnFirst emits the Warning Event of the first entries of the inventory
// k (uid) that its cache still holds as the create stored them (rv).
func (c *Controller) warnFirst(k plumbing.InventoryKey, uid, rv string, first []v1alpha1.SinkExportStatus) {
	if c.stopping() {
		return
	}
	obj, err := c.getInventory(k)
	if err != nil || obj == nil || string(obj.GetUID()) != uid {
		return // gone, or another object of the name
	}
	inv, err := inventoryOf(obj)
	if err != nil {
		return
	}
	var w warnings
	for _, e := range first {
		if slices.ContainsFunc(inv.status.SinkExports, func(now v1alpha1.SinkExportStatus) bool { return equality.Semantic.DeepEqual(now, e) }) {
			w.add(rv, e.Reason, e.Family, e.Namespace, e.Name, e.Message)
		}
	}
	w.emit(c, k, uid)
}
