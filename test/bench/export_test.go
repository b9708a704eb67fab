package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/test/bench/load"
	"kollect.dev/kollect/test/collectenv"
)

// Sizes of BenchmarkExport.
const (
	exportChanges  = 20  // single changes timed per size
	fanItems       = 100 // ConfigMaps of the fan-out Inventory
	fanChanges     = 30  // changes timed through the five sinks
	exportIdleWait = time.Minute
	// changeTimeout bounds the wait for one change to arrive everywhere.
	changeTimeout = 2 * time.Minute
	// batchWindow is the exporter's: it coalesces a burst of changes for
	// this long before exporting them (pkg/controllers/export).
	batchWindow = 250 * time.Millisecond
	// changeGap separates two timed changes, beyond the batching window,
	// so that each is exported on its own.
	changeGap = 400 * time.Millisecond
)

// fanSinks are the five sinks of the fan-out, by the name their arrivals
// are recorded under.
var fanSinks = []string{"file", "git", "postgres", "nats", "webhook"}

// BenchmarkExport measures export (issue 11, acceptance point 6) through
// the real kube-apiserver, with kollect-apiserver on its own etcd (fsync on)
// leading its controllers, and real sinks on 127.0.0.1: a directory, git
// http-backend behind TLS, the machine's PostgreSQL and NATS JetStream, and
// a TLS webhook receiver.
//
//   - Fan-out: one Inventory of 100 ConfigMaps exports to five sinks (file,
//     git, postgres, nats, webhook); 30 times one ConfigMap changes, and the
//     time from the update request to the change being delivered is taken
//     at each sink: the file document rewritten (polled every 5 ms), the
//     push answered, the row committed (a trigger's NOTIFY), the JetStream
//     message received by an ordered consumer, the webhook delivery
//     received.
//   - First export to Postgres: N ConfigMaps are collected by a Target,
//     then one Inventory with one DatabaseSink is created; rows/s from its
//     creation to its entry saying Exported with N items, beside a plain
//     COPY of the same rows (COPY ... TO STDOUT of the exported table, then,
//     timed, COPY ... FROM STDIN into a table LIKE it INCLUDING ALL, in one
//     transaction).
//   - The cost of one changed item at each size: 20 single changes, from the
//     update request to the row committed, and to the item (the
//     collector's share).
//   - Exporter memory: kollect-apiserver's live heap just after a forced GC
//     (and its RSS) before the ConfigMaps exist, once they are collected,
//     and once they are exported: the last step is the exporter's share.
//   - Status writes per idle Inventory per minute, over a minute once all of
//     the above is done, beside the due rate.
//
// Every Inventory has exportMinInterval 0s: only changes are exported, and
// the watchdog refreshes each entry every 30s. KOLLECT_BENCH_EXPORT_SIZES
// (comma-separated, default 10000,100000) picks the sizes; with
// KOLLECT_BENCH_PPROF=dir, a CPU profile of kollect-apiserver over the
// first 30 s of each first export goes to dir. Nothing is asserted but the
// absence of errors and that the sinks end with the data.
func BenchmarkExport(b *testing.B) {
	sizes, err := sizesFromEnv("KOLLECT_BENCH_EXPORT_SIZES", []int{10_000, 100_000})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	wallStart := time.Now()
	dsn := postgresDSN()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatalf("PostgreSQL at KOLLECT_TEST_POSTGRES_DSN: %v; %v", err, errMissingService)
	}
	var pgVersion string
	_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&pgVersion)
	_ = conn.Close(ctx)
	nc, err := nats.Connect(natsURL(), nats.Timeout(5*time.Second))
	if err != nil {
		b.Fatalf("NATS at KOLLECT_TEST_NATS_URL: %v; %v", err, errMissingService)
	}
	defer nc.Close()
	loadBefore := loadAverage()
	env, err := collectenv.Start(ctx, collectenv.Options{
		FileSinks:   true,
		Log:         os.Stderr,
		KollectArgs: []string{"--allow-private-sink-endpoints", "--cluster-name=bench"},
	})
	if err != nil {
		b.Fatal(err)
	}
	failed := true
	defer func() {
		if failed {
			fmt.Fprintf(os.Stderr, "bench: logs kept in %s/logs\n", env.Dir)
		}
		_ = env.Stop(failed)
	}()
	x := &exportBench{env: env, dsn: dsn, nc: nc, direct: env.Cluster.KollectRESTConfig(env.Kollect)}
	if x.client, err = versioned.NewForConfig(benchClientConfig(x.direct)); err != nil {
		b.Fatal(err)
	}

	fan, err := x.fanOut(ctx, b)
	if err != nil {
		b.Fatal(err)
	}
	var firsts []*firstExport
	for _, n := range sizes {
		f, err := x.firstExport(ctx, b, n)
		if err != nil {
			b.Fatal(err)
		}
		firsts = append(firsts, f)
	}
	idle, err := x.idleWrites(ctx, exportIdleWait)
	if err != nil {
		b.Fatal(err)
	}

	out := os.Stdout
	conditions := load.Conditions(
		"kollect-apiserver and kube-apiserver on 127.0.0.1, each etcd fsync on (kollect's external, single member)",
		"kollect controllers=on (this replica leads), --cluster-name=bench, exportMinInterval 0s",
		fmt.Sprintf("PostgreSQL %s and NATS JetStream: the machine's, on 127.0.0.1", pgVersion),
		fmt.Sprintf("loadavg(before)=%s", loadBefore),
		fmt.Sprintf("loadavg(after)=%s", loadAverage()),
	)
	fmt.Fprintf(out, "\n== export (issue 11, point 6)\n   conditions: %s\n", conditions)
	fan.print(out)
	printFirstExports(out, firsts)
	printChangeCost(out, firsts)
	printMemory(out, firsts)
	idle.print(out)
	fmt.Fprintf(out, "\n   wall time of the benchmark (cluster start, ConfigMaps, measurements, stop): %s\n", time.Since(wallStart).Round(time.Second))
	failed = false
}

func sizesFromEnv(name string, def []int) ([]int, error) {
	s := os.Getenv(name)
	if s == "" {
		return def, nil
	}
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%s: %q is not a list of positive counts", name, s)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// exportBench is the environment of one BenchmarkExport run.
type exportBench struct {
	env    *collectenv.Env
	dsn    string
	nc     *nats.Conn
	direct *rest.Config // kollect-apiserver, directly
	client versioned.Interface
	// collected is how many items the server holds.
	collected int
	// namespaces hold the benchmark's Inventories.
	namespaces []string
}

// collectConfigMaps creates namespace ns, n ConfigMaps in it and a Target
// collecting them, and waits until the server holds their items.
func (x *exportBench) collectConfigMaps(ctx context.Context, ns string, n int) (create load.Result, sync time.Duration, err error) {
	kube := x.env.Kube
	if err := createNamespace(ctx, kube, ns); err != nil {
		return create, 0, err
	}
	x.namespaces = append(x.namespaces, ns)
	create, err = load.Run(ctx, fmt.Sprintf("create %d ConfigMaps", n), 64, n, func(ctx context.Context, i int) error {
		_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: cmName(i), Labels: map[string]string{"bench": "export"}},
			Data:       map[string]string{"value": "v0", "payload": strings.Repeat("x", 200)},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return create, 0, err
	}
	api := x.client.KollectV1alpha1()
	if _, err := api.Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{
				{Name: "value", Path: "{.data.value}"},
				{Name: "name", Path: "cel:object.metadata.name"},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		return create, 0, err
	}
	start := time.Now()
	if _, err := api.Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.TargetSpec{
			ProfileRef:    v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "export"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return create, 0, err
	}
	want := float64(x.collected + n)
	for {
		m, err := serverMetrics(ctx, x.direct)
		if err == nil && metric(m, `kollect_items{kind="InventoryItem"}`) >= want {
			break
		}
		select {
		case <-ctx.Done():
			return create, 0, fmt.Errorf("collecting %d ConfigMaps in %s: not done before the deadline", n, ns)
		case <-time.After(100 * time.Millisecond):
		}
	}
	x.collected += n
	return create, time.Since(start), nil
}

func cmName(i int) string { return fmt.Sprintf("cm-%06d", i) }

func (x *exportBench) secret(ctx context.Context, ns, name string, data map[string]string) error {
	_, err := x.env.Kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, StringData: data}, metav1.CreateOptions{})
	return err
}

// setValue writes token into a ConfigMap's value.
func (x *exportBench) setValue(ctx context.Context, ns, name, token string) error {
	patch := fmt.Appendf(nil, `{"data":{"value":%q}}`, token)
	_, err := x.env.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// watchItems records, under "item", the value attribute of every item of
// ns modified from now on, until ctx ends.
func (x *exportBench) watchItems(ctx context.Context, ns string, a *arrivals) error {
	items := x.client.KollectV1alpha1().InventoryItems(ns)
	l, err := items.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return err
	}
	w, err := items.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return err
	}
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			it, ok := ev.Object.(*v1alpha1.InventoryItem)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			var v string
			if raw, ok := it.Attributes["value"]; ok && json.Unmarshal(raw.Raw, &v) == nil {
				a.record("item", v, time.Now())
			}
		}
	}()
	return nil
}

// inventoryWatch follows a namespace's Inventories from before one is
// created, so that no status write is missed.
type inventoryWatch struct {
	w watch.Interface
}

func (x *exportBench) watchInventories(ctx context.Context, ns string) (*inventoryWatch, error) {
	invs := x.client.KollectV1alpha1().Inventories(ns)
	l, err := invs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	w, err := invs.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return nil, err
	}
	return &inventoryWatch{w: w}, nil
}

// until returns when Inventory name first satisfies cond, and the time
// the event that showed it was received.
func (iw *inventoryWatch) until(ctx context.Context, name string, cond func(*v1alpha1.Inventory) (bool, string)) (time.Time, error) {
	defer iw.w.Stop()
	last := "no event"
	for {
		select {
		case ev, ok := <-iw.w.ResultChan():
			at := time.Now()
			if !ok {
				return at, fmt.Errorf("inventory %s: the watch closed; last: %s", name, last)
			}
			inv, ok := ev.Object.(*v1alpha1.Inventory)
			if !ok || inv.Name != name {
				continue
			}
			done, why := cond(inv)
			if done {
				return at, nil
			}
			last = why
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("inventory %s: %w; last: %s", name, ctx.Err(), last)
		}
	}
}

// exportedAll is the condition "every entry says Exported with n items".
func exportedAll(sinks, n int) func(*v1alpha1.Inventory) (bool, string) {
	return func(inv *v1alpha1.Inventory) (bool, string) {
		if len(inv.Status.SinkExports) != sinks {
			return false, fmt.Sprintf("%d of %d entries", len(inv.Status.SinkExports), sinks)
		}
		for _, e := range inv.Status.SinkExports {
			if e.Outcome != v1alpha1.OutcomeExported || e.ItemCount != int64(n) {
				return false, fmt.Sprintf("%s/%s: %s, %d items: %s", e.Family, e.Name, e.Outcome, e.ItemCount, e.Message)
			}
		}
		return true, ""
	}
}

// timeChange writes token into ConfigMap name and waits until it arrived
// at every one of sinks; it returns the time of the update request.
func (x *exportBench) timeChange(ctx context.Context, a *arrivals, ns, name, token string, sinks []string) (time.Time, error) {
	start := time.Now()
	if err := x.setValue(ctx, ns, name, token); err != nil {
		return start, err
	}
	wctx, cancel := context.WithTimeout(ctx, changeTimeout)
	defer cancel()
	return start, a.wait(wctx, token, sinks)
}

// fanFigures is what the fan-out measured.
type fanFigures struct {
	initial time.Duration
	changes int
	// lat holds each sink's latencies, and "item" and "all five".
	lat     map[string][]time.Duration
	missing map[string]int
	elapsed time.Duration
	git     int64 // pushes the git server answered
	hooks   int64 // webhook deliveries received
}

func (x *exportBench) fanOut(ctx context.Context, b *testing.B) (*fanFigures, error) {
	const ns = "bench-fanout"
	if _, _, err := x.collectConfigMaps(ctx, ns, fanItems); err != nil {
		return nil, err
	}
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	a := newArrivals()
	go watchFiles(fctx, filepath.Join(x.env.FileSinkRoot, ns), 5*time.Millisecond, a)
	g, err := startGitServer(b, a)
	if err != nil {
		return nil, err
	}
	hook := startWebhookReceiver(b, a)
	prefix := "kb" + randomSuffix()
	stream, err := natsStream(ctx, b, x.nc, prefix, a)
	if err != nil {
		return nil, err
	}
	schema := "bench_fanout_" + randomSuffix()
	b.Cleanup(func() { _ = dropSchema(x.dsn, schema) })
	if err := x.secret(ctx, ns, "git-token", map[string]string{"username": g.user, "token": g.token}); err != nil {
		return nil, err
	}
	if err := x.secret(ctx, ns, "pg", map[string]string{"dsn": x.dsn}); err != nil {
		return nil, err
	}
	api := x.client.KollectV1alpha1()
	if _, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///fanout"},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "audit"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: g.url(),
			SecretRef: &v1alpha1.LocalObjectReference{Name: "git-token"},
			TLS:       &v1alpha1.TLSConfig{CABundle: caBundle(g.srv)},
			Git:       &v1alpha1.GitSinkConfig{Branch: "main"}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "pg"},
			Postgres:  &v1alpha1.PostgresSinkConfig{Schema: schema, Table: "inventory"}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "changes"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: natsURL(),
			NATS: &v1alpha1.NATSSinkConfig{Stream: stream, Subject: prefix + ".{cluster}.{namespace}.{inventory}"}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: hook.srv.URL + "/events",
			TLS: &v1alpha1.TLSConfig{CABundle: caBundle(hook.srv)}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	iw, err := x.watchInventories(ctx, ns)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{
			ExportMinInterval: &metav1.Duration{},
			SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "files"}, {Name: "audit"}},
			DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
			EventSinkRefs:     []v1alpha1.SinkReference{{Name: "changes"}, {Name: "hook"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	at, err := iw.until(ictx, "inv", exportedAll(len(fanSinks), fanItems))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("fan-out: first export: %w", err)
	}
	f := &fanFigures{initial: at.Sub(start), lat: map[string][]time.Duration{}, missing: map[string]int{}}
	if err := notifyRows(fctx, x.dsn, schema, "inventory", "postgres", a); err != nil {
		return nil, fmt.Errorf("fan-out: %w", err)
	}
	if err := x.watchItems(fctx, ns, a); err != nil {
		return nil, err
	}
	suffix := randomSuffix()
	begin := time.Now()
	watched := append([]string{"item"}, fanSinks...)
	for i := range fanChanges {
		token := fmt.Sprintf("fan-%02d-%s", i, suffix)
		t0, err := x.timeChange(ctx, a, ns, cmName(i%fanItems), token, fanSinks)
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		f.changes++
		var last time.Duration
		all := true
		for _, s := range watched {
			t, ok := a.at(s, token)
			if !ok {
				f.missing[s]++
				all = all && s == "item"
				continue
			}
			d := max(t.Sub(t0), 0)
			f.lat[s] = append(f.lat[s], d)
			if s != "item" {
				last = max(last, d)
			}
		}
		if all {
			f.lat["all five"] = append(f.lat["all five"], last)
		} else {
			f.missing["all five"]++
		}
		time.Sleep(changeGap)
	}
	f.elapsed = time.Since(begin)
	f.git, f.hooks = g.pushes.Load(), hook.events.Load()
	return f, nil
}

func (f *fanFigures) print(w io.Writer) {
	fmt.Fprintf(w, "\n== fan-out of one change to five sinks: one Inventory of %d ConfigMaps → file, git (TLS, http-backend), postgres, nats (JetStream), webhook (TLS); %d changes one at a time, each waited for at every sink, %s apart; from the ConfigMap update request\n",
		fanItems, f.changes, changeGap)
	fmt.Fprintf(w, "   arrival: file = document rewritten (polled every 5ms); git = push answered; postgres = row committed (trigger NOTIFY); nats = message at an ordered consumer; webhook = delivery received. The exporter waits %s (its batching window) before exporting a change. First export of the %d items to all five: %s; %d git pushes, %d webhook deliveries in all\n",
		batchWindow, fanItems, f.initial.Round(time.Millisecond), f.git, f.hooks)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sink\tdelivered\tmissing\tp50\tp99\tmax\t")
	for _, s := range append(append([]string{"item"}, fanSinks...), "all five") {
		lat := append([]time.Duration(nil), f.lat[s]...)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		r := load.FromLatencies(s, 1, lat, f.elapsed)
		var mx time.Duration
		if len(lat) > 0 {
			mx = lat[len(lat)-1]
		}
		name := s
		if s == "item" {
			name = "item (collector; reference)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fms\t%.1fms\t%.1fms\t\n", name, r.Ops, f.missing[s], msf(r.P50), msf(r.P99), msf(mx))
	}
	tw.Flush()
}

// firstExport is what one size measured.
type firstExport struct {
	n int
	// create and sync: the ConfigMaps created, and collected.
	create load.Result
	sync   time.Duration
	// export: from the Inventory's creation to its entry saying Exported
	// with n items; rows: the rows the table then held.
	export time.Duration
	rows   int64
	// copyTime: the plain COPY of the same rows.
	copyTime time.Duration
	copyRows int64
	// heap and rss before the ConfigMaps, once collected, once exported.
	heap, rss [3]int64
	// change latencies: to the item, to the row, from the item to the row.
	toItem, toRow, itemToRow []time.Duration
	missing                  int
}

func (x *exportBench) firstExport(ctx context.Context, b *testing.B, n int) (*firstExport, error) {
	ns := fmt.Sprintf("bench-export-%d", n)
	f := &firstExport{n: n}
	pid := x.env.Kollect.Pid()
	var err error
	if f.heap[0], err = heapAfterGC(ctx, x.direct); err != nil {
		return nil, err
	}
	f.rss[0] = rss(pid)
	if f.create, f.sync, err = x.collectConfigMaps(ctx, ns, n); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "bench: %d ConfigMaps created at %.0f/s, collected in %s\n", n, f.create.Throughput(), f.sync.Round(100*time.Millisecond))
	if f.heap[1], err = heapAfterGC(ctx, x.direct); err != nil {
		return nil, err
	}
	f.rss[1] = rss(pid)

	schema := fmt.Sprintf("bench_export_%d_%s", n, randomSuffix())
	b.Cleanup(func() { _ = dropSchema(x.dsn, schema) })
	if err := x.secret(ctx, ns, "pg", map[string]string{"dsn": x.dsn}); err != nil {
		return nil, err
	}
	api := x.client.KollectV1alpha1()
	if _, err := api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "pg"},
			Postgres:  &v1alpha1.PostgresSinkConfig{Schema: schema, Table: "inventory"}},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	iw, err := x.watchInventories(ctx, ns)
	if err != nil {
		return nil, err
	}
	x.profile(ctx, fmt.Sprintf("cpu-first-export-%d.pprof", n))
	start := time.Now()
	if _, err := api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{
			ExportMinInterval: &metav1.Duration{},
			DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	at, err := iw.until(ictx, "inv", exportedAll(1, n))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("first export of %d: %w", n, err)
	}
	f.export = at.Sub(start)
	fmt.Fprintf(os.Stderr, "bench: first export of %d items to Postgres in %s\n", n, f.export.Round(100*time.Millisecond))
	conn, err := pgx.Connect(ctx, x.dsn)
	if err != nil {
		return nil, err
	}
	err = conn.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{schema, "inventory"}.Sanitize()).Scan(&f.rows)
	_ = conn.Close(ctx)
	if err != nil {
		return nil, err
	}
	if f.rows != int64(n) {
		return nil, fmt.Errorf("first export of %d: the table holds %d rows", n, f.rows)
	}
	if f.heap[2], err = heapAfterGC(ctx, x.direct); err != nil {
		return nil, err
	}
	f.rss[2] = rss(pid)
	if f.copyTime, f.copyRows, err = copyBaseline(ctx, x.dsn, schema, "inventory"); err != nil {
		return nil, fmt.Errorf("plain COPY of %d rows: %w", n, err)
	}

	cctx, stop := context.WithCancel(ctx)
	defer stop()
	a := newArrivals()
	if err := notifyRows(cctx, x.dsn, schema, "inventory", "postgres", a); err != nil {
		return nil, err
	}
	if err := x.watchItems(cctx, ns, a); err != nil {
		return nil, err
	}
	suffix := randomSuffix()
	for i := range exportChanges {
		token := fmt.Sprintf("chg-%d-%02d-%s", n, i, suffix)
		// Spread over the set, never the same ConfigMap twice.
		name := cmName((i*7919 + 13) % n)
		t0, err := x.timeChange(ctx, a, ns, name, token, []string{"item", "postgres"})
		if err != nil && ctx.Err() != nil {
			return nil, err
		}
		ti, iok := a.at("item", token)
		tr, rok := a.at("postgres", token)
		if iok {
			f.toItem = append(f.toItem, max(ti.Sub(t0), 0))
		}
		if rok {
			f.toRow = append(f.toRow, max(tr.Sub(t0), 0))
		}
		if iok && rok {
			f.itemToRow = append(f.itemToRow, max(tr.Sub(ti), 0))
		}
		if !rok {
			f.missing++
		}
		time.Sleep(changeGap)
	}
	return f, nil
}

// profile, with KOLLECT_BENCH_PPROF=dir, writes a 30 s CPU profile of
// kollect-apiserver from now to dir/name, in the background.
func (x *exportBench) profile(ctx context.Context, name string) {
	dir := os.Getenv("KOLLECT_BENCH_PPROF")
	if dir == "" {
		return
	}
	go func() {
		body, err := x.client.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "30").Timeout(time.Minute).DoRaw(ctx)
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, name), body, 0o644)
		}
	}()
}

// copyBaseline copies the exported rows out of schema.table and, timed,
// into a new table LIKE it (same columns, defaults, keys and indexes) with
// one COPY FROM STDIN in one transaction.
func copyBaseline(ctx context.Context, dsn, schema, table string) (time.Duration, int64, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	src := pgx.Identifier{schema, table}.Sanitize()
	dst := pgx.Identifier{schema, table + "_plain_copy"}.Sanitize()
	var buf bytes.Buffer
	if _, err := conn.PgConn().CopyTo(ctx, &buf, "COPY "+src+" TO STDOUT"); err != nil {
		return 0, 0, err
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE "+dst+" (LIKE "+src+" INCLUDING ALL)"); err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
		return 0, 0, err
	}
	tag, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(buf.Bytes()), "COPY "+dst+" FROM STDIN")
	if err != nil {
		return 0, 0, err
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		return 0, 0, err
	}
	return time.Since(start), tag.RowsAffected(), nil
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func printFirstExports(w io.Writer, firsts []*firstExport) {
	fmt.Fprintf(w, "\n== first export to Postgres: ConfigMaps collected by one Target, then one Inventory with one DatabaseSink created; from its creation to its entry saying Exported with every item (watch event received), beside a plain COPY of the same rows into a table LIKE it INCLUDING ALL (goal: ≥ 50 %% of the COPY's rows/s)\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "items\tConfigMaps created/s\tcollected in\tfirst export\trows\trows/s\tplain COPY\trows/s\tkollect/COPY\tgoal\t")
	for _, f := range firsts {
		k, c := rate(f.rows, f.export), rate(f.copyRows, f.copyTime)
		ratio := "-"
		if c > 0 {
			ratio = fmt.Sprintf("%.2f", k/c)
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%.1fs\t%.2fs\t%d\t%.0f\t%.2fs\t%.0f\t%s\t≥ 0.50\t\n",
			f.n, f.create.Throughput(), f.sync.Seconds(), f.export.Seconds(), f.rows, k, f.copyTime.Seconds(), c, ratio)
	}
	tw.Flush()
}

func printChangeCost(w io.Writer, firsts []*firstExport) {
	fmt.Fprintf(w, "\n== one changed item exported to Postgres: %d single changes per size, %s apart, each to another ConfigMap; from the update request to the item's MODIFIED event and to the row committed (trigger NOTIFY); item→row is the exporter's share, of which %s is its batching window (goal: change→row p50 flat within 1.5× from the smallest size to the largest)\n",
		exportChanges, changeGap, batchWindow)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "items\tchanges\tmissing\tchange→item p50\tp99\tchange→row p50\tp99\titem→row p50\tp99\tchange→row p50 ×smallest\tgoal\t")
	var base time.Duration
	for i, f := range firsts {
		item := load.FromLatencies("", 1, f.toItem, 0)
		row := load.FromLatencies("", 1, f.toRow, 0)
		share := load.FromLatencies("", 1, f.itemToRow, 0)
		if i == 0 {
			base = row.P50
		}
		ratio := "-"
		if base > 0 && i > 0 {
			ratio = fmt.Sprintf("%.2f", float64(row.P50)/float64(base))
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%.1fms\t%s\t≤ 1.50\t\n",
			f.n, exportChanges, f.missing, msf(item.P50), msf(item.P99), msf(row.P50), msf(row.P99), msf(share.P50), msf(share.P99), ratio)
	}
	tw.Flush()
}

func printMemory(w io.Writer, firsts []*firstExport) {
	fmt.Fprintf(w, "\n== exporter memory: kollect-apiserver's live heap (runtime.MemStats.HeapAlloc just after a forced GC, /debug/pprof/heap?gc=1) and RSS (VmRSS) before the size's ConfigMaps exist, once collected (no Inventory yet), once exported; exported − collected is the exporter's share (its Inventory's view, the sink's client and buffers); collected − before is the collector's and the export controller's item cache\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "items\theap before\tcollected\texported\texporter share\tper 100,000 items\tRSS before\tcollected\texported\tRSS exporter share\t")
	for _, f := range firsts {
		share := f.heap[2] - f.heap[1]
		fmt.Fprintf(tw, "%d\t%.0f MiB\t%.0f MiB\t%.0f MiB\t%.1f MiB\t%.1f MiB\t%.0f MiB\t%.0f MiB\t%.0f MiB\t%.1f MiB\t\n",
			f.n, mib(f.heap[0]), mib(f.heap[1]), mib(f.heap[2]), mib(share), mib(share)*100_000/float64(f.n),
			mib(f.rss[0]), mib(f.rss[1]), mib(f.rss[2]), mib(f.rss[2]-f.rss[1]))
	}
	tw.Flush()
}

// idleInventory is one Inventory's status writes over the idle window.
type idleInventoryWrites struct {
	key     string
	entries int
	writes  int
	due     float64
}

type exportIdle struct {
	window   time.Duration
	rows     []*idleInventoryWrites
	requests float64
}

// idleWrites counts every Inventory's status writes (watch MODIFIED
// events) over window, with nothing changing.
func (x *exportBench) idleWrites(ctx context.Context, window time.Duration) (*exportIdle, error) {
	invs := x.client.KollectV1alpha1().Inventories("")
	l, err := invs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := invs.Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	m0, err := serverMetrics(ctx, x.direct)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	end := start.Add(window)
	out := &exportIdle{}
	byKey := map[string]*idleInventoryWrites{}
	for i := range l.Items {
		inv := &l.Items[i]
		r := &idleInventoryWrites{key: inv.Namespace + "/" + inv.Name, entries: len(inv.Status.SinkExports)}
		for _, e := range inv.Status.SinkExports {
			r.due += dueWrites(e, start, end)
		}
		byKey[r.key] = r
		out.rows = append(out.rows, r)
	}
	timer := time.NewTimer(window)
	defer timer.Stop()
	for done := false; !done; {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("idle window: the watch closed")
			}
			if inv, ok := ev.Object.(*v1alpha1.Inventory); ok && ev.Type == watch.Modified {
				if r := byKey[inv.Namespace+"/"+inv.Name]; r != nil {
					r.writes++
				}
			}
		case <-timer.C:
			done = true
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out.window = time.Since(start)
	m1, err := serverMetrics(ctx, x.direct)
	if err != nil {
		return nil, err
	}
	out.requests = inventoryStatusWrites(m1) - inventoryStatusWrites(m0)
	sort.Slice(out.rows, func(i, j int) bool { return out.rows[i].key < out.rows[j].key })
	return out, nil
}

func (e *exportIdle) print(w io.Writer) {
	fmt.Fprintf(w, "\n== status writes per idle Inventory per minute: the Inventories above, nothing changing, over %s (watch MODIFIED events; due: one per watchdog period, 30s, per entry with interval 0s)\n", e.window.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "inventory\tsink entries\twrites/min\tdue/min\twritten/due\t")
	var writes, due float64
	for _, r := range e.rows {
		ratio := "-"
		if r.due > 0 {
			ratio = fmt.Sprintf("%.2f", float64(r.writes)/r.due)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t\n", r.key, r.entries, float64(r.writes)/e.window.Minutes(), r.due/e.window.Minutes(), ratio)
		writes += float64(r.writes)
		due += r.due
	}
	if n := float64(len(e.rows)); n > 0 {
		ratio := "-"
		if due > 0 {
			ratio = fmt.Sprintf("%.2f", writes/due)
		}
		fmt.Fprintf(tw, "per Inventory (mean)\t\t%.2f\t%.2f\t%s\t\n", writes/n/e.window.Minutes(), due/n/e.window.Minutes(), ratio)
	}
	fmt.Fprintf(tw, "status entry writes/min (no-op writes too)\t\t%.2f\t%.2f\t\t\n", e.requests/e.window.Minutes(), due/e.window.Minutes())
	tw.Flush()
}
