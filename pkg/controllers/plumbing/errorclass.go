package plumbing

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// errorClasses are the error_class labels of kollect_reconcile_errors_total
// ErrorClass gives, each with the errors of its class, tried in order. The
// alerts select classes by these names (artifacts/monitoring): a new class
// is a new name, never a renamed one.
var errorClasses = []struct {
	class string
	is    func(error) bool
}{
	{"conflict", apierrors.IsConflict},
	{"not_found", apierrors.IsNotFound},
	{"invalid", apierrors.IsInvalid},
	{"forbidden", func(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) }},
	{"timeout", func(err error) bool {
		return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || errors.Is(err, context.DeadlineExceeded)
	}},
	// A kind the host cluster does not serve.
	{"kind_not_found", meta.IsNoMatchError},
}

// ErrorClass is the error_class label of a failed reconcile: the API's
// answer (conflict, not_found, invalid, forbidden, timeout), a kind the
// host cluster does not serve (kind_not_found), else other (a sink that
// failed a cleanup, a selector that does not parse). A reconcile may count
// a class of its own beside these (the collector's extraction,
// metrics.Resolved's forbidden).
func ErrorClass(err error) string {
	for _, c := range errorClasses {
		if c.is(err) {
			return c.class
		}
	}
	return "other"
}
