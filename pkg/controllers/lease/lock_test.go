package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// TestStaleReleaseKeepsTheNewHolder: a holder whose renewal hangs past the
// renew deadline (a slow host API, or SIGSTOP in the middle of the call)
// while another replica takes the Lease over gives up, and client-go's
// elector then releases the Lease on the strength of its last observation
// (release reads the Lease for its resourceVersion but asks IsLeader of
// what it observed before). That release must not clear the new holder:
// were the Lease free at once, a third campaign (or this replica's next
// one) would take it while the new holder's Term.Holding still vouches
// for its writes — two writers for one member.
func TestStaleReleaseKeepsTheNewHolder(t *testing.T) {
	const ns, name = "kollect-system", "kollect-member-x"
	client := fake.NewClientset()
	timings := Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")

	var hang, failGet atomic.Bool
	// The renewal's context expired in the hung call: the elector's
	// fallback read within the same attempt fails at once.
	client.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failGet.CompareAndSwap(true, false) {
			return true, nil, context.DeadlineExceeded
		}
		return false, nil, nil
	})
	client.PrependReactor("update", "leases", func(action k8stesting.Action) (bool, runtime.Object, error) {
		l := action.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != "a" || !hang.CompareAndSwap(true, false) {
			return false, nil, nil
		}
		// The renewal hangs; meanwhile b takes the Lease over.
		b := l.DeepCopy()
		now := metav1.NewMicroTime(time.Now())
		b.Spec.HolderIdentity, b.Spec.AcquireTime, b.Spec.RenewTime = ptr.To("b"), &now, &now
		if err := client.Tracker().Update(gvr, b, ns); err != nil {
			t.Errorf("b's takeover: %v", err)
		}
		time.Sleep(timings.RenewDeadline + timings.RetryPeriod)
		failGet.Store(true)
		return true, nil, errors.New("context deadline exceeded")
	})

	lock := NewLock(client.CoordinationV1(), ns, name, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held := make(chan struct{})
	err := Hold(ctx, lock, timings, klog.Background(), func(term context.Context, tm Term) {
		select {
		case <-held:
		default:
			close(held)
			hang.Store(true) // the next renewal hangs
		}
		<-term.Done()
	})
	if err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("a never lost the Lease")
	}
	l, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := ptr.Deref(l.Spec.HolderIdentity, ""); h != "b" {
		t.Errorf("after a gave up, the Lease's holder is %q, want b (a's stale release cleared b's hold)", h)
	}
}
