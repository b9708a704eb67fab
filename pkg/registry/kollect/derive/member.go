package derive

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// MemberConditions derives the Reachable and Ready conditions of a
// MemberCluster from what its owning replica last reported (obs):
//   - Reachable is Unknown (Pending) until a report arrives, then True
//     when the member's API server answered, else False with the report's
//     errorClass (Unreachable when it names none), the last error and
//     since when;
//   - Ready is False/Suspended while spec.suspend is set, False/Pending
//     without a report at the current generation, False with the
//     errorClass (or Unreachable) when the member is unreachable or the
//     report names a failure, and True/Collecting otherwise.
func MemberConditions(generation int64, suspended bool, obs *kollect.MemberObservation, in []metav1.Condition, now metav1.Time) []metav1.Condition {
	conds := cloneConditions(in)
	set := func(typ string, status metav1.ConditionStatus, reason, message string) {
		setCondition(&conds, typ, status, reason, message, generation, now)
	}

	failure := kollect.ReasonUnreachable
	if obs != nil && obs.ErrorClass != "" {
		failure = obs.ErrorClass
	}
	switch {
	case obs == nil:
		set(kollect.ConditionReachable, metav1.ConditionUnknown, kollect.ReasonPending, "no replica has reported on the member yet")
	case obs.Reachable:
		set(kollect.ConditionReachable, metav1.ConditionTrue, kollect.ReasonReachable, reachableMessage(obs))
	default:
		set(kollect.ConditionReachable, metav1.ConditionFalse, failure, unreachableMessage(obs))
	}

	switch {
	case suspended:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonSuspended, "collection from the member is suspended; its items are kept")
	case obs == nil || obs.ObservedGeneration < generation:
		set(kollect.ConditionReady, metav1.ConditionFalse, kollect.ReasonPending, fmt.Sprintf("waiting for the owning replica to act on generation %d", generation))
	case !obs.Reachable:
		set(kollect.ConditionReady, metav1.ConditionFalse, failure, unreachableMessage(obs))
	case obs.ErrorClass != "":
		set(kollect.ConditionReady, metav1.ConditionFalse, obs.ErrorClass, obs.LastError)
	default:
		set(kollect.ConditionReady, metav1.ConditionTrue, kollect.ReasonCollecting,
			fmt.Sprintf("%d items collected by %s", obs.ItemCount, orUnknown(obs.Owner)))
	}
	return conds
}

func reachableMessage(obs *kollect.MemberObservation) string {
	return fmt.Sprintf("the member's API server (%s) answered %s", orUnknown(obs.ServerVersion), orUnknown(obs.Owner))
}

// unreachableMessage says what failed and since when; the items
// collected before are kept meanwhile.
func unreachableMessage(obs *kollect.MemberObservation) string {
	msg := obs.LastError
	if msg == "" {
		msg = "the member's API server did not answer"
	}
	if obs.UnreachableSince != nil {
		msg += " (since " + obs.UnreachableSince.UTC().Format(time.RFC3339) + "; its items are kept)"
	}
	return msg
}

func orUnknown(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}
