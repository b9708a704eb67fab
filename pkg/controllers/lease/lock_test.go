package lease

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/pkg/localcluster/clustertest"
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
//
// The Lease lives in a real kube-apiserver; only the hang is injected,
// between this replica and the server.
func TestStaleReleaseKeepsTheNewHolder(t *testing.T) {
	const ns, name = "kollect-system", "kollect-member-x"
	client := kubernetes.NewForConfigOrDie(host.Get(t).RESTConfig())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	timings := Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}

	var hang, failGet atomic.Bool
	faults := &faultyLeases{LeasesGetter: client.CoordinationV1()}
	// The renewal's context expired in the hung call: the elector's
	// fallback read within the same attempt fails at once.
	faults.get = func() error {
		if failGet.CompareAndSwap(true, false) {
			return context.DeadlineExceeded
		}
		return nil
	}
	faults.update = func(l *coordinationv1.Lease) error {
		if ptr.Deref(l.Spec.HolderIdentity, "") != "a" || !hang.CompareAndSwap(true, false) {
			return nil
		}
		// a's renewal hangs and never reaches the server; meanwhile b,
		// another replica with its own client, takes the Lease over.
		b, err := client.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("b reads the Lease: %v", err)
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		b.Spec.HolderIdentity, b.Spec.AcquireTime, b.Spec.RenewTime = ptr.To("b"), &now, &now
		if _, err := client.CoordinationV1().Leases(ns).Update(ctx, b, metav1.UpdateOptions{}); err != nil {
			t.Errorf("b's takeover: %v", err)
		}
		time.Sleep(timings.RenewDeadline + timings.RetryPeriod)
		failGet.Store(true)
		return context.DeadlineExceeded
	}

	lock := NewLock(faults, ns, name, "a")
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

// faultyLeases stands between one replica and the kube-apiserver: get and
// update, when set, run before the real call and fail it with their error.
type faultyLeases struct {
	coordinationv1client.LeasesGetter
	get    func() error
	update func(*coordinationv1.Lease) error
}

func (f *faultyLeases) Leases(namespace string) coordinationv1client.LeaseInterface {
	return &faultyLease{LeaseInterface: f.LeasesGetter.Leases(namespace), f: f}
}

type faultyLease struct {
	coordinationv1client.LeaseInterface
	f *faultyLeases
}

func (l *faultyLease) Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error) {
	if err := l.f.get(); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Get(ctx, name, opts)
}

func (l *faultyLease) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if err := l.f.update(lease); err != nil {
		return nil, err
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// The host cluster: etcd and kube-apiserver.
var host = clustertest.Shared{Options: localcluster.Options{FastEtcd: true, NoControllerManager: true}}

func TestMain(m *testing.M) {
	code := m.Run()
	host.Stop()
	os.Exit(code)
}
