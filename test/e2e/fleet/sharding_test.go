package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	fleetctl "kollect.dev/kollect/pkg/controllers/fleet"
	"kollect.dev/kollect/pkg/controllers/shard"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

// leaseTimings make takeovers quick: a dead replica's members move within
// the lease duration (6s) and a retry period.
var leaseTimings = []string{"--leader-election-lease-duration=6s", "--leader-election-renew-deadline=4s", "--leader-election-retry-period=1s"}

// TestShardedReplicas is acceptance point 4 of issue 14: two hub replicas
// split the members (status names the owner); kill -9 of one moves its
// members to the other with the items exact; a replica that joins takes
// only its share, and the members that stay are not collected again; a
// paused owner that resumes after its members moved writes no item.
//
// Four MemberClusters share one member kube-apiserver: each collects it as
// a cluster of its own (items by source.cluster), which is what the
// sharding sees, at the cost of one member instead of four.
func TestShardedReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	log := os.Stderr
	// Known identities (a replica reads $POD_NAME at its start, as in a
	// StatefulSet, and keeps it across restarts), so that the members can
	// be named to split evenly.
	const idA, idB = "hub-a", "hub-b"
	t.Setenv("POD_NAME", idA)
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: log,
		KollectArgs: append([]string{"--allow-private-sink-endpoints", "--cluster-name=hub", "-v=2"}, leaseTimings...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("logs of every process are in %s/logs", hub.Dir)
		}
		_ = hub.Stop(t.Failed())
	}()
	replicaA := hub.Kollect
	waitReplicas(ctx, t, hub, nil)
	optsB := hub.Replica
	optsB.Name = "kollect-apiserver-b"
	t.Setenv("POD_NAME", idB)
	replicaB, err := hub.Cluster.StartKollect(ctx, optsB)
	if err != nil {
		t.Fatal(err)
	}
	if id := newReplica(ctx, t, hub, []string{idA}); id != idB {
		t.Fatalf("the second replica is %q, want %q", id, idB)
	}

	member, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(hub.Dir, "member"), NoControllerManager: true, FastEtcd: true, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = member.Stop() }()
	memberKube := kubernetes.NewForConfigOrDie(member.RESTConfig())
	if _, err := memberKube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if _, err := memberKube.CoreV1().ConfigMaps("shop").Create(ctx, configMap(fmt.Sprintf("cm-%d", i), "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// Two members for each replica, by the ring's own function.
	var members []string
	count := map[string]int{}
	for i := 0; len(members) < 4; i++ {
		name := fmt.Sprintf("m%d", i)
		if o := shard.Owner([]string{idA, idB}, name); count[o] < 2 {
			count[o]++
			members = append(members, name)
		}
	}
	register(ctx, t, hub, member, members)
	api := hub.Client.KollectV1alpha1()
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "v", Path: "{.data.v}", Selectable: true}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"},
			ClusterSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &sharded{hub: hub, member: memberKube, members: members}
	s.waitOwners(ctx, t, "the replicas split the members", []string{idA, idB})
	s.waitExact(ctx, t, "first sync")
	for p, want := range map[*localcluster.Process]float64{replicaA: 2, replicaB: 2} {
		if got := scrape(ctx, t, hub, p)["kollect_fleet_members_owned"]; got != want {
			t.Errorf("%s: kollect_fleet_members_owned %v, want %v", p.Name(), got, want)
		}
	}

	// kill -9 B: its members move to A; changes made after converge.
	killed := time.Now()
	if err := replicaB.Kill(); err != nil {
		t.Fatal(err)
	}
	// Meanwhile A counts in kollect_fleet_members_owned only the members
	// whose Lease it holds, never those it waits for: B's Leases stay
	// B's for a lease duration after A's ring has dropped B.
	samples := 0
	for owned := 0.0; owned < 4; samples++ {
		if ctx.Err() != nil {
			t.Fatalf("A's kollect_fleet_members_owned is %v, never 4", owned)
		}
		owned = scrape(ctx, t, hub, replicaA)["kollect_fleet_members_owned"]
		held := 0.0
		for _, l := range s.memberLeases(ctx, t) {
			if ptr.Deref(l.Spec.HolderIdentity, "") == idA {
				held++
			}
		}
		if owned > held {
			t.Fatalf("A's kollect_fleet_members_owned is %v while A holds %v member Leases", owned, held)
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.waitOwners(ctx, t, "A took B's members", []string{idA})
	t.Logf("B's members owned by A %.1fs after kill -9; kollect_fleet_members_owned never above the Leases A held (%d samples)", time.Since(killed).Seconds(), samples)
	s.change(ctx, t, "after-kill")
	s.waitExact(ctx, t, "after kill -9 of B")

	// B joins again: it takes its share back, the members that stay with
	// A keep their Lease term, so they are not collected again.
	before := s.memberLeases(ctx, t)
	if err := replicaB.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if id := newReplica(ctx, t, hub, []string{idA}); id != idB {
		t.Fatalf("the returning replica is %q, want %q", id, idB)
	}
	s.waitOwners(ctx, t, "B took its share again", []string{idA, idB})
	after := s.memberLeases(ctx, t)
	stayed := 0
	for _, m := range members {
		if shard.Owner([]string{idA, idB}, m) != idA {
			continue
		}
		stayed++
		if !before[m].Spec.AcquireTime.Equal(after[m].Spec.AcquireTime) || *after[m].Spec.HolderIdentity != idA {
			t.Errorf("member %s stayed with A but its Lease changed hands: %v then %v", m, before[m].Spec, after[m].Spec)
		}
	}
	if stayed == 0 {
		t.Fatal("no member stayed with A: the members were not named as meant")
	}
	t.Logf("%d of %d members stayed with A through B's return, their Leases untouched", stayed, len(members))
	s.waitExact(ctx, t, "after B's return")
	// Changes B collects for its members: B is a writer before its pause.
	s.change(ctx, t, "after-return")
	s.waitExact(ctx, t, "after the changes B collects")

	// SIGSTOP B: A takes its members and the changes made meanwhile; B,
	// resumed, writes no item (the fence), whatever its informers deliver.
	writesBefore := itemWrites(scrape(ctx, t, hub, replicaB))
	if writesBefore == 0 {
		t.Fatal("B wrote no item before its pause: the pause would show nothing")
	}
	if err := syscall.Kill(replicaB.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = syscall.Kill(replicaB.Pid(), syscall.SIGCONT)
		}
	}()
	paused := time.Now()
	s.waitOwners(ctx, t, "A took the paused B's members", []string{idA})
	t.Logf("the paused B's members owned by A %.1fs after SIGSTOP", time.Since(paused).Seconds())
	s.change(ctx, t, "while-paused")
	s.waitExact(ctx, t, "while B is paused")
	if err := syscall.Kill(replicaB.Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	// Resumed, B is live again and takes its share back, from items A
	// made exact: there is nothing for it to write.
	s.waitOwners(ctx, t, "the resumed B took its share back", []string{idA, idB})
	s.waitExact(ctx, t, "after B resumed")
	metricsB := scrape(ctx, t, hub, replicaB)
	if got := itemWrites(metricsB); got != writesBefore {
		t.Errorf("the resumed B wrote items: creates, updates and deletes %v before SIGSTOP, %v after SIGCONT", writesBefore, got)
	}
	t.Logf("the resumed B: item writes %v before and after the pause; object syncs fenced: %v", writesBefore, fenced(metricsB))
}

// sharded is the state TestShardedReplicas checks.
type sharded struct {
	hub     *collectenv.Env
	member  kubernetes.Interface
	members []string
}

// register puts the member's kubeconfig in a Secret and a MemberCluster
// env=prod for each name.
func register(ctx context.Context, t *testing.T, hub *collectenv.Env, member *localcluster.Cluster, names []string) {
	t.Helper()
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "member-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, member.RESTConfig())}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if _, err := hub.Client.KollectV1alpha1().MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "prod"}},
			Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: "member-kubeconfig"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func configMap(name, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"v": v}}
}

// change makes a create, an update and a delete in the member.
func (s *sharded) change(ctx context.Context, t *testing.T, tag string) {
	t.Helper()
	cms := s.member.CoreV1().ConfigMaps("shop")
	if _, err := cms.Create(ctx, configMap("cm-"+tag, tag), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := cms.List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) < 3 {
		t.Fatalf("listing the member's ConfigMaps: %v (%d)", err, len(list.Items))
	}
	upd := list.Items[0]
	upd.Data = map[string]string{"v": tag}
	if _, err := cms.Update(ctx, &upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, list.Items[1].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// want is what each member's items must be: every ConfigMap of the
// member's namespace shop (kube-system is not collected), namespace/name →
// its data.v.
func (s *sharded) want(ctx context.Context) (map[string]string, error) {
	list, err := s.member.CoreV1().ConfigMaps("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		out[cm.Namespace+"/"+cm.Name] = cm.Data["v"]
	}
	return out, nil
}

// waitExact waits until every member's items are exactly the member's
// ConfigMaps, each with its current value.
func (s *sharded) waitExact(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	var diff string
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		want, err := s.want(ctx)
		if err != nil {
			t.Logf("listing the member's ConfigMaps: %v", err)
			return false, nil
		}
		for _, m := range s.members {
			list, err := s.hub.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{FieldSelector: "source.cluster=" + m})
			if err != nil {
				t.Logf("listing the items of %s: %v", m, err)
				return false, nil
			}
			got := map[string]string{}
			for _, it := range list.Items {
				v := ""
				if a, ok := it.Attributes["v"]; ok {
					_ = json.Unmarshal(a.Raw, &v)
				}
				got[it.Source.Namespace+"/"+it.Source.Name] = v
			}
			if !maps.Equal(got, want) {
				diff = fmt.Sprintf("member %s: %d items %v, want %d %v", m, len(got), got, len(want), want)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: items never exact: %s", what, diff)
	}
}

// waitOwners waits until each member's status names the owner the ring
// gives it among replicas.
func (s *sharded) waitOwners(ctx context.Context, t *testing.T, what string, replicas []string) {
	t.Helper()
	var got map[string]string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got = map[string]string{}
		ok := true
		for _, m := range s.members {
			mc, err := s.hub.Client.KollectV1alpha1().MemberClusters().Get(ctx, m, metav1.GetOptions{})
			if err != nil || mc.Status.Collection == nil {
				return false, nil
			}
			got[m] = mc.Status.Collection.Owner
			ok = ok && got[m] == shard.Owner(replicas, m) && mc.Status.Collection.Reachable
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: owners %v, want each by the ring over %v", what, got, replicas)
	}
}

// memberLeases are the members' Leases in the hub, by member.
func (s *sharded) memberLeases(ctx context.Context, t *testing.T) map[string]*coordinationv1.Lease {
	t.Helper()
	out := map[string]*coordinationv1.Lease{}
	for _, m := range s.members {
		l, err := s.hub.Kube.CoordinationV1().Leases(localcluster.KollectNamespace).Get(ctx, fleetctl.MemberLeasePrefix+m, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out[m] = l
	}
	return out
}

// waitReplicas waits for a live replica Lease besides known, and returns
// the live identities.
func waitReplicas(ctx context.Context, t *testing.T, hub *collectenv.Env, known []string) []string {
	t.Helper()
	var ids []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := hub.Kube.CoordinationV1().Leases(localcluster.KollectNamespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LabelRole + "=" + shard.RoleReplica})
		if err != nil {
			return false, nil
		}
		ids = ids[:0]
		for _, l := range list.Items {
			if l.Spec.HolderIdentity != nil && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < 3*time.Second {
				ids = append(ids, *l.Spec.HolderIdentity)
			}
		}
		return len(ids) == len(known)+1, nil
	})
	if err != nil {
		t.Fatalf("live replicas %v, want %d", ids, len(known)+1)
	}
	return ids
}

// newReplica is the identity of the replica that joined the known ones.
func newReplica(ctx context.Context, t *testing.T, hub *collectenv.Env, known []string) string {
	t.Helper()
	for _, id := range waitReplicas(ctx, t, hub, known) {
		if !slices.Contains(known, id) {
			return id
		}
	}
	t.Fatalf("no new replica besides %v", known)
	return ""
}

// scrape reads a replica's /metrics: series (name{labels}) → value.
func scrape(ctx context.Context, t *testing.T, hub *collectenv.Env, p *localcluster.Process) map[string]float64 {
	t.Helper()
	cs := kubernetes.NewForConfigOrDie(hub.Cluster.KollectRESTConfig(p))
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", p.Name(), err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// itemWrites sums kollect_item_writes_total over the ops that write.
func itemWrites(m map[string]float64) float64 {
	return sumOps(m, `op="create"`, `op="update"`, `op="delete"`)
}

func fenced(m map[string]float64) float64 { return sumOps(m, `op="fenced"`) }

func sumOps(m map[string]float64, ops ...string) float64 {
	var sum float64
	for series, v := range m {
		if !strings.HasPrefix(series, "kollect_item_writes_total{") {
			continue
		}
		for _, op := range ops {
			if strings.Contains(series, op) {
				sum += v
			}
		}
	}
	return sum
}
