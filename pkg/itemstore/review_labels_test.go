package itemstore_test

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestReviewLabelMemoAdmitsInvalidLabels: the store remembers label sets
// it found valid by labels.Set.String(), which is not one-to-one: the
// invalid set {"app": "web,tier=db"} prints as the valid set
// {"app": "web", "tier": "db"} ("app=web,tier=db"), so once the valid one
// was written the invalid one skips validation and is stored. The registry
// (and this store, for a fresh process) refuse it as Invalid.
func TestReviewLabelMemoAdmitsInvalidLabels(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := srv.API.Items

	bad := item("ns", "bad", "2", "v")
	bad.Labels = map[string]string{"app": "web,tier=db"}
	// Fresh: refused, as the registry refuses it.
	if _, err := store.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Fatalf("invalid labels on a fresh store: %v, want Invalid", err)
	}

	good := item("ns", "good", "1", "v")
	good.Labels = map[string]string{"app": "web", "tier": "db"}
	if _, err := store.Create(ctx, good); err != nil {
		t.Fatal(err)
	}
	_, err := store.Create(ctx, bad)
	if !apierrors.IsInvalid(err) {
		got, gerr := srv.Client.KollectV1alpha1().InventoryItems("ns").Get(ctx, "bad", metav1.GetOptions{})
		t.Fatalf("the same invalid labels after a valid set that prints alike: err %v, want Invalid; stored labels %v (%v)", err, got.GetLabels(), gerr)
	}
}
