package plumbing

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/controllers/metrics"
)

// Worker reconciles the keys of one work queue until the queue shuts
// down. A key whose Sync fails is counted in kollect_reconcile_errors_total
// and retried with the queue's rate limiter (exponential per key), unless
// the error is one of Waits.
type Worker[K comparable] struct {
	Queue workqueue.TypedRateLimitingInterface[K]
	// Sync reconciles one key; an error retries it.
	Sync func(ctx context.Context, key K) error
	// Kind is the kind label of a key's failures (InventoryKey.Kind, or
	// the queue's name).
	Kind func(key K) string
	// Waits are errors that are not the key's failure: the key is retried
	// after a delay of their own without spending the queue's backoff,
	// which would otherwise hold it back for minutes after the cause went.
	Waits []Wait
	// LogLevel is the verbosity of the line that logs a retried failure.
	LogLevel int
}

// Wait is an error (matched with errors.Is) whose key is retried after Delay.
type Wait struct {
	Err   error
	Delay time.Duration
	// Jitter adds up to Delay×Jitter, so that keys refused together do
	// not come back together.
	Jitter float64
	// Counted counts the error in kollect_reconcile_errors_total.
	Counted bool
}

// Run reconciles keys until the queue shuts down. Several goroutines may
// run the same Worker: the queue hands a key to one at a time.
func (w *Worker[K]) Run(ctx context.Context) {
	for w.next(ctx) {
	}
}

// next reconciles one key; false once the queue shut down.
func (w *Worker[K]) next(ctx context.Context) bool {
	key, shutdown := w.Queue.Get()
	if shutdown {
		return false
	}
	defer w.Queue.Done(key)
	err := w.Sync(ctx, key)
	switch {
	case err == nil:
		w.Queue.Forget(key)
	case ctx.Err() != nil:
		// Stopping: the queue shuts down, and the next leader starts over.
	default:
		w.retry(ctx, key, err)
	}
	return true
}

// retry queues a failed key again: after its Wait's delay, or with backoff.
func (w *Worker[K]) retry(ctx context.Context, key K, err error) {
	for _, wt := range w.Waits {
		if !errors.Is(err, wt.Err) {
			continue
		}
		if wt.Counted {
			metrics.ReconcileErrors.WithLabelValues(w.Kind(key), ErrorClass(err)).Inc()
		}
		delay := wt.Delay
		if wt.Jitter > 0 {
			delay = wait.Jitter(delay, wt.Jitter)
		}
		w.Queue.Forget(key)
		w.Queue.AddAfter(key, delay)
		return
	}
	kind := w.Kind(key)
	metrics.ReconcileErrors.WithLabelValues(kind, ErrorClass(err)).Inc()
	klog.FromContext(ctx).V(w.LogLevel).Info("Reconcile failed; retrying", "kind", kind, "key", fmt.Sprint(key), "err", err)
	w.Queue.AddRateLimited(key)
}
