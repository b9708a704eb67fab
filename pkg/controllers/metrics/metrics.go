// Package metrics defines the controllers' Prometheus metrics. They are
// registered in the component-base legacy registry, which the server's
// /metrics endpoint serves.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

const namespace = "kollect"

// Write operations of kollect_item_writes_total.
const (
	OpCreate = "create"
	OpUpdate = "update"
	OpDelete = "delete"
	// OpSkip counts extractions whose hash matched the stored item: no write.
	OpSkip = "skip"
)

var (
	// CollectEvents counts informer events (add, update, delete) per
	// collected resource, "group/version/resource".
	CollectEvents = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "collect_events_total",
		Help:           "Informer events received for collected objects, by group/version/resource.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"gvr"})

	// ItemWrites counts item writes by item kind (InventoryItem,
	// ClusterInventoryItem) and operation (create, update, delete, skip).
	ItemWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "item_writes_total",
		Help:           "Item writes by item kind and operation; op=skip counts extractions whose content hash was unchanged.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "op"})

	// Informers is the number of running informers for collected resources.
	Informers = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "informers",
		Help:           "Running informers for collected resources (one per group/version/resource).",
		StabilityLevel: metrics.ALPHA,
	})

	// Items is the number of items the collector holds, by item kind.
	Items = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "items",
		Help:           "Items the collector maintains, by item kind (0 on replicas that are not the leader).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})

	// ReconcileErrors counts failed reconciles by the kind reconciled and a
	// coarse error class.
	ReconcileErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "reconcile_errors_total",
		Help:           "Failed reconciles by kind and error class (conflict, not_found, invalid, forbidden, timeout, extraction, kind_not_found, other).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "error_class"})

	// Leader is 1 on the replica that runs the controllers.
	Leader = metrics.NewGauge(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "controllers_leader",
		Help:           "1 when this replica holds the controllers' lease and runs them, else 0.",
		StabilityLevel: metrics.ALPHA,
	})

	// FullWalkDuration is how long a full walk of all targets took to
	// compare the cluster with the stored items and queue the differences.
	FullWalkDuration = metrics.NewHistogram(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "collect_full_walk_duration_seconds",
		Help:           "Duration of a full walk comparing the cluster's objects with the stored items.",
		Buckets:        metrics.ExponentialBuckets(0.01, 4, 8),
		StabilityLevel: metrics.ALPHA,
	})
)

var registerOnce sync.Once

// Register adds the metrics to the legacy registry; it may be called any
// number of times.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(CollectEvents, ItemWrites, Informers, Items, ReconcileErrors, Leader, FullWalkDuration)
	})
}
