// Package plumbing is what the collector and the exporter share of the
// machinery around their reconciles, so that each is written once:
//
//   - worker.go: the worker that drains a work queue, retrying failures
//     with the queue's backoff or, for errors that are not the key's
//     fault, after a delay of their own;
//   - errorclass.go: the error classes of kollect_reconcile_errors_total;
//   - keys.go: the key of an object of a namespaced kind or of its
//     cluster-scoped twin (Target and ClusterTarget, Inventory and
//     ClusterInventory);
//   - events.go: the Warning Events about Kollect objects, with the one
//     cut of their notes;
//   - clients.go: a controller's clients of the host cluster and of this
//     server, and its work queues;
//   - redact.go: the replacement of Secret values in text, with the one
//     placeholder every part of Kollect shows.
package plumbing
