package apiserver_test

// Quotas under races (issue 12, from the adversarial review): attacks on
// the create serialization with server-side apply, mixed creates and
// applies, create/delete races, and the ClusterScope's cluster-wide
// maxSinks over the three sink kinds in two namespaces. Each asserts the
// stored count never exceeds the quota.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// applyBody is obj as a server-side apply body: its JSON with apiVersion
// and kind, without status.
func applyBody(t *testing.T, kind string, obj runtime.Object) []byte {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "status")
	m["apiVersion"] = v1alpha1.SchemeGroupVersion.String()
	m["kind"] = kind
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func forceApply(manager string) metav1.PatchOptions {
	return metav1.PatchOptions{FieldManager: manager, Force: ptr(true)}
}

// attackTally counts refusals by kind; anything else than success or a 403
// exceeded quota (or, for the delete races, 404/409) is an error.
type attackTally struct {
	mu      sync.Mutex
	ok      map[string]int
	refused map[string]int
}

func newTally() *attackTally { return &attackTally{ok: map[string]int{}, refused: map[string]int{}} }

func (a *attackTally) record(t *testing.T, kind string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil:
		a.ok[kind]++
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
		a.refused[kind]++
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		// a create racing an apply of the same name: no extra object.
	default:
		t.Errorf("%s: %v, want success or 403 exceeded quota", kind, err)
	}
}

// maxLive follows w and returns a function telling the largest number of
// objects that existed at once (synthetic ADDED events first: w must be
// started with no resourceVersion).
func maxLive(t *testing.T, w watch.Interface) (stop func() int) {
	live := map[string]bool{}
	most := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			m, ok := ev.Object.(metav1.Object)
			if !ok {
				continue
			}
			key := m.GetNamespace() + "/" + m.GetName()
			switch ev.Type {
			case watch.Added, watch.Modified:
				live[key] = true
			case watch.Deleted:
				delete(live, key)
			}
			if len(live) > most {
				most = len(live)
			}
		}
	}()
	return func() int {
		w.Stop()
		<-done
		return most
	}
}

// TestQuotaParallelApplies: 30 parallel server-side applies (force)
// each creating a Target and an EventSink under maxTargets: 2, maxSinks: 3.
func TestQuotaParallelApplies(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	const ns = "rq-apply"
	if _, err := api.Scopes(ns).Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(2)), MaxSinks: ptr(int32(3))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const attempts = 30
	tally := newTally()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range attempts {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("t%d", i)
			_, err := api.Targets(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "Target", quotaTarget(name)), forceApply(fmt.Sprintf("m%d", i)))
			tally.record(t, "Target", err)
		}()
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("s%d", i)
			_, err := api.EventSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "EventSink", quotaEventSink(name)), forceApply(fmt.Sprintf("m%d", i)))
			tally.record(t, "EventSink", err)
		}()
	}
	close(start)
	wg.Wait()
	targets, err := api.Targets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := api.EventSinks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applies: ok %v, refused %v; stored targets=%d sinks=%d", tally.ok, tally.refused, len(targets.Items), len(sinks.Items))
	if n := len(targets.Items); n != 2 || tally.refused["Target"] != attempts-2 {
		t.Errorf("%d parallel Target applies under maxTargets: 2: %d stored, %d refused", attempts, n, tally.refused["Target"])
	}
	if n := len(sinks.Items); n != 3 || tally.refused["EventSink"] != attempts-3 {
		t.Errorf("%d parallel EventSink applies under maxSinks: 3: %d stored, %d refused", attempts, n, tally.refused["EventSink"])
	}
	// A status apply never creates.
	_, err = api.Targets(ns).Patch(ctx, "status-only", types.ApplyPatchType, applyBody(t, "Target", quotaTarget("status-only")), forceApply("st"), "status")
	if !apierrors.IsNotFound(err) {
		t.Errorf("apply to /status of a missing Target: %v, want 404", err)
	}
	// A PUT never creates.
	_, err = api.Targets(ns).Update(ctx, quotaTarget("put-only"), metav1.UpdateOptions{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("PUT of a missing Target: %v, want 404", err)
	}
}

// TestQuotaMixedCreatesAndApplies: creates and applies of the same
// and of different names at the same moment.
func TestQuotaMixedCreatesAndApplies(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	const ns = "rq-mixed"
	if _, err := api.Scopes(ns).Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(2)), MaxSinks: ptr(int32(3))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const attempts = 30
	tally := newTally()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range attempts {
		wg.Add(4)
		// Distinct names by create and by apply, plus a shared name both race on.
		go func() {
			defer wg.Done()
			<-start
			_, err := api.Targets(ns).Create(ctx, quotaTarget(fmt.Sprintf("c%d", i)), metav1.CreateOptions{})
			tally.record(t, "Target", err)
			_, err = api.Targets(ns).Create(ctx, quotaTarget(fmt.Sprintf("x%d", i%5)), metav1.CreateOptions{})
			tally.record(t, "Target", err)
		}()
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("a%d", i)
			_, err := api.Targets(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "Target", quotaTarget(name)), forceApply("m"))
			tally.record(t, "Target", err)
			name = fmt.Sprintf("x%d", i%5)
			_, err = api.Targets(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "Target", quotaTarget(name)), forceApply(fmt.Sprintf("m%d", i)))
			tally.record(t, "Target", err)
		}()
		go func() {
			defer wg.Done()
			<-start
			_, err := api.EventSinks(ns).Create(ctx, quotaEventSink(fmt.Sprintf("c%d", i)), metav1.CreateOptions{})
			tally.record(t, "EventSink", err)
		}()
		go func() {
			defer wg.Done()
			<-start
			name := fmt.Sprintf("a%d", i)
			_, err := api.EventSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "EventSink", quotaEventSink(name)), forceApply("m"))
			tally.record(t, "EventSink", err)
		}()
	}
	close(start)
	wg.Wait()
	targets, err := api.Targets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := api.EventSinks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mixed: ok %v, refused %v; stored targets=%d sinks=%d", tally.ok, tally.refused, len(targets.Items), len(sinks.Items))
	if n := len(targets.Items); n != 2 {
		t.Errorf("parallel Target creates and applies under maxTargets: 2: %d stored", n)
	}
	if n := len(sinks.Items); n != 3 {
		t.Errorf("parallel EventSink creates and applies under maxSinks: 3: %d stored", n)
	}
}

// TestQuotaCreateDeleteRace: while workers create and delete Targets
// and EventSinks in a full namespace, a watch sees at no moment more than
// the quota.
func TestQuotaCreateDeleteRace(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	const ns = "rq-race"
	if _, err := api.Scopes(ns).Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(2)), MaxSinks: ptr(int32(2))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tw, err := api.Targets(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := api.EventSinks(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stopT, stopS := maxLive(t, tw), maxLive(t, sw)

	const workers, rounds = 12, 8
	tally := newTally()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range workers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				name := fmt.Sprintf("t%d-%d", w, r)
				var err error
				if (w+r)%2 == 0 {
					_, err = api.Targets(ns).Create(ctx, quotaTarget(name), metav1.CreateOptions{})
				} else {
					_, err = api.Targets(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "Target", quotaTarget(name)), forceApply("m"))
				}
				tally.record(t, "Target", err)
				if err == nil {
					// Hold the place a moment, so the others find the namespace full.
					time.Sleep(time.Duration(300+50*(w%4)) * time.Millisecond)
					if err := api.Targets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
						t.Errorf("delete Target %s: %v", name, err)
					}
					// As the collector would: no controller runs here.
					if _, err := api.Targets(ns).Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
						t.Errorf("finalize Target %s: %v", name, err)
					}
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-start
			for r := range rounds {
				name := fmt.Sprintf("s%d-%d", w, r)
				var err error
				if (w+r)%2 == 0 {
					_, err = api.EventSinks(ns).Create(ctx, quotaEventSink(name), metav1.CreateOptions{})
				} else {
					_, err = api.EventSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "EventSink", quotaEventSink(name)), forceApply("m"))
				}
				tally.record(t, "EventSink", err)
				if err == nil {
					time.Sleep(time.Duration(300+50*(w%4)) * time.Millisecond)
					// Delete by collection too, racing the others' creates.
					if r%3 == 0 {
						err = api.EventSinks(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
					} else {
						err = api.EventSinks(ns).Delete(ctx, name, metav1.DeleteOptions{})
					}
					if err != nil && !apierrors.IsNotFound(err) {
						t.Errorf("delete EventSink %s: %v", name, err)
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	// Let the watches catch up with the last writes.
	targets, err := api.Targets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sinks, err := api.EventSinks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Let the watches deliver the last writes (the last are deletes,
	// which cannot raise the most seen).
	time.Sleep(2 * time.Second)
	mt, ms := stopT(), stopS()
	t.Logf("create/delete race: ok %v, refused %v; most at once: targets=%d sinks=%d; left targets=%d sinks=%d",
		tally.ok, tally.refused, mt, ms, len(targets.Items), len(sinks.Items))
	if mt > 2 {
		t.Errorf("a watch saw %d Targets at once under maxTargets: 2", mt)
	}
	if ms > 2 {
		t.Errorf("a watch saw %d EventSinks at once under maxSinks: 2", ms)
	}
	if tally.ok["Target"] == 0 || tally.ok["EventSink"] == 0 || tally.refused["Target"] == 0 || tally.refused["EventSink"] == 0 {
		t.Errorf("ok %v, refused %v: the race was not exercised", tally.ok, tally.refused)
	}
}

// TestClusterSinkQuotaParallel: a ClusterScope maxSinks: 4 over the
// three sink kinds created (and applied) at once in two namespaces.
func TestClusterSinkQuotaParallel(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1alpha1.ClusterScopeSpec{MaxSinks: ptr(int32(4))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dbSink := func(name string) *v1alpha1.DatabaseSink {
		return &v1alpha1.DatabaseSink{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, Endpoint: "postgresql://kollect@db.example.com:5432/inventory",
				Postgres: &v1alpha1.PostgresSinkConfig{Schema: "public", Table: "inventory"}}}
	}
	snapSink := func(name string) *v1alpha1.SnapshotSink {
		return &v1alpha1.SnapshotSink{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://git.example.com/inventory.git", Git: &v1alpha1.GitSinkConfig{}}}
	}
	// One writer per sink kind: a create, or a server-side apply that creates.
	writers := []sinkWriter{
		{"e", func(ns, name string, apply bool, opts metav1.PatchOptions) (err error) {
			if apply {
				_, err = api.EventSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "EventSink", quotaEventSink(name)), opts)
			} else {
				_, err = api.EventSinks(ns).Create(ctx, quotaEventSink(name), metav1.CreateOptions{})
			}
			return err
		}},
		{"d", func(ns, name string, apply bool, opts metav1.PatchOptions) (err error) {
			if apply {
				_, err = api.DatabaseSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "DatabaseSink", dbSink(name)), opts)
			} else {
				_, err = api.DatabaseSinks(ns).Create(ctx, dbSink(name), metav1.CreateOptions{})
			}
			return err
		}},
		{"s", func(ns, name string, apply bool, opts metav1.PatchOptions) (err error) {
			if apply {
				_, err = api.SnapshotSinks(ns).Patch(ctx, name, types.ApplyPatchType, applyBody(t, "SnapshotSink", snapSink(name)), opts)
			} else {
				_, err = api.SnapshotSinks(ns).Create(ctx, snapSink(name), metav1.CreateOptions{})
			}
			return err
		}},
	}
	const perKind = 10
	tally := newTally()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, ns := range []string{"cq-a", "cq-b"} {
		for i := range perKind {
			apply := i%2 == 1
			opts := forceApply(fmt.Sprintf("m%d", i))
			for _, w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					tally.record(t, "sink", w.write(ns, fmt.Sprintf("%s%d", w.prefix, i), apply, opts))
				}()
			}
		}
	}
	close(start)
	wg.Wait()
	es, err := api.EventSinks(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := api.DatabaseSinks(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ss, err := api.SnapshotSinks(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	total := len(es.Items) + len(ds.Items) + len(ss.Items)
	t.Logf("cluster sinks: ok %v, refused %v; stored event=%d database=%d snapshot=%d", tally.ok, tally.refused, len(es.Items), len(ds.Items), len(ss.Items))
	if total != 4 || tally.refused["sink"] != 2*3*perKind-4 {
		t.Errorf("%d parallel sink creates/applies under ClusterScope maxSinks: 4: %d stored, %d refused", 2*3*perKind, total, tally.refused["sink"])
	}
}

// sinkWriter creates a sink named prefix+n of one kind.
type sinkWriter struct {
	prefix string
	write  func(ns, name string, apply bool, opts metav1.PatchOptions) error
}

// TestQuotaIgnoresDryRuns: server-side dry-run creates (kubectl apply
// --dry-run=server, CI diff jobs) store nothing and hold no place: while 16
// clients dry-run creates, 20 real creates, each deleted again, all find
// the one free place: a namespace's Targets, and sinks under a
// ClusterScope's cluster-wide maxSinks, dry-run by another tenant. (Found by
// the adversarial review: 17 and 12 of 20 refused.)
func TestQuotaIgnoresDryRuns(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.Scopes("rq-dry").Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "quota"},
		Spec: v1alpha1.ScopeSpec{MaxTargets: ptr(int32(1))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "cap"},
		Spec: v1alpha1.ClusterScopeSpec{MaxSinks: ptr(int32(1))}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	for _, c := range []struct {
		name string
		// dry dry-runs a create; create creates and deletes for good.
		dry    func(ctx context.Context, name string) error
		create func(ctx context.Context, name string) error
	}{
		{"Targets of a namespace",
			func(ctx context.Context, name string) error {
				_, err := api.Targets("rq-dry").Create(ctx, quotaTarget(name), dryRun)
				return err
			},
			func(ctx context.Context, name string) error {
				if _, err := api.Targets("rq-dry").Create(ctx, quotaTarget(name), metav1.CreateOptions{}); err != nil {
					return err
				}
				if err := api.Targets("rq-dry").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				finalize(ctx, t, api.Targets("rq-dry"), name)
				return nil
			}},
		{"sinks of the cluster, dry-run in another namespace",
			func(ctx context.Context, name string) error {
				_, err := api.EventSinks("tenant-a").Create(ctx, quotaEventSink(name), dryRun)
				return err
			},
			func(ctx context.Context, name string) error {
				if _, err := api.EventSinks("tenant-b").Create(ctx, quotaEventSink(name), metav1.CreateOptions{}); err != nil {
					return err
				}
				if err := api.EventSinks("tenant-b").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				return nil
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			stormCtx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			var dry atomic.Int64
			for w := range 16 {
				wg.Go(func() {
					for i := 0; stormCtx.Err() == nil; i++ {
						_ = c.dry(stormCtx, fmt.Sprintf("dry-%d-%d", w, i))
						dry.Add(1)
					}
				})
			}
			time.Sleep(300 * time.Millisecond)
			var refused int
			var lastErr error
			for i := range 20 {
				err := c.create(ctx, fmt.Sprintf("real-%d", i))
				switch {
				case err == nil:
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota"):
					refused++
					lastErr = err
				default:
					t.Fatalf("create real-%d: %v", i, err)
				}
			}
			stop()
			wg.Wait()
			t.Logf("%d dry-run creates beside 20 real ones: %d refused", dry.Load(), refused)
			if refused > 0 {
				t.Errorf("%d of 20 real creates refused while only dry runs were in flight; last: %v", refused, lastErr)
			}
		})
	}
}
