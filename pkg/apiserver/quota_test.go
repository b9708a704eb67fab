package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	v1alpha1client "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/tenancy"
)

func quotaTarget(name string) *v1alpha1.Target {
	return &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "deployments"}}}
}

func quotaEventSink(name string) *v1alpha1.EventSink {
	return &v1alpha1.EventSink{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: "nats://nats.example.com:4222",
			NATS: &v1alpha1.NATSSinkConfig{Stream: "kollect", Subject: "kollect.{namespace}.{inventory}"}}}
}

// expectOverQuota wants the 403 of an exceeded quota, naming what sets it
// and the count, and nothing stored under name.
func expectOverQuota(ctx context.Context, t *testing.T, err error, get func(context.Context) error, want ...string) {
	t.Helper()
	expectForbidden(t, err, append([]string{"exceeded quota: "}, want...)...)
	if err := get(ctx); !apierrors.IsNotFound(err) {
		t.Errorf("after the refused create: %v, want not found", err)
	}
}

// TestQuotaAdmission: a namespace's Scope caps its Targets, Inventories and
// sinks (the three kinds together); the lowest of several Scopes applies;
// creating one more is 403 naming the Scope, the field, the count and the
// limit, and stores nothing; updates are not counted; other namespaces are
// not limited; deleting frees the place.
func TestQuotaAdmission(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	for _, s := range []*v1alpha1.Scope{
		{ObjectMeta: metav1.ObjectMeta{Name: "quota"}, Spec: v1alpha1.ScopeSpec{
			MaxTargets: ptr(int32(2)), MaxInventories: ptr(int32(5)), MaxSinks: ptr(int32(3))}},
		{ObjectMeta: metav1.ObjectMeta{Name: "stricter"}, Spec: v1alpha1.ScopeSpec{MaxInventories: ptr(int32(1))}},
	} {
		if _, err := api.Scopes("q-a").Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	targets := api.Targets("q-a")
	for i := range 2 {
		if _, err := targets.Create(ctx, quotaTarget(fmt.Sprintf("t%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("target %d within the quota: %v", i, err)
		}
	}
	_, err := targets.Create(ctx, quotaTarget("t2"), metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := targets.Get(ctx, "t2", metav1.GetOptions{}); return err },
		`targets.kollect.dev "t2" is forbidden`, `maxTargets of Scope "quota" in namespace "q-a"`, "used: targets=2", "limited: targets=2")
	// Server-side apply creates through the same check.
	_, err = targets.Patch(ctx, "t3", types.ApplyPatchType,
		[]byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Target","metadata":{"name":"t3"},"spec":{"profileRef":{"name":"deployments"}}}`),
		metav1.PatchOptions{FieldManager: "test"})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := targets.Get(ctx, "t3", metav1.GetOptions{}); return err },
		`maxTargets of Scope "quota"`)
	// Updates change no count: a full namespace stays editable.
	if _, err := targets.Patch(ctx, "t0", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("updating a Target of a full namespace: %v", err)
	}
	// Another namespace has no Scope and this server no default quota.
	for i := range 3 {
		if _, err := api.Targets("q-b").Create(ctx, quotaTarget(fmt.Sprintf("t%d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatalf("another namespace: %v", err)
		}
	}
	// Deleting one frees its place.
	if err := targets.Delete(ctx, "t1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	finalize(ctx, t, targets, "t1")
	if _, err := targets.Create(ctx, quotaTarget("t2"), metav1.CreateOptions{}); err != nil {
		t.Errorf("after a delete: %v", err)
	}

	// The lowest maxInventories applies.
	invs := api.Inventories("q-a")
	if _, err := invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "i0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "i1"}}, metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := invs.Get(ctx, "i1", metav1.GetOptions{}); return err },
		`inventories.kollect.dev "i1" is forbidden`, `maxInventories of Scope "stricter" in namespace "q-a"`, "used: inventories=1", "limited: inventories=1")

	// Sinks of the three kinds count together.
	if _, err := api.EventSinks("q-a").Create(ctx, quotaEventSink("e0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.EventSinks("q-a").Create(ctx, quotaEventSink("e1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.DatabaseSinks("q-a").Create(ctx, &v1alpha1.DatabaseSink{ObjectMeta: metav1.ObjectMeta{Name: "d0"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, Endpoint: "postgresql://kollect@db.example.com:5432/inventory",
			Postgres: &v1alpha1.PostgresSinkConfig{Schema: "public", Table: "inventory"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snapshots := api.SnapshotSinks("q-a")
	_, err = snapshots.Create(ctx, &v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: "s0"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://git.example.com/inventory.git", Git: &v1alpha1.GitSinkConfig{}}}, metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := snapshots.Get(ctx, "s0", metav1.GetOptions{}); return err },
		`snapshotsinks.kollect.dev "s0" is forbidden`, `maxSinks of Scope "quota" in namespace "q-a"`, "used: sinks=3", "limited: sinks=3")

	// A quota of 0 allows nothing; raising it lets the create through.
	scope, err := api.Scopes("q-a").Get(ctx, "stricter", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scope.Spec.MaxInventories = ptr(int32(0))
	if _, err := api.Scopes("q-a").Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "i1"}}, metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := invs.Get(ctx, "i1", metav1.GetOptions{}); return err },
		"used: inventories=1", "limited: inventories=0")
	if err := api.Scopes("q-a").Delete(ctx, "stricter", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "i1"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("with only the Scope allowing 5: %v", err)
	}
}

// TestClusterQuotaAdmission: a ClusterScope caps ClusterTargets and
// ClusterInventories, and its maxSinks caps the sinks of all namespaces
// together, on top of each namespace's own quota.
func TestClusterQuotaAdmission(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1alpha1.ClusterScopeSpec{MaxTargets: ptr(int32(1)), MaxInventories: ptr(int32(1)), MaxSinks: ptr(int32(3))}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterTarget := func(name string) *v1alpha1.ClusterTarget {
		return &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployments"}}}
	}
	cts := api.ClusterTargets()
	if _, err := cts.Create(ctx, clusterTarget("c0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := cts.Create(ctx, clusterTarget("c1"), metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := cts.Get(ctx, "c1", metav1.GetOptions{}); return err },
		`clustertargets.kollect.dev "c1" is forbidden`, `maxTargets of ClusterScope "platform"`, "used: clustertargets=1", "limited: clustertargets=1")
	// Targets in namespaces are not ClusterTargets.
	if _, err := api.Targets("team-a").Create(ctx, quotaTarget("t0"), metav1.CreateOptions{}); err != nil {
		t.Errorf("a Target under a ClusterScope maxTargets: %v", err)
	}

	cis := api.ClusterInventories()
	if _, err := cis.Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "r0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cis.Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "r1"}}, metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := cis.Get(ctx, "r1", metav1.GetOptions{}); return err },
		`maxInventories of ClusterScope "platform"`, "used: clusterinventories=1")

	// Three sinks in two namespaces fill the cluster-wide quota.
	for _, s := range []struct{ ns, name string }{{"team-a", "e0"}, {"team-a", "e1"}, {"team-b", "e0"}} {
		if _, err := api.EventSinks(s.ns).Create(ctx, quotaEventSink(s.name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var sinks v1alpha1client.EventSinkInterface = api.EventSinks("team-c")
	_, err = sinks.Create(ctx, quotaEventSink("e0"), metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := sinks.Get(ctx, "e0", metav1.GetOptions{}); return err },
		`eventsinks.kollect.dev "e0" is forbidden`, `maxSinks of ClusterScope "platform", the sinks of all namespaces together`, "used: sinks=3", "limited: sinks=3")
}

// TestDefaultQuotas: the server's --default-max-* apply to namespaces
// whose Scopes do not set the field, and to the cluster kinds without a
// ClusterScope setting it; a Scope's own value replaces the default, even
// above it.
func TestDefaultQuotas(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Quotas: tenancy.Quotas{MaxTargets: 1, MaxSinks: 1}})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	targets := api.Targets("team-a")
	if _, err := targets.Create(ctx, quotaTarget("t0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := targets.Create(ctx, quotaTarget("t1"), metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := targets.Get(ctx, "t1", metav1.GetOptions{}); return err },
		`--default-max-targets of the server (no Scope of namespace "team-a" sets maxTargets)`, "used: targets=1", "limited: targets=1")
	// A Scope that sets another field leaves the default in force.
	if _, err := api.Scopes("team-a").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "sinks"},
		Spec: v1alpha1.ScopeSpec{MaxSinks: ptr(int32(2))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = targets.Create(ctx, quotaTarget("t1"), metav1.CreateOptions{})
	expectForbidden(t, err, "--default-max-targets")
	if _, err := api.Scopes("team-a").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "targets"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(2))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := targets.Create(ctx, quotaTarget("t1"), metav1.CreateOptions{}); err != nil {
		t.Errorf("with a Scope allowing 2: %v", err)
	}
	// maxSinks 2 of the Scope, not the default of 1.
	for _, name := range []string{"e0", "e1"} {
		if _, err := api.EventSinks("team-a").Create(ctx, quotaEventSink(name), metav1.CreateOptions{}); err != nil {
			t.Fatalf("sink %s: %v", name, err)
		}
	}
	// The cluster kinds: the default applies without a ClusterScope; the
	// default sets no cluster-wide sink cap.
	cts := api.ClusterTargets()
	ct := func(name string) *v1alpha1.ClusterTarget {
		return &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployments"}}}
	}
	if _, err := cts.Create(ctx, ct("c0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = cts.Create(ctx, ct("c1"), metav1.CreateOptions{})
	expectOverQuota(ctx, t, err, func(ctx context.Context) error { _, err := cts.Get(ctx, "c1", metav1.GetOptions{}); return err },
		"--default-max-targets of the server (no ClusterScope sets maxTargets)", "used: clustertargets=1")
	if _, err := api.EventSinks("team-b").Create(ctx, quotaEventSink("e0"), metav1.CreateOptions{}); err != nil {
		t.Errorf("another namespace's first sink: %v", err)
	}
}

// TestQuotaConcurrentCreates: creates sent at the same moment cannot
// together overshoot a quota. Each waits for the one before it to be
// stored before it is counted, so exactly the quota's worth are stored and
// every other create is refused. (Found by the adversarial review: 30
// parallel creates under maxTargets: 2 stored 30.)
func TestQuotaConcurrentCreates(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.Scopes("rq").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(2)), MaxSinks: ptr(int32(3))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const attempts = 30
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := map[string]int{}
	start := make(chan struct{})
	for i := range attempts {
		wg.Add(2)
		record := func(kind string, err error) {
			if err == nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota") {
				refused[kind]++
			} else {
				t.Errorf("%s create: %v, want success or 403 exceeded quota", kind, err)
			}
		}
		go func() {
			defer wg.Done()
			<-start
			_, err := api.Targets("rq").Create(ctx, quotaTarget(fmt.Sprintf("t%d", i)), metav1.CreateOptions{})
			record("Target", err)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, err := api.EventSinks("rq").Create(ctx, quotaEventSink(fmt.Sprintf("s%d", i)), metav1.CreateOptions{})
			record("EventSink", err)
		}()
	}
	close(start)
	wg.Wait()
	targets, err := api.Targets("rq").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := api.EventSinks("rq").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(targets.Items); n != 2 || refused["Target"] != attempts-2 {
		t.Errorf("%d parallel Target creates under maxTargets: 2: %d stored, %d refused; want 2 and %d", attempts, n, refused["Target"], attempts-2)
	}
	if n := len(sinks.Items); n != 3 || refused["EventSink"] != attempts-3 {
		t.Errorf("%d parallel EventSink creates under maxSinks: 3: %d stored, %d refused; want 3 and %d", attempts, n, refused["EventSink"], attempts-3)
	}
}

// TestProfileQuota: Profiles count too (maxProfiles, --default-max-profiles):
// a namespace editor cannot fill the server's etcd and the leader's
// informers with them.
func TestProfileQuota(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{Quotas: tenancy.Quotas{MaxProfiles: 2}})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	profile := func(name string) *v1alpha1.Profile {
		return &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}}}}
	}
	create := func(ns, name string) error {
		_, err := api.Profiles(ns).Create(ctx, profile(name), metav1.CreateOptions{})
		return err
	}
	// The server default: 2 per namespace.
	for _, name := range []string{"a", "b"} {
		if err := create("pq-default", name); err != nil {
			t.Fatalf("Profile %s within the default: %v", name, err)
		}
	}
	if err := create("pq-default", "c"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--default-max-profiles") {
		t.Errorf("a third Profile under --default-max-profiles=2: %v, want 403 naming the flag", err)
	}
	// A Scope's maxProfiles lowers it.
	if _, err := api.Scopes("pq-scope").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "one"},
		Spec: v1alpha1.ScopeSpec{MaxProfiles: ptr(int32(1))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := create("pq-scope", "a"); err != nil {
		t.Fatalf("the first Profile under maxProfiles: 1: %v", err)
	}
	err := create("pq-scope", "b")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `maxProfiles of Scope "one"`) {
		t.Errorf("a second Profile under maxProfiles: 1: %v, want 403 naming the Scope's maxProfiles", err)
	}
	if _, err := api.Profiles("pq-scope").Get(ctx, "b", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused Profile: %v, want not stored", err)
	}
}
