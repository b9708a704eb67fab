package collect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/e2e/framework"
)

// TestRestartConvergence is acceptance point 3: with kollect-apiserver
// stopped, 10 Deployments are deleted and 10 modified; after it starts
// again the full walk makes the items exact, with no stale item left.
func TestRestartConvergence(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	const ns = "collect-restart"
	want := collectedDeployments(ctx, t, ns, 40)

	p := cluster.Kollect()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		name := fmt.Sprintf("app-%02d", i)
		if err := kube.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		delete(want, name)
	}
	for i := 10; i < 20; i++ {
		name := fmt.Sprintf("app-%02d", i)
		updateDeployment(ctx, t, ns, name, func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/app:2" })
		want[name] = "registry.example/app:2"
	}
	begin := time.Now()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cluster.RegisterKollect(ctx, p); err != nil {
		t.Fatal(err)
	}
	items := expectDeploymentItems(ctx, t, ns, "all", want)
	t.Logf("converged %s after the start", time.Since(begin).Round(time.Millisecond))
	// Each item is the current object: same uid, nothing left of the deleted ones.
	deps, err := kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if it, ok := items[d.Name]; !ok || it.Source.UID != d.UID {
			t.Errorf("item of %s: %+v, want uid %s", d.Name, it.Source, d.UID)
		}
	}
}

// TestLeaderFailover is acceptance point 4: two replicas on one etcd; only
// the leader writes items; killing the leader (kill -9, no release) hands
// the controllers to the other within the lease duration; items stay exact.
func TestLeaderFailover(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	const ns = "collect-failover"
	want := collectedDeployments(ctx, t, ns, 20)

	first := cluster.Kollect()
	second := startReplica(ctx, t, "kollect-2")
	replicas := []*localcluster.Process{first, second}
	leader, follower := leaderOf(ctx, t, replicas)
	t.Logf("leader %s, follower %s, lease holder %s", leader.Name(), follower.Name(), leaseHolder(ctx, t))

	// A change while both run: written by the leader only.
	updateDeployment(ctx, t, ns, "app-00", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/app:2" })
	want["app-00"] = "registry.example/app:2"
	expectDeploymentItems(ctx, t, ns, "all", want)
	if w := itemWrites(ctx, t, follower); w != 0 {
		t.Errorf("the follower %s wrote %v items", follower.Name(), w)
	}
	if w := itemWrites(ctx, t, leader); w == 0 {
		t.Errorf("the leader %s wrote no items", leader.Name())
	}

	holder := leaseHolder(ctx, t)
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	// The API must stay reachable: route it to the survivor.
	if err := cluster.RegisterKollect(ctx, follower); err != nil {
		t.Fatal(err)
	}
	eventually(ctx, t, "the follower takes over", func(ctx context.Context) (bool, string) {
		m, err := replicaMetrics(ctx, follower)
		if err != nil {
			return false, err.Error()
		}
		return framework.SampleSum(m, "kollect_controllers_leader") == 1, "not leading"
	})
	// The take-over moment is the new holder's acquireTime on the Lease (same
	// machine, same clock), not when this test's polling noticed it: the
	// polling and re-routing the APIService add seconds of their own.
	lease, err := kube.CoordinationV1().Leases("kollect-system").Get(ctx, "kollect-controllers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h == holder {
		t.Fatalf("the lease is still held by %s", holder)
	}
	if lease.Spec.AcquireTime == nil {
		t.Fatal("the new holder recorded no acquireTime")
	}
	takeover := lease.Spec.AcquireTime.Sub(killed)
	t.Logf("take-over %s after kill -9 of the leader (lease duration %s, retry period %s)", takeover.Round(time.Millisecond), leaseDuration, retryPeriod)
	// A follower sees the lease expire leaseDuration after it last saw a
	// renewal and looks every retryPeriod (with jitter); on a shared 2-core
	// machine scheduling adds a second or two. Twice the lease duration
	// still catches an election that waits for anything else (a resync, a
	// restart) while not failing on a busy machine.
	if limit := 2 * leaseDuration; takeover > limit {
		t.Errorf("take-over took %s, want at most twice the lease duration (%s)", takeover, limit)
	}

	// Changes made now are the new leader's to collect.
	if err := kube.AppsV1().Deployments(ns).Delete(ctx, "app-01", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(want, "app-01")
	updateDeployment(ctx, t, ns, "app-02", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "registry.example/app:3" })
	want["app-02"] = "registry.example/app:3"
	if _, err := kube.AppsV1().Deployments(ns).Create(ctx, deploymentObject(ns, "app-new", "registry.example/app:1", 1, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want["app-new"] = "registry.example/app:1"
	expectDeploymentItems(ctx, t, ns, "all", want)

	// Leave the suite as found: the first replica serving, and leading
	// once the second stops (after the test) and releases the lease.
	if !first.Running() {
		if err := first.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := cluster.RegisterKollect(ctx, first); err != nil {
		t.Fatal(err)
	}
}

// collectedDeployments makes a namespace with n Deployments app-00... of
// image registry.example/app:1 and a Target "all" collecting them, waits
// for their items and returns what it expects (name → image).
func collectedDeployments(ctx context.Context, t *testing.T, ns string, n int) map[string]string {
	t.Helper()
	createNamespace(ctx, t, ns, nil)
	createProfile(ctx, t, deploymentProfile(ns, "deployments"))
	createTarget(ctx, t, ns, "all", "deployments", nil)
	parallel(t, n, func(i int) error {
		_, err := kube.AppsV1().Deployments(ns).Create(ctx, deploymentObject(ns, fmt.Sprintf("app-%02d", i), "registry.example/app:1", 1, nil), metav1.CreateOptions{})
		return err
	})
	want := map[string]string{}
	for i := range n {
		want[fmt.Sprintf("app-%02d", i)] = "registry.example/app:1"
	}
	expectDeploymentItems(ctx, t, ns, "all", want)
	return want
}

// leaderOf waits until exactly one replica reports that it leads.
func leaderOf(ctx context.Context, t *testing.T, replicas []*localcluster.Process) (leader, follower *localcluster.Process) {
	t.Helper()
	eventually(ctx, t, "one leader", func(ctx context.Context) (bool, string) {
		var leaders []*localcluster.Process
		var state []string
		for _, p := range replicas {
			m, err := replicaMetrics(ctx, p)
			if err != nil {
				return false, err.Error()
			}
			v := framework.SampleSum(m, "kollect_controllers_leader")
			state = append(state, fmt.Sprintf("%s=%v", p.Name(), v))
			if v == 1 {
				leaders = append(leaders, p)
			}
		}
		if len(leaders) != 1 {
			return false, strings.Join(state, " ")
		}
		leader = leaders[0]
		for _, p := range replicas {
			if p != leader {
				follower = p
			}
		}
		return true, ""
	})
	return leader, follower
}

// itemWrites is how many items a replica created, updated or deleted.
func itemWrites(ctx context.Context, t *testing.T, p *localcluster.Process) float64 {
	t.Helper()
	m, err := replicaMetrics(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return framework.SampleSum(m, "kollect_item_writes_total", `op="create"`) +
		framework.SampleSum(m, "kollect_item_writes_total", `op="update"`) +
		framework.SampleSum(m, "kollect_item_writes_total", `op="delete"`)
}

func leaseHolder(ctx context.Context, t *testing.T) string {
	t.Helper()
	var lease *coordinationv1.Lease
	lease, err := kube.CoordinationV1().Leases("kollect-system").Get(ctx, "kollect-controllers", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}
