package derive

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// CollectionConditions derives the Ready and Degraded conditions of a Target
// or ClusterTarget from what the collector last reported:
//   - suspended: Ready=False, Suspended;
//   - no report at the current generation yet: Ready=False, Pending;
//   - a report with a blocking reason (KindNotFound, ProfileNotFound, ...):
//     Ready=False and Degraded=True with that reason;
//   - extraction failures on some objects: Ready=True (the rest is
//     collected) and Degraded=True, ExtractionFailed;
//   - otherwise Ready=True, Collected, and Degraded=False.
func CollectionConditions(generation int64, suspended bool, obs *kollect.CollectionObservation, in []metav1.Condition, now metav1.Time) []metav1.Condition {
	return ClusterTargetConditions(generation, suspended, false, obs, nil, in, now)
}

// maxNamedMembers bounds the members a condition message names, so that a
// large fleet keeps it within what conditions may hold.
const maxNamedMembers = 5

// ClusterTargetConditions is CollectionConditions for a ClusterTarget, which
// also collects from the MemberClusters its clusterSelector selects (fleet
// is set when it has one) and reports each in clusters (ignored without
// one):
//   - Degraded is True when the host's report or any member's has a
//     blocking reason (or the member is unreachable), with the first
//     reason and a message naming the members; else when any reports
//     extraction failures;
//   - Ready is Pending while the host's report (required without a
//     clusterSelector, where it is the only one) or a healthy member's is
//     behind the generation; False with the host's blocking reason, or
//     with a member's when every report has one; True otherwise: the
//     members that answer are collected.
func ClusterTargetConditions(generation int64, suspended, fleet bool, obs *kollect.CollectionObservation, clusters []kollect.ClusterCollection, in []metav1.Condition, now metav1.Time) []metav1.Condition {
	conds := cloneConditions(in)
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		setCondition(&conds, typ, status, reason, message, generation, now)
	}

	if !fleet {
		clusters = nil // left over from a clusterSelector since removed
	}
	var blocked, failing, behind []memberReport
	var items, failed int64
	for i := range clusters {
		m := memberReport{&clusters[i]}
		switch c := &m.Collection; {
		case m.reason() != "":
			blocked = append(blocked, m)
		case c.ObservedGeneration < generation:
			behind = append(behind, m)
		}
		if m.Collection.FailedCount > 0 {
			failing = append(failing, m)
		}
		items, failed = items+m.Collection.ItemCount, failed+m.Collection.FailedCount
	}
	if obs != nil {
		items, failed = items+obs.ItemCount, failed+obs.FailedCount
	}

	switch {
	case obs != nil && obs.Reason != "":
		set(kollect.ConditionDegraded, metav1.ConditionTrue, obs.Reason, obs.LastError)
	case len(blocked) > 0:
		set(kollect.ConditionDegraded, metav1.ConditionTrue, blocked[0].reason(), describe(blocked, memberReport.problem))
	case obs != nil && obs.FailedCount > 0 && len(failing) == 0:
		set(kollect.ConditionDegraded, metav1.ConditionTrue, kollect.ReasonExtractionFailed,
			fmt.Sprintf("%d objects could not be extracted; last error: %s", obs.FailedCount, obs.LastError))
	case failed > 0:
		set(kollect.ConditionDegraded, metav1.ConditionTrue, kollect.ReasonExtractionFailed,
			fmt.Sprintf("%d objects could not be extracted; %s", failed, describe(failing, memberReport.extraction)))
	default:
		set(kollect.ConditionDegraded, metav1.ConditionFalse, kollect.ReasonAsExpected, "collection proceeds")
	}

	hostPending := obs == nil || obs.ObservedGeneration < generation
	switch {
	case suspended:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonSuspended, "collection is suspended; items are kept")
	case (!fleet || obs != nil) && hostPending, fleet && obs == nil && len(clusters) == 0:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonPending, fmt.Sprintf("waiting for the collector to act on generation %d", generation))
	case len(behind) > 0:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonPending,
			fmt.Sprintf("waiting for the collector to act on generation %d on %s", generation, describe(behind, nil)))
	case obs != nil && obs.Reason != "":
		set(kollect.ConditionReady, metav1.ConditionFalse, obs.Reason, obs.LastError)
	case obs == nil && len(blocked) == len(clusters):
		set(kollect.ConditionReady, metav1.ConditionFalse, blocked[0].reason(), describe(blocked, memberReport.problem))
	case len(clusters) > 0:
		set(kollect.ConditionReady, metav1.ConditionTrue, kollect.ReasonCollected,
			fmt.Sprintf("%d items collected from %d of %d member clusters", items, len(clusters)-len(blocked), len(clusters)))
	default:
		set(kollect.ConditionReady, metav1.ConditionTrue, kollect.ReasonCollected, fmt.Sprintf("%d items collected", items))
	}
	return conds
}

// memberReport is a ClusterTarget's report on one member.
type memberReport struct{ *kollect.ClusterCollection }

// reason is the member's blocking reason: the collector's, or Unreachable
// while the member does not answer.
func (m memberReport) reason() string {
	if r := m.Collection.Reason; r != "" {
		return r
	}
	if m.UnreachableSince != nil {
		return kollect.ReasonUnreachable
	}
	return ""
}

func (m memberReport) problem() string {
	msg := m.Collection.LastError
	if msg == "" {
		msg = m.reason()
	}
	if m.UnreachableSince != nil {
		msg += " (unreachable since " + m.UnreachableSince.UTC().Format(time.RFC3339) + "; its items are kept)"
	}
	return msg
}

func (m memberReport) extraction() string {
	return fmt.Sprintf("%d failed, last error: %s", m.Collection.FailedCount, m.Collection.LastError)
}

// describe names the members of reports, with what detail says of each,
// up to maxNamedMembers of them.
func describe(reports []memberReport, detail func(memberReport) string) string {
	parts := make([]string, 0, min(len(reports), maxNamedMembers)+1)
	for i, m := range reports {
		if i == maxNamedMembers {
			parts = append(parts, fmt.Sprintf("and %d more members", len(reports)-i))
			break
		}
		part := fmt.Sprintf("member %q", m.Name)
		if detail != nil {
			part += ": " + detail(m)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, "; ")
}
