// Package finalizers adds and removes a controller's finalizer on a Kollect
// object, the one metadata write the controllers make on the main resource.
package finalizers

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// Client is the part of a typed client Set needs.
type Client[T metav1.Object] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error)
}

// Set makes finalizer present on, or absent from, the object name with a
// fresh read, so that it neither depends on a cache nor overwrites a
// concurrent edit; conflicts are retried. An object that is gone needs
// nothing.
func Set[T metav1.Object](ctx context.Context, c Client[T], name, finalizer, fieldManager string, present bool) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		o, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil || !edit(o, finalizer, present) {
			return err
		}
		_, err = c.Update(ctx, o, metav1.UpdateOptions{FieldManager: fieldManager})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// edit changes the finalizers and tells whether anything changed.
func edit(o metav1.Object, finalizer string, present bool) bool {
	list := o.GetFinalizers()
	has := slices.Contains(list, finalizer)
	switch {
	case present && !has:
		o.SetFinalizers(append(list, finalizer))
	case !present && has:
		o.SetFinalizers(slices.DeleteFunc(slices.Clone(list), func(f string) bool { return f == finalizer }))
	default:
		return false
	}
	return true
}
