package export

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
)

// sinkFieldManager owns the Ready condition of a sink its requester may
// no longer use; the prober owns it otherwise.
const sinkFieldManager = "kollect-sink-requester"

// sinkRequesterLoop re-checks every sink's requester each watchdog period,
// so that a sink no Inventory uses turns Ready=False (SecretForbidden,
// RequesterExpired) too. It writes a sink's status only on a transition:
// into a denial it sets Ready=False with the denial's reason; out of one it
// has the prober test the sink again, which then writes Ready.
func (c *Controller) sinkRequesterLoop(ctx context.Context) {
	c.everySink(ctx, c.watchdog, func(key sinkKey, obj *sinkObject) { c.checkSinkRequester(ctx, key, obj) })
}

// requesterReasons are the Ready reasons sinkRequesterLoop writes.
var requesterReasons = map[string]bool{v1alpha1.ReasonSecretForbidden: true, v1alpha1.ReasonRequesterExpired: true}

func (c *Controller) checkSinkRequester(ctx context.Context, key sinkKey, obj *sinkObject) {
	if obj.GetDeletionTimestamp() != nil {
		return
	}
	denial, err := c.sinkDenial(ctx, obj)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot re-check a sink's requester; retrying next period", "sink", key, "err", err)
		return
	}
	ready := obj.ready()
	if denial == nil {
		if ready != nil && ready.Status == metav1.ConditionFalse && requesterReasons[ready.Reason] {
			c.probes.Add(key)
		}
		return
	}
	if ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == denial.Reason && ready.Message == denial.Message {
		return
	}
	now := metav1.Now()
	cond := metav1apply.Condition().WithType(v1alpha1.ConditionReady).WithStatus(metav1.ConditionFalse).
		WithReason(denial.Reason).WithMessage(plumbing.Truncate(denial.Message, 1024)).
		WithObservedGeneration(obj.GetGeneration()).WithLastTransitionTime(now)
	if ready != nil && ready.Status == metav1.ConditionFalse {
		cond.WithLastTransitionTime(ready.LastTransitionTime)
	}
	if err := applySinkStatus(ctx, c.kollect, key, applyv1alpha1.SinkStatus().WithConditions(cond), sinkFieldManager); err != nil {
		if !apierrors.IsNotFound(err) && ctx.Err() == nil {
			klog.FromContext(ctx).V(2).Info("Writing a sink's requester denial failed", "sink", key, "err", err)
		}
		return
	}
	ref := plumbing.ObjectReference(key.kind(), key.namespace, key.name, obj.GetUID(), obj.GetResourceVersion())
	c.recorder.Warn(ref, denial.Reason, "UseSink", denial.Message)
}
