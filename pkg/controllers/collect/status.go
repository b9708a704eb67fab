package collect

import (
	"context"
	"slices"
	"strings"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
)

// maxLastError bounds status.collection.lastError. An error can quote the
// object (an expression that prints a map), and one over validation's
// 4,096 bytes would make every status write of the target fail.
const maxLastError = 1024

// reportable says whether the collector has something to say about a
// target: before its first walk the derived Pending says it all.
func reportable(t *target, inf *gvrInformer) bool {
	if t.reason != "" || t.partial != nil || t.suspended || t.walkedOnce {
		return true
	}
	return inf != nil && inf.listErr.Load() != nil
}

// observation is what the collector reports about a target now.
func (c *Collector) observation(key targetKey, t *target, inf *gvrInformer) (*v1alpha1.CollectionObservation, []string) {
	n := c.index.counts(key)
	obs := &v1alpha1.CollectionObservation{
		ObservedGeneration: t.generation,
		ItemCount:          n.items,
		FailedCount:        n.failed,
		Reason:             t.reason,
		LastError:          t.message,
		LastFullSyncTime:   timeOrNil(t.lastFullSync),
		LastChangeTime:     timeOrNil(n.lastChange),
	}
	if t.reason == "" && !t.suspended && n.failed > 0 {
		obs.LastError = n.lastFailure
	}
	if t.spec != nil && inf != nil && !inf.synced.Load() {
		if msg := inf.listErr.Load(); msg != nil {
			obs.Reason, obs.LastError = ReasonListFailed, *msg
		}
	}
	if n.overQuota > 0 {
		obs.OverQuotaCount = n.overQuota
		if obs.Reason == "" {
			obs.Reason, obs.LastError = kollect.ReasonQuotaExceeded, n.quotaMessage
		}
	}
	if obs.Reason == "" && t.partial != nil {
		obs.Reason, obs.LastError = t.partial.Reason, t.partial.Message
	}
	obs.LastError = shorten(obs.LastError)
	var namespaces []string
	if key.Cluster {
		namespaces = c.matchedNamespaces(t.spec)
	}
	return obs, namespaces
}

func timeOrNil(t time.Time) *metav1.Time {
	if t.IsZero() {
		return nil
	}
	mt := metav1.NewTime(t.Truncate(time.Second))
	return &mt
}

func timeEqual(a, b *metav1.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(b)
}

// withoutTimes is an observation without its time fields.
func withoutTimes(o *v1alpha1.CollectionObservation) v1alpha1.CollectionObservation {
	out := *o
	out.LastFullSyncTime, out.LastChangeTime = nil, nil
	return out
}

// failureReason is the failure an observation reports, if any.
func failureReason(o *v1alpha1.CollectionObservation) string {
	switch {
	case o == nil:
		return ""
	case o.Reason != "":
		return o.Reason
	case o.FailedCount > 0:
		return kollect.ReasonExtractionFailed
	}
	return ""
}

// syncStatus writes a target's status.collection when it changed. A change
// of lastChangeTime alone is written at most every timeOnlyReportInterval,
// so a stream of item updates does not become a stream of status writes.
func (c *Collector) syncStatus(ctx context.Context, key targetKey) error {
	// What the collector can say now, and what it said last.
	t, ok := c.targets.get(key)
	inf := c.informers.of(key)
	if !ok || !reportable(&t, inf) {
		return nil
	}
	obs, namespaces := c.observation(key, &t, inf)
	prev := t.reported
	unreachable := c.unreachableSince().Truncate(time.Second)

	// Nothing new, or only times that may wait: nothing to write.
	if prev != nil && slices.Equal(t.reportedNamespaces, namespaces) && t.reportedUnreachable.Equal(unreachable) &&
		apiequality.Semantic.DeepEqual(withoutTimes(prev), withoutTimes(obs)) {
		switch since := time.Since(t.reportedAt); {
		case !timeEqual(prev.LastFullSyncTime, obs.LastFullSyncTime):
		case timeEqual(prev.LastChangeTime, obs.LastChangeTime):
			return nil
		case since < timeOnlyReportInterval:
			c.statusQueue.AddAfter(key, timeOnlyReportInterval-since)
			return nil
		}
	}

	// Write it; the registry derives the conditions in the same write.
	if err := c.writeStatus(ctx, key, obs, namespaces, unreachable); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	c.targets.update(key, func(t *target) {
		t.reported, t.reportedNamespaces, t.reportedAt, t.reportedUnreachable = obs, namespaces, time.Now(), unreachable
	})

	// A new failure is also a Warning Event.
	if reason := failureReason(obs); reason != "" && reason != failureReason(prev) {
		c.warn(key, reason, obs.LastError)
	}
	return nil
}

// ObservationApply is obs as an apply configuration: what a collector
// applies, field for field.
func ObservationApply(obs *v1alpha1.CollectionObservation) *applyv1alpha1.CollectionObservationApplyConfiguration {
	col := applyv1alpha1.CollectionObservation().
		WithObservedGeneration(obs.ObservedGeneration).
		WithItemCount(obs.ItemCount).
		WithFailedCount(obs.FailedCount)
	if obs.OverQuotaCount > 0 {
		col.WithOverQuotaCount(obs.OverQuotaCount)
	}
	if obs.LastError != "" {
		col.WithLastError(obs.LastError)
	}
	if obs.Reason != "" {
		col.WithReason(obs.Reason)
	}
	if obs.LastFullSyncTime != nil {
		col.WithLastFullSyncTime(*obs.LastFullSyncTime)
	}
	if obs.LastChangeTime != nil {
		col.WithLastChangeTime(*obs.LastChangeTime)
	}
	return col
}

// writeStatus applies status.collection (and matchedNamespaces) through
// the status subresource; the registry derives the conditions in the same
// write. Server-side apply needs no read first and never conflicts.
func (c *Collector) writeStatus(ctx context.Context, key targetKey, obs *v1alpha1.CollectionObservation, namespaces []string, unreachable time.Time) error {
	if !c.holding() {
		return errLeaseUnconfirmed // a replica that lost its lease reports nothing stale
	}
	col := ObservationApply(obs)
	opts := metav1.ApplyOptions{FieldManager: c.fieldManager(), Force: true}
	api := c.kollect.KollectV1alpha1()
	if c.cfg.Member != nil {
		// A member's report is its entry of status.clusters, under its own
		// field manager: the members' entries merge.
		entry := applyv1alpha1.ClusterCollection().WithName(c.cfg.Cluster).WithCollection(col)
		if !unreachable.IsZero() {
			entry.WithUnreachableSince(metav1.NewTime(unreachable))
		}
		_, err := api.ClusterTargets().ApplyStatus(ctx,
			applyv1alpha1.ClusterTarget(key.Name).WithStatus(applyv1alpha1.ClusterTargetStatus().WithClusters(entry)), opts)
		return err
	}
	if key.Cluster {
		status := applyv1alpha1.ClusterTargetStatus().WithCollection(col)
		if len(namespaces) > 0 {
			status.WithMatchedNamespaces(namespaces...)
		}
		_, err := api.ClusterTargets().ApplyStatus(ctx, applyv1alpha1.ClusterTarget(key.Name).WithStatus(status), opts)
		return err
	}
	_, err := api.Targets(key.Namespace).ApplyStatus(ctx,
		applyv1alpha1.Target(key.Name, key.Namespace).WithStatus(applyv1alpha1.TargetStatus().WithCollection(col)), opts)
	return err
}

// warn emits a Warning Event about a target in the host cluster, where
// `kubectl describe` finds it.
func (c *Collector) warn(key targetKey, reason, note string) {
	v, err := c.getTarget(key)
	if err != nil || v == nil {
		return
	}
	c.events.Warn(key.Reference(v.uid, v.resourceVersion), reason, "Collect", note)
}

// shorten cuts an error to what status.collection.lastError holds.
func shorten(msg string) string {
	return strings.ToValidUTF8(plumbing.Truncate(msg, maxLastError), "")
}
