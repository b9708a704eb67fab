package export

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

var _ common.FirstEntrySource = (*Controller)(nil)

// FirstEntries returns the entries the exporters of a new inventory would
// write on their first run because its sink is not in the cache
// (resolveCached), exactly as they would write them: finding them stored,
// they write nothing (resolved.entrySays). The registry confirms each miss
// in storage. A suspended inventory has no exporters, and no entries; nor
// has one with more references than validation allows, which the create
// refuses (deriving its status from as many entries takes time quadratic
// in their number).
func (c *Controller) FirstEntries(obj metav1.Object) []v1alpha1.SinkExportStatus {
	if c.runCtx.Err() != nil {
		return nil // stopping: the caches are stale
	}
	spec, err := specOf(obj)
	if err != nil || spec.suspend || len(spec.refs) > validation.MaxSinkReferences {
		return nil
	}
	k := invKeyOf(obj)
	now := metav1.Now()
	var out []v1alpha1.SinkExportStatus
	for _, r := range spec.refs {
		_, failure, _ := c.resolveCached(exporterKey{inv: k, family: r.family, namespace: r.namespace, name: r.name})
		if failure == nil || failure.reason != v1alpha1.ReasonSinkNotFound {
			continue
		}
		out = append(out, v1alpha1.SinkExportStatus{Family: r.family, Namespace: r.namespace, Name: r.name,
			ObservedGeneration: spec.generation, Outcome: v1alpha1.OutcomeFailed, LastAttemptTime: &now,
			Reason: failure.reason, Message: entryMessage(failure.message)})
	}
	return out
}

// Created emits the Warning Events of a stored new inventory's first
// entries, as writeEntries does for entries its exporters write: the
// first failure of a streak is announced once the entry is stored,
// regarding the inventory at the write that stored it. A sink created in
// the meantime is announced too: the Event is true of the version it
// regards, and the exporter soon writes what it finds (leaving it out
// lost the Event for good when the sink went again before the exporter
// looked).
func (c *Controller) Created(obj metav1.Object) {
	if c.runCtx.Err() != nil {
		return // stopping: the Events would not be recorded
	}
	spec, err := specOf(obj)
	if err != nil {
		return
	}
	var w warnings
	for _, e := range spec.status.SinkExports {
		if e.Outcome == v1alpha1.OutcomeFailed {
			w.add(obj.GetResourceVersion(), e.Reason, e.Family, e.Namespace, e.Name, e.Message)
		}
	}
	w.emit(c, invKeyOf(obj), string(obj.GetUID()))
}

func invKeyOf(obj metav1.Object) invKey {
	_, cluster := obj.(*v1alpha1.ClusterInventory)
	return invKey{Cluster: cluster, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}
