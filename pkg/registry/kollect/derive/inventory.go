// Package derive holds the rules that compute status from observations on
// write (DESIGN.md §4). Controllers report observations only; the registry
// strategies call these pure functions in the same update, so GET never
// computes anything and no background aggregator exists.
package derive

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// SinkRef is one sink an inventory exports to, with its namespace resolved.
type SinkRef struct {
	Family kollect.SinkFamily
	// Namespace is where the sink lives; empty means "the inventory's own",
	// which every entry matches.
	Namespace string
	Name      string
}

func (r SinkRef) String() string {
	if r.Namespace == "" {
		return string(r.Family) + "/" + r.Name
	}
	return string(r.Family) + "/" + r.Namespace + "/" + r.Name
}

// InventoryRefs lists the sink references of a namespaced Inventory.
func InventoryRefs(spec *kollect.InventorySpec) []SinkRef {
	return refs(spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs, "")
}

// ClusterInventoryRefs lists the sink references of a ClusterInventory,
// resolving an absent namespace to spec.sinkNamespace.
func ClusterInventoryRefs(spec *kollect.ClusterInventorySpec) []SinkRef {
	return refs(spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs, spec.SinkNamespace)
}

func refs(snapshot, database, event []kollect.SinkReference, defaultNamespace string) []SinkRef {
	out := make([]SinkRef, 0, len(snapshot)+len(database)+len(event))
	add := func(family kollect.SinkFamily, list []kollect.SinkReference) {
		for _, r := range list {
			ns := r.Namespace
			if ns == "" {
				ns = defaultNamespace
			}
			out = append(out, SinkRef{Family: family, Namespace: ns, Name: r.Name})
		}
	}
	add(kollect.SinkFamilySnapshot, snapshot)
	add(kollect.SinkFamilyDatabase, database)
	add(kollect.SinkFamilyEvent, event)
	return out
}

// resolutionReasons are failure reasons that mean a reference, not the sink
// itself, is broken; they make the inventory Degraded.
var resolutionReasons = map[string]bool{
	kollect.ReasonSinkNotFound:        true,
	kollect.ReasonSinkForbidden:       true,
	kollect.ReasonScopeSinkDenied:     true,
	kollect.ReasonSinkNamespaceDenied: true,
	kollect.ReasonTenantMode:          true,
	kollect.ReasonSecretForbidden:     true,
	kollect.ReasonItemsForbidden:      true,
	kollect.ReasonRequesterExpired:    true,
}

// InventoryStatus derives the aggregate status of an Inventory or
// ClusterInventory. It is a pure function of the object's generation, its
// sink references, whether it is suspended, the status as written (whose
// sinkExports are the exporters' observations) and the reference time now,
// used only for the lastTransitionTime of conditions that change.
//
// The rule:
//   - entries of sinks no longer referenced are dropped, the rest are kept
//     in reference order;
//   - an entry counts for the current generation only when its
//     observedGeneration has caught up; a reference without such an entry is
//     pending;
//   - Synced is True (Exported) when every reference has an Exported or
//     Debounced entry; otherwise False with ExportFailed (every reference
//     failed), PartiallySynced (some failed), Progressing (none failed, some
//     pending), NoSinks or Suspended;
//   - Ready follows Synced, except that an inventory with no sinks is Ready;
//   - Degraded is True when a failure is about resolving a reference
//     (SinkNotFound, SinkForbidden, ...);
//   - lastExportTime is the latest lastExportTime of the kept entries.
func InventoryStatus(generation int64, suspended bool, refs []SinkRef, in kollect.InventoryStatus, now metav1.Time) kollect.InventoryStatus {
	out := kollect.InventoryStatus{
		ObservedGeneration: generation,
		Conditions:         cloneConditions(in.Conditions),
		ItemCount:          in.ItemCount,
		// Recorded by the strategies, not derived: passed through.
		Requester: in.Requester.DeepCopy(),
	}

	var synced, failed []SinkRef
	var degradedReason, degradedMessage string
	var latestExport *metav1.Time
	for _, ref := range refs {
		entry := findEntry(in.SinkExports, ref)
		if entry == nil {
			continue
		}
		out.SinkExports = append(out.SinkExports, *entry.DeepCopy())
		if entry.LastExportTime != nil && (latestExport == nil || latestExport.Before(entry.LastExportTime)) {
			latestExport = entry.LastExportTime
			out.ItemCount = entry.ItemCount
		}
		if entry.ObservedGeneration < generation {
			continue
		}
		switch entry.Outcome {
		case kollect.OutcomeExported, kollect.OutcomeDebounced:
			synced = append(synced, ref)
		case kollect.OutcomeFailed:
			failed = append(failed, ref)
			if degradedReason == "" && resolutionReasons[entry.Reason] {
				degradedReason, degradedMessage = entry.Reason, fmt.Sprintf("%s: %s", ref, entry.Message)
			}
		}
	}
	if latestExport != nil {
		t := *latestExport
		out.LastExportTime = &t
	}
	out.SinksSynced = fmt.Sprintf("%d/%d", len(synced), len(refs))

	pending := len(refs) - len(synced) - len(failed)
	var status metav1.ConditionStatus
	var reason, message string
	switch {
	case suspended:
		status, reason, message = metav1.ConditionFalse, kollect.ReasonSuspended, "export is suspended"
	case len(refs) == 0:
		status, reason, message = metav1.ConditionFalse, kollect.ReasonNoSinks, "no sink references: nothing is exported"
	case len(failed) == len(refs):
		status, reason, message = metav1.ConditionFalse, kollect.ReasonExportFailed, "every sink failed: "+joinRefs(failed)
	case len(failed) > 0:
		status, reason = metav1.ConditionFalse, kollect.ReasonPartiallySynced
		message = fmt.Sprintf("%d of %d sinks synced; failed: %s", len(synced), len(refs), joinRefs(failed))
	case pending > 0:
		status, reason = metav1.ConditionFalse, kollect.ReasonProgressing
		message = fmt.Sprintf("%d of %d sinks synced at generation %d", len(synced), len(refs), generation)
	default:
		status, reason = metav1.ConditionTrue, kollect.ReasonExported
		message = fmt.Sprintf("all %d sinks hold the current inventory", len(refs))
	}
	ready := status
	if reason == kollect.ReasonNoSinks {
		ready = metav1.ConditionTrue
	}
	setCondition(&out.Conditions, kollect.ConditionReady, ready, reason, message, generation, now)
	setCondition(&out.Conditions, kollect.ConditionSynced, status, reason, message, generation, now)
	if degradedReason != "" {
		setCondition(&out.Conditions, kollect.ConditionDegraded, metav1.ConditionTrue, degradedReason, degradedMessage, generation, now)
	} else {
		setCondition(&out.Conditions, kollect.ConditionDegraded, metav1.ConditionFalse, kollect.ReasonAsExpected, "every sink reference resolves", generation, now)
	}
	return out
}

// findEntry returns the entry an exporter wrote for ref. An entry recorded
// for another namespace belongs to a reference that has since moved, so it
// does not count.
func findEntry(entries []kollect.SinkExportStatus, ref SinkRef) *kollect.SinkExportStatus {
	for i := range entries {
		e := &entries[i]
		if e.Family != ref.Family || e.Name != ref.Name {
			continue
		}
		if ref.Namespace != "" && e.Namespace != "" && e.Namespace != ref.Namespace {
			return nil
		}
		return e
	}
	return nil
}

func joinRefs(refs []SinkRef) string {
	s := make([]string, len(refs))
	for i, r := range refs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

// setCondition sets a condition, keeping its lastTransitionTime unless the
// status flips, and keeps conditions sorted by type so that equal inputs give
// byte-equal outputs.
func setCondition(conds *[]metav1.Condition, typ string, status metav1.ConditionStatus, reason, message string, generation int64, now metav1.Time) {
	meta.SetStatusCondition(conds, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
		LastTransitionTime: now,
	})
	sort.SliceStable(*conds, func(i, j int) bool { return (*conds)[i].Type < (*conds)[j].Type })
}

func cloneConditions(in []metav1.Condition) []metav1.Condition {
	if in == nil {
		return nil
	}
	out := make([]metav1.Condition, len(in))
	for i := range in {
		in[i].DeepCopyInto(&out[i])
	}
	return out
}
