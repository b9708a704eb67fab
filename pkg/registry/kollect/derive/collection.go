package derive

import (
	"fmt"

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
	conds := cloneConditions(in)
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		setCondition(&conds, typ, status, reason, message, generation, now)
	}

	switch {
	case obs != nil && obs.Reason != "":
		set(kollect.ConditionDegraded, metav1.ConditionTrue, obs.Reason, obs.LastError)
	case obs != nil && obs.FailedCount > 0:
		set(kollect.ConditionDegraded, metav1.ConditionTrue, kollect.ReasonExtractionFailed,
			fmt.Sprintf("%d objects could not be extracted; last error: %s", obs.FailedCount, obs.LastError))
	default:
		set(kollect.ConditionDegraded, metav1.ConditionFalse, kollect.ReasonAsExpected, "collection proceeds")
	}

	switch {
	case suspended:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonSuspended, "collection is suspended; items are kept")
	case obs == nil || obs.ObservedGeneration < generation:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonPending, fmt.Sprintf("waiting for the collector to act on generation %d", generation))
	case obs.Reason != "":
		set(kollect.ConditionReady, metav1.ConditionFalse, obs.Reason, obs.LastError)
	default:
		set(kollect.ConditionReady, metav1.ConditionTrue, kollect.ReasonCollected, fmt.Sprintf("%d items collected", obs.ItemCount))
	}
	return conds
}
