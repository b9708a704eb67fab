package plumbing

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
)

var errBusy, errLease = errors.New("busy"), errors.New("lease unconfirmed")

// A failure spends the key's backoff; an error of Waits comes back after
// its own delay with the backoff untouched; a success forgets the key.
func TestWorkerRetries(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.NewTypedItemExponentialFailureRateLimiter[InventoryKey](time.Millisecond, time.Millisecond))
	defer q.ShutDown()
	outcomes := map[string][]error{
		"fails": {errors.New("boom"), nil},
		"busy":  {fmt.Errorf("checking: %w", errBusy), nil},
		"lease": {errLease, nil},
	}
	synced := make(chan InventoryKey, 10)
	requeues := map[string]int{}
	w := &Worker[InventoryKey]{
		Queue: q,
		Sync: func(_ context.Context, k InventoryKey) error {
			// What the key spent of its backoff when it came back.
			requeues[k.Name] = max(requeues[k.Name], q.NumRequeues(k))
			err := outcomes[k.Name][0]
			outcomes[k.Name] = outcomes[k.Name][1:]
			synced <- k
			return err
		},
		Kind: InventoryKey.Kind,
		Waits: []Wait{
			{Err: errBusy, Delay: time.Millisecond, Jitter: 1, Counted: true},
			{Err: errLease, Delay: time.Millisecond},
		},
	}
	for name := range outcomes {
		q.Add(InventoryKey{Namespace: "ns", Name: name})
	}
	done := make(chan struct{})
	go func() { w.Run(t.Context()); close(done) }()
	for range 6 {
		select {
		case <-synced:
		case <-time.After(10 * time.Second):
			t.Fatal("a key did not come back")
		}
	}
	q.ShutDown()
	<-done
	if requeues["fails"] != 1 || requeues["busy"] != 0 || requeues["lease"] != 0 {
		t.Errorf("requeues %v; want a failure to spend the backoff once, the waits none", requeues)
	}
	for name := range outcomes {
		if n := q.NumRequeues(InventoryKey{Namespace: "ns", Name: name}); n != 0 {
			t.Errorf("%s: %d requeues after success; want it forgotten", name, n)
		}
	}
}

func TestErrorClass(t *testing.T) {
	gr := schema.GroupResource{Group: "kollect.dev", Resource: "inventories"}
	for want, err := range map[string]error{
		"conflict":       apierrors.NewConflict(gr, "a", errors.New("x")),
		"not_found":      apierrors.NewNotFound(gr, "a"),
		"invalid":        apierrors.NewInvalid(schema.GroupKind{Kind: "Inventory"}, "a", nil),
		"forbidden":      apierrors.NewUnauthorized("no"),
		"timeout":        fmt.Errorf("write: %w", context.DeadlineExceeded),
		"kind_not_found": &meta.NoKindMatchError{GroupKind: schema.GroupKind{Kind: "Widget"}},
		"other":          errors.New("sink refused"),
	} {
		if got := ErrorClass(err); got != want {
			t.Errorf("ErrorClass(%v) = %q, want %q", err, got, want)
		}
	}
}

func TestObjectKey(t *testing.T) {
	for k, want := range map[fmt.Stringer]string{
		TargetKey{Namespace: "ns", Name: "web"}:  "Target ns/web",
		TargetKey{Cluster: true, Name: "nodes"}:  "ClusterTarget nodes",
		InventoryKey{Namespace: "ns", Name: "a"}: "Inventory ns/a",
		InventoryKey{Cluster: true, Name: "all"}: "ClusterInventory all",
	} {
		if got := k.String(); got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	k := InventoryKey{Cluster: true, Namespace: "stray", Name: "all"}
	if k.ItemKind() != "ClusterInventoryItem" || k.ItemNamespace() != "" {
		t.Errorf("items of %s: %s in %q; want ClusterInventoryItem in \"\"", k, k.ItemKind(), k.ItemNamespace())
	}
	if ref := k.Reference("u", "7"); ref.Kind != "ClusterInventory" || ref.APIVersion != "kollect.dev/v1alpha1" || ref.ResourceVersion != "7" {
		t.Errorf("Reference = %+v", ref)
	}
}

func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"aé", 2, "a"}, // é is two bytes: not cut in half
		{"€€", 4, "€"},
		{"abc", 0, ""},
	} {
		if got := Truncate(tc.s, tc.n); got != tc.want {
			t.Errorf("Truncate(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
