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
	// OpFenced counts object syncs refused because this replica's lease
	// (the controllers' or a member's) was not confirmed: it may have
	// another holder, whose writes these would overwrite.
	OpFenced = "fenced"
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
		Help:           "Item writes by item kind and operation; op=skip counts extractions whose content hash was unchanged, op=fenced object syncs refused while this replica's lease was unconfirmed.",
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
		Help:           "Items the collectors of this replica maintain, by item kind: the host cluster's on the leader, each member cluster's on the replica that owns it.",
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

	// RefResolutions counts how static references resolved at reconcile:
	// kind is the referencing kind (Target, ClusterTarget, Inventory,
	// ClusterInventory), ref_type the referenced one (Profile,
	// SnapshotSink, DatabaseSink, EventSink).
	RefResolutions = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "static_ref_resolution_total",
		Help:           "Resolutions of profile and sink references at reconcile by referencing kind, referenced kind and result: ok, not_found, or forbidden (the requester lost the use or list grant, or a Scope denies the reference).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "ref_type", "result"})
)

// Results of kollect_static_ref_resolution_total.
const (
	ResolutionOK        = "ok"
	ResolutionNotFound  = "not_found"
	ResolutionForbidden = "forbidden"
)

// ErrorForbidden is the error class of kollect_reconcile_errors_total for a
// reference the requester may no longer use or a Scope denies.
const ErrorForbidden = "forbidden"

// Resolved counts one resolution; a forbidden one also counts as a failed
// reconcile of class forbidden.
func Resolved(kind, refType, result string) {
	RefResolutions.WithLabelValues(kind, refType, result).Inc()
	if result == ResolutionForbidden {
		ReconcileErrors.WithLabelValues(kind, ErrorForbidden).Inc()
	}
}

var registerOnce sync.Once

// Register adds the metrics to the legacy registry; it may be called any
// number of times.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(CollectEvents, ItemWrites, Informers, Items, ReconcileErrors, Leader, FullWalkDuration, RefResolutions)
	})
}

// Export results of kollect_sink_exports_total.
const (
	ResultExported  = "exported"
	ResultDebounced = "debounced"
	ResultFailed    = "failed"
)

var (
	// SinkExports counts exporter runs by sink family, sink type and result.
	SinkExports = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "sink_exports_total",
		Help:           "Exporter runs by sink family (Snapshot, Database, Event), sink type and result (exported, debounced, failed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"family", "type", "result"})

	// ExportDuration is how long writing to a sink took.
	ExportDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Namespace:      namespace,
		Name:           "export_duration_seconds",
		Help:           "Duration of exports that wrote to a sink, by sink type.",
		Buckets:        metrics.ExponentialBuckets(0.001, 4, 10),
		StabilityLevel: metrics.ALPHA,
	}, []string{"type"})

	// ExportDebounced counts runs that found the sink up to date and the
	// re-export interval not yet elapsed.
	ExportDebounced = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "export_debounced_total",
		Help:           "Exporter runs that wrote nothing: the sink holds the current payload and its interval has not elapsed.",
		StabilityLevel: metrics.ALPHA,
	})

	// ExportBytes counts payload bytes handed to sinks: encoded documents
	// for snapshot sinks, item content for rows and events.
	ExportBytes = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "export_bytes_total",
		Help:           "Payload bytes handed to sinks, by sink type: encoded documents for snapshot sinks, item content for rows and events.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"type"})

	// StatusEntryWrites counts the exporters' writes of their status
	// entries (in process, so no request metric sees them).
	StatusEntryWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      namespace,
		Name:           "export_status_entry_writes_total",
		Help:           "Writes of exporters' status entries (status.sinkExports of Inventories and ClusterInventories), by kind and result (ok, error); an unchanged entry counts too.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind", "result"})

	// BreakerOpen is 1 while a sink's circuit breaker is open.
	BreakerOpen = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Namespace:      namespace,
		Name:           "sink_breaker_open",
		Help:           "1 while the circuit breaker of a sink is open (consecutive failures; exports wait for the backoff), else 0. name is namespace/name.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"family", "name"})
)

var registerExportOnce sync.Once

// RegisterExport adds the exporter metrics to the legacy registry, and the
// ones it shares with the collector.
func RegisterExport() {
	Register()
	registerExportOnce.Do(func() {
		legacyregistry.MustRegister(SinkExports, ExportDuration, ExportDebounced, ExportBytes, StatusEntryWrites, BreakerOpen)
	})
}
