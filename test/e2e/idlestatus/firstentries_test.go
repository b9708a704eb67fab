package idlestatus

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectv1alpha1 "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
	"kollect.dev/kollect/test/e2e/framework"
)

// TestMissingSinksAreReportedByTheCreate: an Inventory (and a
// ClusterInventory) whose sinks do not exist is stored once. The create's
// own answer carries a Failed SinkNotFound entry per sink and the Degraded
// condition; its exporters, finding those entries, write nothing more
// during a watchdog period and a half (before, they wrote the entries in
// a second version at once); and the Warning Event naming every sink
// regards the version the create stored. A dry run stores nothing and
// emits no Event.
func TestMissingSinksAreReportedByTheCreate(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const ns = "unsunk"
	createNamespace(ctx, t, ns)
	spec := v1alpha1.InventorySpec{
		SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}},
		DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "portal"}},
		EventSinkRefs:    []v1alpha1.SinkReference{{Name: "changes"}},
	}
	want := []string{
		"SnapshotSink " + ns + "/audit does not exist",
		"DatabaseSink " + ns + "/portal does not exist",
		"EventSink " + ns + "/changes does not exist",
	}
	api := kollect.KollectV1alpha1()

	waitFirstEntries(ctx, t, api, ns)
	warned, api := warningsOf(t)
	inv, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "missing"}, Spec: spec}, metav1.CreateOptions{})
	must(t, err, "inventory")
	for _, w := range want {
		if !entrySays(inv.Status.SinkExports, w) {
			t.Errorf("the create's answer has no Failed SinkNotFound entry at generation 1 saying %q: %+v", w, inv.Status.SinkExports)
		}
		if !slices.Contains(warned(), w) {
			t.Errorf("the create's answer does not warn %q (kubectl prints its warnings): %q", w, warned())
		}
	}
	if c := meta.FindStatusCondition(inv.Status.Conditions, "Degraded"); c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonSinkNotFound {
		t.Errorf("the create's answer is not Degraded with SinkNotFound: %+v", inv.Status.Conditions)
	}

	cinv, err := api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "unsunk-missing"},
		Spec: v1alpha1.ClusterInventorySpec{SinkNamespace: ns, EventSinkRefs: []v1alpha1.SinkReference{{Name: "changes"}}}}, metav1.CreateOptions{})
	must(t, err, "cluster inventory")
	t.Cleanup(func() { _ = api.ClusterInventories().Delete(context.Background(), cinv.Name, metav1.DeleteOptions{}) })
	if !entrySays(cinv.Status.SinkExports, want[2]) {
		t.Errorf("the ClusterInventory's create answer has no Failed SinkNotFound entry saying %q: %+v", want[2], cinv.Status.SinkExports)
	}

	// Nothing writes them again: no MODIFIED event through one exporter
	// run and one watchdog run each.
	for name, n := range modifiedSince(ctx, t, ns, inv.ResourceVersion, cinv.Name, watchdog+watchdog/2) {
		if n > 0 {
			t.Errorf("%s: %d status writes after the create; want 0 (its first entries were already stored)", name, n)
		}
	}

	// One Warning Event names the three sinks, regarding the stored version.
	events, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	must(t, err, "events")
	for _, e := range events.Items {
		if e.Regarding.Name == "ghost" {
			t.Errorf("an Event regards the dry run's inventory: %s %q", e.Reason, e.Note)
		}
	}
	notes := sinkNotFoundNotes(ctx, t, ns, inv)
	if len(notes) != 1 {
		t.Fatalf("%d SinkNotFound Warning Events about the inventory; want 1: %q", len(notes), notes)
	}
	for _, w := range want {
		if !strings.Contains(notes[0], w) {
			t.Errorf("the Event's note does not say %q: %q", w, notes[0])
		}
	}

	// The ClusterInventory's Event is in default, where the built-in view
	// role reads Events: it names no sink (found by review, helper 65: a
	// user who may not list ClusterInventories read the sink's namespace
	// and name there).
	var clusterNotes []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := kube.EventsV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		clusterNotes = nil
		for _, e := range l.Items {
			if e.Regarding.Kind == "ClusterInventory" && e.Regarding.UID == cinv.UID && e.Reason == v1alpha1.ReasonSinkNotFound {
				clusterNotes = append(clusterNotes, e.Note)
			}
		}
		return len(clusterNotes) > 0, nil
	})
	must(t, err, "the ClusterInventory's SinkNotFound Event in default")
	for _, n := range clusterNotes {
		if strings.Contains(n, ns) || strings.Contains(n, "changes") {
			t.Errorf("the ClusterInventory's Event in default names its sink: %q", n)
		}
	}
}

// TestSinkCreatedJustAfterIsNotWarnedAbout: `kubectl apply -f dir/`
// creates an Inventory a moment before its sink when the files come in
// that order. The create's answer says the sink is missing, and warns so
// (kubectl prints it); the exporter exports once the sink is there; and
// no Warning Event stays behind about a sink that exists. Before, the
// Event was posted with the create and kept for the Events' hour.
func TestSinkCreatedJustAfterIsNotWarnedAbout(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const ns = "inventory-then-sink"
	createNamespace(ctx, t, ns)
	waitFirstEntries(ctx, t, kollect.KollectV1alpha1(), ns)
	warned, api := warningsOf(t)
	missing := "SnapshotSink " + ns + "/late does not exist"
	inv, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "early"},
		Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "late"}}}}, metav1.CreateOptions{})
	must(t, err, "inventory")
	if !entrySays(inv.Status.SinkExports, missing) {
		t.Fatalf("the create's answer has no entry saying %q: %+v", missing, inv.Status.SinkExports)
	}
	if !slices.Contains(warned(), missing) {
		t.Errorf("the create's answer does not warn %q: %q", missing, warned())
	}
	_, err = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///late"}}, metav1.CreateOptions{})
	must(t, err, "sink")
	var last []v1alpha1.SinkExportStatus
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := api.Inventories(ns).Get(ctx, inv.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = got.Status.SinkExports
		return len(last) == 1 && last[0].Outcome == v1alpha1.OutcomeExported, nil
	})
	if err != nil {
		t.Fatalf("the exporter did not export to the sink created after its inventory: %+v", last)
	}
	// A first entry's Event waits a few seconds (firstWarningDelay); twice
	// that, none has come.
	time.Sleep(10 * time.Second)
	if notes := sinkNotFoundNotes(ctx, t, ns, inv); len(notes) != 0 {
		t.Errorf("%d SinkNotFound Warning Events about an inventory whose sink exists and was exported to: %q", len(notes), notes)
	}
}

// warningsOf returns a client of kollect-apiserver (through kube-apiserver)
// and the warnings the answers to its requests carried.
func warningsOf(t *testing.T) (func() []string, kollectv1alpha1.KollectV1alpha1Interface) {
	t.Helper()
	h := &warningLog{}
	cfg := env.Cluster.RESTConfig()
	cfg.WarningHandler = h
	c, err := versioned.NewForConfig(cfg)
	must(t, err, "client")
	return h.all, c.KollectV1alpha1()
}

// warningLog keeps the warnings a client was sent.
type warningLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *warningLog) HandleWarningHeader(_ int, _ string, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, text)
}

func (l *warningLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// sinkNotFoundNotes returns the notes of the SinkNotFound Warning Events
// regarding inv, each checked to regard the version its create stored.
func sinkNotFoundNotes(ctx context.Context, t *testing.T, ns string, inv *v1alpha1.Inventory) []string {
	t.Helper()
	events, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	must(t, err, "events")
	var notes []string
	for _, e := range events.Items {
		if e.Regarding.Name == inv.Name && e.Regarding.UID == inv.UID && e.Type == corev1.EventTypeWarning && e.Reason == v1alpha1.ReasonSinkNotFound {
			if e.Regarding.ResourceVersion != inv.ResourceVersion {
				t.Errorf("the Event regards resourceVersion %s; the create stored %s", e.Regarding.ResourceVersion, inv.ResourceVersion)
			}
			notes = append(notes, e.Note)
		}
	}
	return notes
}

// waitFirstEntries waits until a create in ns gets first entries: the
// exporters start once the server leads and its caches are synced, and
// until then a create has none (the exporters write them). The dry run
// that shows it is "ghost", which nothing may regard.
func waitFirstEntries(ctx context.Context, t *testing.T, api kollectv1alpha1.KollectV1alpha1Interface, ns string) {
	t.Helper()
	// A grant just made reaches the authorizers (kube-apiserver's for the
	// proxied request, kollect-apiserver's) through their informers, so a
	// refusal is retried until the deadline and reported if it persists.
	var last error
	err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		ghost, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "ghost"},
			Spec: v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "nowhere"}}}},
			metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if last = err; err != nil {
			return false, nil
		}
		if len(ghost.Status.SinkExports) != 1 {
			last = fmt.Errorf("the dry run has %d entries (%+v); want 1", len(ghost.Status.SinkExports), ghost.Status.SinkExports)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("a dry run with a first entry: %v (last: %v)", err, last)
	}
}

// TestFirstEntriesOnlyForMissingSinks: a sink created just before its
// inventory (kubectl apply of both, by several clients at once) may not
// be in the controller's cache yet; the create confirms a miss in storage
// and gives no entry for a sink that exists (found by review, helper 47:
// 1 to 4 creates in 100 said SinkNotFound, with a Warning Event).
func TestFirstEntriesOnlyForMissingSinks(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	const ns = "sink-then-inventory"
	createNamespace(ctx, t, ns)
	api := kollect.KollectV1alpha1()
	waitFirstEntries(ctx, t, api, ns)
	const clients, pairs = 6, 15 // within the default quotas of 100
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range pairs {
				name := fmt.Sprintf("c%d-%02d", c, i)
				if _, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///" + name}}, metav1.CreateOptions{}); err != nil {
					t.Errorf("sink %s: %v", name, err)
					return
				}
				inv, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: name}}}}, metav1.CreateOptions{})
				if err != nil {
					t.Errorf("inventory %s: %v", name, err)
					return
				}
				if len(inv.Status.SinkExports) > 0 {
					t.Errorf("inventory %s, whose sink was created before it: the create's answer has %+v", name, inv.Status.SinkExports)
				}
			}
		})
	}
	wg.Wait()
}

// TestFirstEntriesNeedRead: first entries tell whether a sink exists, so
// a user who may create inventories but not read them gets none (the
// exporters write them, for readers to see); one who may read them does
// (found by review, helper 47).
func TestFirstEntriesNeedRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const ns = "create-only"
	createNamespace(ctx, t, ns)
	waitFirstEntries(ctx, t, kollect.KollectV1alpha1(), ns)
	creates := []string{"create"}
	for user, verbs := range map[string][]string{"mallory": creates, "alice": append(creates, "get")} {
		_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventories"}, Verbs: verbs},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks"}, Verbs: []string{"use"}},
			{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventoryitems"}, Verbs: []string{"list"}},
		}}, metav1.CreateOptions{})
		must(t, err, "role")
		_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: user},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}, metav1.CreateOptions{})
		must(t, err, "binding")
	}
	for user, want := range map[string]int{"mallory": 0, "alice": 1} {
		cfg := env.Cluster.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		client, err := versioned.NewForConfig(cfg)
		must(t, err, "client")
		var inv *v1alpha1.Inventory
		// The grant reaches kollect-apiserver's authorizer within a second.
		err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			inv, err = client.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "by-" + user},
				Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "absent"}}}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil, nil
		})
		must(t, err, "a dry run as "+user)
		if len(inv.Status.SinkExports) != want {
			t.Errorf("%s: the create's answer has %d entries (%+v); want %d", user, len(inv.Status.SinkExports), inv.Status.SinkExports, want)
		}
	}
}

// TestRefusedCreatesReadNoSink: whether a create's sinks exist is looked
// up only once the create is valid and its user may use them. A create
// refused by validation or by admission read every sink the cache missed,
// so its latency told a tenant which sinks exist in a namespace she has no
// rights in (97 % right from one create of 20 references), and names of
// 140 kB reached etcd (found by review, helper 55). Counted on the
// server's etcd requests: no get of a sink.
func TestRefusedCreatesReadNoSink(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	const ns, victim = "refused-own", "refused-victim"
	createNamespace(ctx, t, ns)
	createNamespace(ctx, t, victim)
	_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "eve"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventories"}, Verbs: []string{"create", "get"}},
		{APIGroups: []string{"kollect.dev"}, Resources: []string{"snapshotsinks", "eventsinks"}, Verbs: []string{"use"}},
		{APIGroups: []string{"kollect.dev"}, Resources: []string{"inventoryitems"}, Verbs: []string{"list"}},
	}}, metav1.CreateOptions{})
	must(t, err, "role")
	_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "eve"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "eve"},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "eve"}}}, metav1.CreateOptions{})
	must(t, err, "binding")
	cfg := env.Cluster.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "eve"}
	eve, err := versioned.NewForConfig(cfg)
	must(t, err, "client")
	// Her own sinks she may look up: the grant has arrived once a dry run
	// of hers gets its entry.
	waitFirstEntries(ctx, t, eve.KollectV1alpha1(), ns)

	refs := map[string][]v1alpha1.SinkReference{
		"another namespace":  {{Name: "a", Namespace: victim}, {Name: "b", Namespace: victim}},
		"an invalid name":    {{Name: strings.Repeat("x", 300)}},
		"one of them usable": {{Name: "mine"}, {Name: "theirs", Namespace: victim}},
	}
	// The count is the server's: a status write of another test's
	// Inventory may confirm a missing sink meanwhile. Refused creates that
	// read sinks do so every time, so one round of none shows they read
	// none; a round with reads is tried again, twice at most.
	var n float64
	for round := 1; round <= 3; round++ {
		before := sinkGets(ctx, t)
		for what, refs := range refs {
			for i := range 3 {
				_, err := eve.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("refused-%d", i)},
					Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: refs}}, metav1.CreateOptions{})
				if err == nil {
					t.Fatalf("%s: the create was not refused", what)
				}
			}
		}
		if n = sinkGets(ctx, t) - before; n == 0 {
			break
		}
		t.Logf("round %d: sinks read %v times from etcd meanwhile", round, n)
	}
	if n != 0 {
		t.Errorf("9 refused creates read sinks %v times from etcd in each of 3 rounds; want none", n)
	}
}

// sinkGets is how many times kollect-apiserver has read a SnapshotSink
// from etcd by name.
func sinkGets(ctx context.Context, t *testing.T) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Cluster.Kollect()))
	must(t, err, "metrics client")
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	must(t, err, "metrics")
	return framework.SampleSum(string(body), "etcd_requests_total", `operation="get"`, `group="kollect.dev"`, `resource="snapshotsinks"`)
}

// createNamespace creates the namespace ns, deleted after the test.
func createNamespace(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err, "namespace")
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
}

// entrySays reports whether entries hold a first entry with message msg.
func entrySays(entries []v1alpha1.SinkExportStatus, msg string) bool {
	for _, e := range entries {
		if e.Outcome == v1alpha1.OutcomeFailed && e.Reason == v1alpha1.ReasonSinkNotFound && e.ObservedGeneration == 1 && e.Message == msg {
			return true
		}
	}
	return false
}

// modifiedSince counts, for d, the MODIFIED events of the Inventories of
// ns and of the ClusterInventory cluster from resourceVersion rv on (the
// server keeps one revision sequence for both).
func modifiedSince(ctx context.Context, t *testing.T, ns, rv, cluster string, d time.Duration) map[string]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	counts := map[string]int{}
	watches := []func() (watch.Interface, error){
		func() (watch.Interface, error) {
			return kollect.KollectV1alpha1().Inventories(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		},
		func() (watch.Interface, error) {
			return kollect.KollectV1alpha1().ClusterInventories().Watch(ctx, metav1.ListOptions{ResourceVersion: rv,
				FieldSelector: "metadata.name=" + cluster})
		},
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, open := range watches {
		w, err := open()
		must(t, err, "watch")
		wg.Go(func() {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-w.ResultChan():
					if !ok {
						if ctx.Err() == nil {
							t.Errorf("a watch ended early")
						}
						return
					}
					if ev.Type == watch.Error {
						t.Errorf("watch: %v", ev.Object)
						continue
					}
					if m, err := meta.Accessor(ev.Object); err == nil && ev.Type == watch.Modified {
						mu.Lock()
						counts[fmt.Sprintf("%T %s", ev.Object, m.GetName())]++
						mu.Unlock()
					}
				}
			}
		})
	}
	wg.Wait()
	return counts
}
