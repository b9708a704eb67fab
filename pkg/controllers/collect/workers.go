package collect

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/expression"
)

// checkerRetry is how soon, at least, a target whose Profile could not be
// checked (expression.ErrCheckerUnavailable) is configured again: within
// twice that.
const checkerRetry = 5 * time.Second

// processQueue runs a worker until its queue shuts down: errors are retried
// with the queue's rate limiter.
func processQueue[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], kind string, sync func(context.Context, T) error) {
	logger := klog.FromContext(ctx)
	for {
		key, quit := q.Get()
		if quit {
			return
		}
		func() {
			defer q.Done(key)
			err := sync(ctx, key)
			if err == nil {
				q.Forget(key)
				return
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, expression.ErrCheckerUnavailable) {
				// The server's, not the key's: the queue's backoff
				// would leave the target uncollected for minutes after
				// the checker is free again. Jittered, so that targets
				// refused together do not come back together.
				metrics.ReconcileErrors.WithLabelValues(kind, errorClass(err)).Inc()
				q.Forget(key)
				q.AddAfter(key, wait.Jitter(checkerRetry, 1))
				return
			}
			if errors.Is(err, errLeaseUnconfirmed) {
				// Not a failure of this key: it waits for the lease
				// without spending the queue's backoff.
				q.Forget(key)
				q.AddAfter(key, time.Second)
				return
			}
			metrics.ReconcileErrors.WithLabelValues(kind, errorClass(err)).Inc()
			logger.V(2).Info("Reconcile failed; retrying", "kind", kind, "key", fmt.Sprint(key), "err", err)
			q.AddRateLimited(key)
		}()
	}
}

// errorClass is a coarse label for kollect_reconcile_errors_total.
func errorClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return "conflict"
	case apierrors.IsNotFound(err):
		return "not_found"
	case apierrors.IsInvalid(err):
		return "invalid"
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return "forbidden"
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case meta.IsNoMatchError(err):
		return "kind_not_found"
	default:
		return "other"
	}
}
