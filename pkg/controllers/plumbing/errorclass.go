package plumbing

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// ErrorClass is the error_class label of kollect_reconcile_errors_total:
// the API's answer (conflict, not_found, invalid, forbidden, timeout), a
// kind the host cluster does not serve (kind_not_found), else other. The
// alerts select classes by these names (artifacts/monitoring), so a new
// class is a new name, never a renamed one. A reconcile may count a class
// of its own beside these (the collector's extraction, metrics.Resolved's
// forbidden).
func ErrorClass(err error) string {
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
	}
	return "other"
}
