package itemstore_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestReviewIdenticalUpdateIsNoOp: the registry's update (etcd3
// GuaranteedUpdate, k8s.io/apiserver/pkg/storage/etcd3/store.go) writes
// nothing when the object encodes to the bytes already stored: the
// resourceVersion stays and no watcher gets an event. The collector falls
// back to Update with the content already stored whenever its index is
// behind storage (Create answered AlreadyExists after a full walk rebuilt
// the index from a list older than a write in flight, or a repair after
// another writer stored the same content); through the registry those
// were no-ops. Store.Update always puts, so the item gets a new
// resourceVersion and every watcher (kubectl get -w, the exporter, the
// event sinks, whose event id names the resourceVersion) a MODIFIED event
// for nothing.
func TestReviewIdenticalUpdateIsNoOp(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := srv.API.Items

	created, err := store.Create(ctx, item("ns", "a", "1", "v"))
	if err != nil {
		t.Fatal(err)
	}
	before, err := srv.Client.KollectV1alpha1().InventoryItems("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	updated, err := store.Update(ctx, item("ns", "a", "1", "v"))
	if err != nil {
		t.Fatal(err)
	}
	after, err := srv.Client.KollectV1alpha1().InventoryItems("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated != created || after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("an update to the very content stored moved the item's resourceVersion %s -> %s (store returned %d, created at %d); the registry's update writes nothing then",
			before.ResourceVersion, after.ResourceVersion, updated, created)
	}
}
