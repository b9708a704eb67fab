package fleet

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	fleetctl "kollect.dev/kollect/pkg/controllers/fleet"
	"kollect.dev/kollect/pkg/controllers/shard"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

// TestDeleteMemberOfAKilledOwner (review): a MemberCluster deleted right
// after kill -9 of its owner is finalized by the survivor: its items go,
// its Lease kollect-member-<name> goes, and the other members' items stay
// exact.
func TestDeleteMemberOfAKilledOwner(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const idA, idB = "hub-a", "hub-b"
	t.Setenv("POD_NAME", idA)
	hub, err := collectenv.Start(ctx, collectenv.Options{FastEtcd: true, Log: os.Stderr,
		KollectArgs: append([]string{"--allow-private-sink-endpoints", "--cluster-name=hub", "-v=2"}, leaseTimings...)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop(t.Failed()) }()
	waitReplicas(ctx, t, hub, nil)
	optsB := hub.Replica
	optsB.Name = "kollect-apiserver-b"
	t.Setenv("POD_NAME", idB)
	replicaB, err := hub.Cluster.StartKollect(ctx, optsB)
	if err != nil {
		t.Fatal(err)
	}
	newReplica(ctx, t, hub, []string{idA})
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := hub.Kube.CoreV1().ConfigMaps("shop").Create(ctx, configMap(fmt.Sprintf("cm-%d", i), "v1"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var members []string
	count := map[string]int{}
	for i := 0; len(members) < 4; i++ {
		name := fmt.Sprintf("m%d", i)
		if o := shard.Owner([]string{idA, idB}, name); count[o] < 2 {
			count[o]++
			members = append(members, name)
		}
	}
	register(ctx, t, hub, hub.Cluster, members)
	api := hub.Client.KollectV1alpha1()
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "v", Path: "{.data.v}", Selectable: true, Optional: true}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"},
			IncludeNamespaces: []string{"shop"},
			ClusterSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := &sharded{hub: hub, member: kubernetes.NewForConfigOrDie(hub.Cluster.RESTConfig()), members: members}
	s.waitOwners(ctx, t, "split", []string{idA, idB})
	s.waitExact(ctx, t, "first sync")

	var doomed string
	for _, m := range members {
		if shard.Owner([]string{idA, idB}, m) == idB {
			doomed = m
			break
		}
	}
	if err := replicaB.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := api.MemberClusters().Delete(ctx, doomed, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitGone(ctx, t, hub, doomed)
	rest := []string{}
	for _, m := range members {
		if m != doomed {
			rest = append(rest, m)
		}
	}
	s.members = rest
	s.waitOwners(ctx, t, "A took B's members", []string{idA})
	s.change(ctx, t, "after-kill")
	s.waitExact(ctx, t, "after kill -9 of B and the deletion")
	left, err := api.ClusterInventoryItems().List(ctx, metav1.ListOptions{FieldSelector: "source.cluster=" + doomed})
	if err != nil || len(left.Items) != 0 {
		t.Errorf("the deleted member %s's items: %v %v", doomed, len(left.Items), err)
	}
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := hub.Kube.CoordinationV1().Leases(localcluster.KollectNamespace).Get(ctx, fleetctl.MemberLeasePrefix+doomed, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		l, _ := hub.Kube.CoordinationV1().Leases(localcluster.KollectNamespace).Get(ctx, fleetctl.MemberLeasePrefix+doomed, metav1.GetOptions{})
		t.Errorf("the deleted member's Lease is still there: %+v", l.Spec)
	}
	ct, _ := api.ClusterTargets().Get(ctx, "configmaps", metav1.GetOptions{})
	for _, e := range ct.Status.Clusters {
		if e.Name == doomed {
			t.Errorf("the deleted member's entry is still in status.clusters: %+v", e)
		}
	}
}
