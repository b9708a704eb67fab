package shard

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/controllers/lease"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/pkg/localcluster/clustertest"
)

// The host cluster: etcd and kube-apiserver.
var host = clustertest.Shared{Options: localcluster.Options{FastEtcd: true, NoControllerManager: true}}

func TestMain(m *testing.M) {
	code := m.Run()
	host.Stop()
	os.Exit(code)
}

// TestRingFollowsTheReplicas: against a real kube-apiserver, a replica
// that starts joins every ring, one that stops leaves at once (it deletes
// its Lease), one that dies (its Lease left behind) leaves after its lease
// duration and its Lease is deleted after ten; a callback whose controller
// has stopped (remove called) is never called again.
func TestRingFollowsTheReplicas(t *testing.T) {
	const ns = "kollect-system"
	client := kubernetes.NewForConfigOrDie(host.Get(t).RESTConfig())
	ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), klog.Background()), 90*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	leases := client.CoordinationV1().Leases(ns)
	timings := lease.Timings{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 200 * time.Millisecond}

	a := New(leases, "a", timings)
	var calls, stale atomic.Int32
	defer a.OnChange(func() { calls.Add(1) })()
	// A controller that restarted: its first self's callback is removed.
	a.OnChange(func() { stale.Add(1) })()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { a.Run(ctx) })
	waitLive(ctx, t, a, "a")

	bctx, stopB := context.WithCancel(ctx)
	bDone := make(chan struct{})
	go func() { defer close(bDone); New(leases, "b", timings).Run(bctx) }()
	waitLive(ctx, t, a, "a", "b")
	if calls.Load() == 0 {
		t.Error("a's live set changed and its callback was not called")
	}
	stopB()
	<-bDone
	stopped := time.Now()
	waitLive(ctx, t, a, "a")
	t.Logf("b stopped: gone from a's ring in %v (retry period %v)", time.Since(stopped).Round(time.Millisecond), timings.RetryPeriod)

	// c died: its Lease, renewed once with a lease duration of one second,
	// stays behind.
	now := metav1.NewMicroTime(time.Now())
	c := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName("c"), Labels: map[string]string{LabelRole: RoleReplica}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("c"), LeaseDurationSeconds: ptr.To[int32](1), AcquireTime: &now, RenewTime: &now}}
	if _, err := leases.Create(ctx, c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLive(ctx, t, a, "a")
	for {
		_, err := leases.Get(ctx, c.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the Lease of c, dead since %v, was never deleted", now.Time)
		}
		time.Sleep(timings.RetryPeriod)
	}
	t.Logf("c's Lease deleted %v after its last renewal (lease duration 1s, deleted after %d)", time.Since(now.Time).Round(time.Millisecond), staleAfter)
	if n := stale.Load(); n != 0 {
		t.Errorf("a removed callback was called %d times", n)
	}
	if !a.Owns("member-1") || Owner([]string{"a"}, "member-1") != "a" {
		t.Error("a, alone, does not own member-1")
	}
}

// waitLive waits until r's live set is want.
func waitLive(ctx context.Context, t *testing.T, r *Ring, want ...string) {
	t.Helper()
	for !slices.Equal(r.Replicas(), want) {
		if ctx.Err() != nil {
			t.Fatalf("live replicas %v, want %v", r.Replicas(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
