package bench

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/bench/load"
)

// Sizes of BenchmarkAggregatedVsCRD, per path and concurrency level.
const (
	aggObjects      = 1000 // objects created, status-updated and read; also the size of each list
	aggListCalls    = 30   // list calls (at least one per client)
	aggWatchUpdates = 200  // updates each watcher must receive
	aggWarmup       = 20   // objects created and touched per path before measuring
	aggLiveObjects  = 1000 // objects of "create, exported", deleted after each round (as many as "create": a p99 of 100 is their second-slowest)
	// aggRounds splits every operation's calls (objects, list calls, watch
	// updates) into rounds, with the paths taking turns round by round in
	// a rotating order; each path's latencies are pooled over its rounds.
	// A path measured in one stretch would own whatever slow moment falls
	// into it (a burst of the idle fleet's re-exports, a compaction).
	aggRounds = 5
	// aggPasses is how many times the whole comparison runs, each pass in
	// fresh namespaces; KOLLECT_BENCH_API_PASSES overrides it. A p99 is
	// set by a handful of slow moments on a shared machine, and one pass
	// sees too few of them: single passes' ratios moved by ±0.5 from run
	// to run. The ratios are of latencies pooled over the passes; each
	// pass's own ratio is printed beside them to show the spread.
	aggPasses = 3
)

// The three ways of reaching the same-shaped Inventory.
const (
	pathCRD        = "CRD"        // a CustomResourceDefinition served by kube-apiserver
	pathAggregated = "aggregated" // kollect-apiserver through kube-apiserver's aggregator
	pathDirect     = "direct"     // kollect-apiserver, client talking to it directly
)

var (
	kollectInventories = schema.GroupVersionResource{Group: "kollect.dev", Version: "v1alpha1", Resource: "inventories"}
	crdInventories     = schema.GroupVersionResource{Group: "bench.kollect.dev", Version: "v1alpha1", Resource: "inventories"}
	crdsGVR            = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
)

// BenchmarkAggregatedVsCRD compares, on one real local cluster (etcd,
// kube-apiserver and kollect-apiserver from pkg/localcluster, all on
// 127.0.0.1, every etcd with fsync on), the Inventory served
//
//   - as a CRD of the same shape (inventories.bench.kollect.dev, structural
//     schema mirroring kollect's, status subresource) by kube-apiserver:
//     the path a CRD-based operator takes;
//   - by kollect-apiserver through kube-apiserver's aggregator;
//   - by kollect-apiserver with the client talking to it directly.
//
// All three use the same dynamic client code and the same request bodies;
// only the resource (and so the URL) differs. At 1, 8 and 64 concurrent
// clients it measures create, status update (GET + PUT /status), get, list
// of 1,000 objects and watch fan-out (as many watchers as clients, then
// updates from one writer; latency per delivered event from the update's
// response to its receipt). The comparison runs aggPasses times in fresh
// namespaces and pools each path's latencies over the passes. It prints a
// table per operation with the ratios to the CRD, each pass's own p99
// ratio beside them, and asserts nothing but the absence of errors.
//
// kollect-apiserver runs its controllers (it leads), and before measuring
// the API the benchmark builds the idle fleet of idle_test.go (1,000
// Inventories at rest, half of them failing) and measures it at rest: CPU
// and status writes per minute beside the due rate (issue 11, point 5).
// The fleet stays present while the API is measured. The measured objects
// are suspended (spec.suspend, in every path's body alike): no exporter
// writes them while they are read and written, as none writes a CRD's;
// the controllers still see them, and write nothing: the registry adds
// the export finalizer on create (the benchmark checks it is there
// before the next operation). "create, exported"
// creates objects that are not suspended (their sinks do not exist: each
// gets a status entry and a Warning Event), as a user's would, and deletes
// them afterwards, unmeasured.
//
// Two tables put kollect's cost beside the stock machinery's: before the
// fleet exists, kube-apiserver serves the fleet's status write rate to a
// CRD of the same shape (idle_reference_test.go), and after the latency
// comparison, CPU per operation of the four server processes, per path
// (opwork_test.go).
//
// Knobs: KOLLECT_BENCH_API_PASSES (passes, default 3) and
// KOLLECT_BENCH_API_OPS (a subset of the operations, see opsFromEnv), with
// the idle fleet's (idleOptionsFromEnv).
func BenchmarkAggregatedVsCRD(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	wallStart := time.Now()

	root, err := localcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	toolsDir, err := localcluster.BuildTools(ctx, root, os.Stderr) // cheap when up to date
	if err != nil {
		b.Fatal(err)
	}
	kollectBin, err := localcluster.KollectBinary(ctx, root, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	idleOpts, err := idleOptionsFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	loadBefore := loadAverage()

	dir := b.TempDir()
	cluster, err := localcluster.Start(ctx, localcluster.Options{
		Dir:         dir,
		ToolsBinDir: toolsDir,
		Log:         os.Stderr,
		// Nothing here needs its controllers; fewer processes compete for CPU.
		NoControllerManager: true,
		// Both stores fsync, as in production: no --unsafe-no-fsync.
		FastEtcd: false,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cluster.Stop() })
	// kollect-apiserver gets its own etcd process, the same binary and
	// flags as kube-apiserver's: the two paths differ only by their API
	// server, and production runs kollect on an external etcd too.
	kollectEtcd, err := cluster.StartEtcd(ctx, "kollect-etcd")
	if err != nil {
		b.Fatal(err)
	}
	// The idle fleet's sinks are a file sink and a webhook on loopback; the
	// measured namespaces hold 1,000 Inventories each, over the default
	// quota of 100.
	fileSinkRoot := filepath.Join(dir, "file-sinks")
	if err := os.Mkdir(fileSinkRoot, 0o750); err != nil {
		b.Fatal(err)
	}
	kollect, err := cluster.StartKollect(ctx, localcluster.KollectOptions{
		Binary: kollectBin, EtcdServers: kollectEtcd.URL(), AllowPrivateSinkEndpoints: true,
		Args: []string{"--file-sink-root=" + fileSinkRoot, "--default-max-inventories=0", "--cluster-name=bench"},
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := cluster.RegisterKollect(ctx, kollect); err != nil {
		b.Fatal(err)
	}

	viaKube := benchClientConfig(cluster.RESTConfig())
	direct := benchClientConfig(cluster.KollectRESTConfig(kollect))
	kubeDyn, err := dynamic.NewForConfig(viaKube)
	if err != nil {
		b.Fatal(err)
	}
	directDyn, err := dynamic.NewForConfig(direct)
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(viaKube)
	if err != nil {
		b.Fatal(err)
	}
	procs := []process{
		{"kollect-apiserver", kollect.Pid()},
		{"kube-apiserver", cluster.KubeAPIServer().Pid()},
		{"kollect etcd", kollectEtcd.Pid()},
		{"kube-apiserver's etcd", cluster.Etcd().Pid()},
	}
	var fleet *idleFleet
	if idleOpts.count > 0 {
		// The fleet's writes at its due rate while measured: each working
		// Inventory twice a minute, each failing one about every 90 s.
		rate := float64(idleOpts.count) * 4 / 3 / 60
		ref, err := measureReference(ctx, cs, kubeDyn, []process{procs[1], procs[3]}, idleOpts.count, rate, idleOpts.window)
		if err != nil {
			b.Fatal(err)
		}
		fleet, err = startIdleFleet(ctx, idleOpts, cs, cluster.KollectRESTConfig(kollect), procs, startFailingReceiver(b))
		if err != nil {
			b.Fatal(err)
		}
		fig, err := fleet.measure(ctx)
		if err != nil {
			b.Fatal(err)
		}
		quiet, err := fleet.unobserved(ctx)
		if err != nil {
			b.Fatal(err)
		}
		conditions, err := aggregatedConditions(cs, toolsDir, kollectBin, loadBefore, loadAverage(), fleet)
		if err != nil {
			b.Fatal(err)
		}
		fleet.print(os.Stdout, fig, quiet, ref, conditions)
		if idleOpts.only {
			return
		}
	}
	if err := createInventoryCRD(ctx, kubeDyn); err != nil {
		b.Fatal(err)
	}
	paths := []apiPath{
		{name: pathCRD, client: kubeDyn, gvr: crdInventories},
		{name: pathAggregated, client: kubeDyn, gvr: kollectInventories},
		{name: pathDirect, client: directDyn, gvr: kollectInventories},
	}
	levels := []int{1, 8, 64}
	passes, err := apiPassesFromEnv()
	if err != nil {
		b.Fatal(err)
	}
	// level names the namespaces of one pass and concurrency level.
	level := func(pass, c int) string { return fmt.Sprintf("p%d-c%d", pass+1, c) }
	var namespaces []string
	for _, p := range paths {
		namespaces = append(namespaces, p.namespace("warmup"))
		for pass := range passes {
			for _, c := range levels {
				namespaces = append(namespaces, p.namespace(level(pass, c)), p.namespace(level(pass, c)+"-exported"))
			}
		}
	}
	for _, ns := range namespaces {
		if err := createNamespace(ctx, cs, ns); err != nil {
			b.Fatal(err)
		}
	}
	bodies, err := newInventoryBodies()
	if err != nil {
		b.Fatal(err)
	}
	var sizes []string
	for _, p := range paths {
		if err := p.waitServing(ctx, bodies); err != nil {
			b.Fatal(err)
		}
		size, err := p.warmUp(ctx, bodies)
		if err != nil {
			b.Fatal(err)
		}
		sizes = append(sizes, fmt.Sprintf("%s %d B", p.name, size))
	}

	type operation struct {
		name, title string
		// suffix of the operation's namespace after the level ("c8"); ""
		// for the shared measured objects.
		suffix string
		// run measures one round: the objects (or list calls) lo..hi-1.
		run func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error)
		// calls is how many objects (or calls) the rounds share.
		calls func(c int) int
		// settle, when set, is called before a round of the first pass and
		// returns a wait, called after it, until the work the round caused
		// is done: its time and CPU count in the round's CPU, not its
		// latencies.
		settle func(ctx context.Context, p apiPath, ns string) (func(lo, hi int) error, error)
		// after runs unmeasured once a round is measured.
		after func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface) error
	}
	objects := func(n int) func(int) int { return func(int) int { return n } }
	// inRange runs op on the objects lo..hi-1.
	inRange := func(ctx context.Context, name string, c, lo, hi int, op func(ctx context.Context, i int) error) (load.Result, error) {
		return load.Run(ctx, name, c, hi-lo, func(ctx context.Context, i int) error { return op(ctx, lo+i) })
	}
	ops := []operation{
		{name: "create, exported", suffix: "-exported",
			title: fmt.Sprintf("create, exported (%d objects per path and level, not suspended: kollect's exporter acts on each; deleted after each run, unmeasured)", aggLiveObjects),
			run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
				return inRange(ctx, "create, exported", c, lo, hi, func(ctx context.Context, i int) error {
					_, err := ri.Create(ctx, bodies.object(p.gvr, "", i, false), metav1.CreateOptions{})
					return err
				})
			},
			calls: objects(aggLiveObjects),
			settle: func(ctx context.Context, p apiPath, ns string) (func(lo, hi int) error, error) {
				return watchWarned(ctx, cs, p, ns)
			},
			after: deleteAll,
		},
		{name: "create", title: fmt.Sprintf("create (%d objects per path and level, fresh namespace, suspended)", aggObjects),
			run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
				return inRange(ctx, "create", c, lo, hi, func(ctx context.Context, i int) error {
					_, err := ri.Create(ctx, bodies.object(p.gvr, "", i, true), metav1.CreateOptions{})
					return err
				})
			},
			calls: objects(aggObjects),
			after: waitControllersSaw,
		},
		// Before get and list, so that both stores hold the same objects:
		// kollect derives a status on create, a CRD's starts empty.
		{name: "update-status", title: "update-status (GET + PUT /status, full status body; latency includes the GET)", calls: objects(aggObjects), run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
			return inRange(ctx, "update-status", c, lo, hi, func(ctx context.Context, i int) error {
				return bodies.updateStatus(ctx, ri, i)
			})
		}},
		{name: "get", title: "get", calls: objects(aggObjects), run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
			return inRange(ctx, "get", c, lo, hi, func(ctx context.Context, i int) error {
				_, err := ri.Get(ctx, objName(i), metav1.GetOptions{})
				return err
			})
		}},
		{name: fmt.Sprintf("list %d", aggObjects), title: fmt.Sprintf("list of %d objects (%d calls, and at least one per client in every round)", aggObjects, aggListCalls),
			calls: func(c int) int { return max(aggListCalls, c*aggRounds) },
			run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
				return inRange(ctx, fmt.Sprintf("list %d", aggObjects), c, lo, hi, func(ctx context.Context, _ int) error {
					l, err := ri.List(ctx, metav1.ListOptions{})
					if err == nil && len(l.Items) != aggObjects {
						err = fmt.Errorf("listed %d, want %d", len(l.Items), aggObjects)
					}
					return err
				})
			}},
		{name: "watch fan-out", title: fmt.Sprintf("watch fan-out (clients = watchers on the namespace, new ones every round; %d updates by one writer; ops = events delivered, ops/s = events/s; latency from the update's response to receipt, negative clamped to 0)", aggWatchUpdates),
			calls: objects(aggWatchUpdates),
			run: func(ctx context.Context, p apiPath, ri dynamic.ResourceInterface, c, lo, hi int) (load.Result, error) {
				return watchFanOut(ctx, ri, c, lo, hi)
			}},
	}

	ops, err = opsFromEnv(ops, func(op operation) string { return op.name })
	if err != nil {
		b.Fatal(err)
	}

	// Interleaved (level, operation, round, path), the paths' order
	// rotating round by round, so that slow drift and slow moments on a
	// shared machine (compaction, the idle fleet, other work) spread over
	// the paths alike.
	// perPass[pass] holds one sample per (path, operation, level).
	// background is the idle fleet's CPU (all four processes, seconds per
	// second) as the comparison starts, with no watch on it, taken off each
	// measured round's CPU.
	var background float64
	if fleet != nil {
		if background, err = cpuRate(ctx, procs, backgroundWindow); err != nil {
			b.Fatal(err)
		}
	}
	perPass := make([][]load.Sample, passes)
	work := opWork{}
	for pass := range passes {
		for _, c := range levels {
			for _, op := range ops {
				rounds := make([][]load.Result, len(paths))
				calls := op.calls(c)
				for round := range aggRounds {
					lo, hi := calls*round/aggRounds, calls*(round+1)/aggRounds
					for k := range paths {
						n := (k + round) % len(paths)
						p := paths[n]
						ns := p.namespace(level(pass, c) + op.suffix)
						ri := p.client.Resource(p.gvr).Namespace(ns)
						// CPU is measured in the first pass only: its rounds
						// that cause work after they return wait for it.
						measureCPU := pass == 0
						settled := func(int, int) error { return nil }
						if measureCPU && op.settle != nil {
							if settled, err = op.settle(ctx, p, ns); err != nil {
								b.Fatal(err)
							}
						}
						t0 := time.Now()
						cpu0, err := totalCPU(procs)
						if err != nil {
							b.Fatal(err)
						}
						r, err := op.run(ctx, p, ri, c, lo, hi)
						if err != nil {
							b.Fatalf("pass %d, %s, %s, %d clients, round %d: %v", pass+1, op.name, p.name, c, round+1, err)
						}
						if measureCPU {
							// The work the round caused, until it is done, is the
							// round's; the clean-up after it is no one's.
							unsettled := settled(lo, hi) != nil
							cpu1, err := totalCPU(procs)
							if err != nil {
								b.Fatal(err)
							}
							work.add(p.name, op.name, c, cpu1-cpu0, background*time.Since(t0).Seconds(), r.Ops, unsettled)
						}
						if op.after != nil {
							if err := op.after(ctx, p, ri); err != nil {
								b.Fatalf("pass %d, after %s, %s, %d clients, round %d: %v", pass+1, op.name, p.name, c, round+1, err)
							}
						}
						rounds[n] = append(rounds[n], r)
					}
				}
				for n, p := range paths {
					r := load.Merge(rounds[n]...)
					fmt.Fprintf(os.Stderr, "bench: pass %d %-10s %-16s c=%-2d %5d ops %8.0f ops/s p50 %8.2fms p99 %8.2fms\n",
						pass+1, p.name, op.name, c, r.Ops, r.Throughput(), msf(r.P50), msf(r.P99))
					perPass[pass] = append(perPass[pass], load.Sample{Path: p.name, Result: r})
				}
			}
		}
		// Every pass starts from the same stored objects: the idle fleet
		// and the warm-up's.
		if pass < passes-1 {
			for _, p := range paths {
				for _, c := range levels {
					if err := deleteAll(ctx, p, p.client.Resource(p.gvr).Namespace(p.namespace(level(pass, c)))); err != nil {
						b.Fatalf("after pass %d: %v", pass+1, err)
					}
				}
			}
		}
	}
	samples := load.Pool(perPass...)
	loadAfter := loadAverage()

	conditions, err := aggregatedConditions(cs, toolsDir, kollectBin, loadBefore, loadAfter, fleet)
	if err != nil {
		b.Fatal(err)
	}
	out := os.Stdout
	fmt.Fprintf(out, "\n== kollect-apiserver through the aggregator vs a CRD of the same shape, through kube-apiserver\n   conditions: %s\n", conditions)
	fmt.Fprintf(out, "   paths: %s = inventories.bench.kollect.dev served by kube-apiserver; %s = kollect.dev inventories through kube-apiserver's aggregator; %s = kollect-apiserver directly\n",
		pathCRD, pathAggregated, pathDirect)
	fmt.Fprintf(out, "   object as served after its status update (JSON, with managedFields): %s\n", strings.Join(sizes, ", "))
	fmt.Fprintf(out, "   ratios: p99 ×%s above 1 is slower than the CRD; ops/s ×%s below 1 is less throughput\n", pathCRD, pathCRD)
	for _, op := range ops {
		var rows []load.Sample
		for _, s := range samples {
			if s.Name == op.name {
				rows = append(rows, s)
			}
		}
		load.PrintComparison(out, op.title, "", pathCRD, rows)
	}
	load.PrintRatios(out, fmt.Sprintf("summary: ratios to the CRD, latencies pooled over %d passes (goal: aggregated p99 within 1.3× of the CRD's; direct faster than the CRD)", passes),
		pathCRD, []string{pathAggregated, pathDirect}, samples)
	var opNames []string
	for _, op := range ops {
		opNames = append(opNames, op.name)
	}
	work.print(out, background, opNames, levels)
	if passes > 1 {
		load.PrintPassRatios(out, "each pass alone: aggregated p99 ×CRD (context: the spread of one pass's tail)", pathCRD, pathAggregated, perPass)
	}

	if err := cluster.Stop(); err != nil {
		b.Errorf("stopping the local cluster: %v", err)
	}
	fmt.Fprintf(out, "\n   wall time of the benchmark (tools check, cluster start, measurements, stop): %s\n", time.Since(wallStart).Round(time.Second))
}

// apiPath is one way of reaching the Inventory.
type apiPath struct {
	name   string
	client dynamic.Interface
	gvr    schema.GroupVersionResource
}

func (p apiPath) namespace(suffix string) string {
	return "bench-" + strings.ToLower(p.name) + "-" + suffix
}

// waitServing waits until a dry-run create succeeds in the warm-up
// namespace (the CRD's handler is installed, the APIService routes).
func (p apiPath) waitServing(ctx context.Context, bodies *inventoryBodies) error {
	ns := p.namespace("warmup")
	ri := p.client.Resource(p.gvr).Namespace(ns)
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, last = ri.Create(ctx, bodies.object(p.gvr, ns, 999999, true), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %s not served: %w (last: %v)", p.name, p.gvr, err, last)
	}
	return nil
}

// warmUp runs every operation a few times, unmeasured: connections,
// caches and the first requests of a fresh CRD are paid before measuring.
// It returns the size of an object as served after its status update.
func (p apiPath) warmUp(ctx context.Context, bodies *inventoryBodies) (int, error) {
	ns := p.namespace("warmup")
	ri := p.client.Resource(p.gvr).Namespace(ns)
	size := 0
	for i := range aggWarmup {
		if _, err := ri.Create(ctx, bodies.object(p.gvr, ns, i, true), metav1.CreateOptions{}); err != nil {
			return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
		}
	}
	if err := waitControllersSaw(ctx, p, ri); err != nil {
		return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
	}
	for i := range aggWarmup {
		if err := bodies.updateStatus(ctx, ri, i); err != nil {
			return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
		}
		u, err := ri.Get(ctx, objName(i), metav1.GetOptions{})
		if err != nil {
			return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
		}
		data, err := u.MarshalJSON()
		if err != nil {
			return 0, err
		}
		size = len(data)
	}
	if _, err := ri.List(ctx, metav1.ListOptions{}); err != nil {
		return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
	}
	if _, err := watchFanOut(ctx, ri, 2, 0, aggWarmup); err != nil {
		return 0, fmt.Errorf("%s warm-up: %w", p.name, err)
	}
	return size, nil
}

// apiPassesFromEnv is aggPasses, or KOLLECT_BENCH_API_PASSES.
func apiPassesFromEnv() (int, error) {
	s := os.Getenv("KOLLECT_BENCH_API_PASSES")
	if s == "" {
		return aggPasses, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("KOLLECT_BENCH_API_PASSES: %q is not a count of at least 1", s)
	}
	return n, nil
}

// opsFromEnv keeps the operations that KOLLECT_BENCH_API_OPS names
// (separated by ";", as names hold commas: "create, exported;watch
// fan-out"), in their order; all of them when it is unset. A look at one
// row takes minutes, not the whole comparison's twenty. Every operation
// after "create" works on the objects it created: name it too.
func opsFromEnv[T any](ops []T, name func(T) string) ([]T, error) {
	s := os.Getenv("KOLLECT_BENCH_API_OPS")
	if s == "" {
		return ops, nil
	}
	want := map[string]bool{}
	for _, n := range strings.Split(s, ";") {
		want[strings.TrimSpace(n)] = true
	}
	var out []T
	for _, op := range ops {
		if want[name(op)] {
			out = append(out, op)
			delete(want, name(op))
		}
	}
	if len(want) > 0 {
		var known []string
		for _, op := range ops {
			known = append(known, strconv.Quote(name(op)))
		}
		return nil, fmt.Errorf("KOLLECT_BENCH_API_OPS: unknown operations %q; known: %s", slices.Sorted(maps.Keys(want)), strings.Join(known, ", "))
	}
	return out, nil
}

// benchClientConfig lifts client-go's client-side rate limit (the
// harness' admin config has QPS 100): the servers are measured, not it.
func benchClientConfig(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.RateLimiter = nil
	cfg.UserAgent = "kollect-bench"
	// Creates of "create, exported" are warned about their missing sinks;
	// logged, those warnings filled megabytes of the benchmark's output.
	cfg.WarningHandler = rest.NoWarnings{}
	return cfg
}

func objName(i int) string { return fmt.Sprintf("inv-%05d", i) }

func objIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "inv-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil
}

// inventoryBodies are the request bodies, built once from kollect's typed
// Inventory and sent unchanged to every path.
type inventoryBodies struct {
	spec   map[string]any
	status map[string]any
}

func newInventoryBodies() (*inventoryBodies, error) {
	now := metav1.NewTime(time.Now().UTC().Truncate(time.Second))
	next := metav1.NewTime(now.Add(30 * time.Second))
	interval := &metav1.Duration{Duration: 30 * time.Second}
	spec := v1alpha1.InventorySpec{
		TargetSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/part-of": "shop"}},
		ExportMinInterval: interval,
		SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "audit"}},
		DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal", ExportMinInterval: &metav1.Duration{Duration: 5 * time.Minute}}},
		EventSinkRefs:     []v1alpha1.SinkReference{{Name: "changes"}},
	}
	entry := func(family v1alpha1.SinkFamily, name string) v1alpha1.SinkExportStatus {
		return v1alpha1.SinkExportStatus{
			Family: family, Name: name, ObservedGeneration: 1, Outcome: v1alpha1.OutcomeExported,
			Message: "exported 42 items", LastExportTime: &now, LastAttemptTime: &now,
			LastChecksum: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Cursor:       "123456", ItemCount: 42, EffectiveInterval: interval, NextDueTime: &next,
		}
	}
	cond := func(typ string, status metav1.ConditionStatus, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, ObservedGeneration: 1, LastTransitionTime: now, Reason: reason, Message: message}
	}
	// What kollect derives from these entries, so that both stores hold the
	// same object after a status update.
	status := v1alpha1.InventoryStatus{
		ObservedGeneration: 1,
		Conditions: []metav1.Condition{
			cond(v1alpha1.ConditionDegraded, metav1.ConditionFalse, v1alpha1.ReasonAsExpected, "every sink reference resolves"),
			cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonExported, "all 3 sinks hold the current inventory"),
			cond(v1alpha1.ConditionSynced, metav1.ConditionTrue, v1alpha1.ReasonExported, "all 3 sinks hold the current inventory"),
		},
		SinkExports: []v1alpha1.SinkExportStatus{
			entry(v1alpha1.SinkFamilySnapshot, "audit"),
			entry(v1alpha1.SinkFamilyDatabase, "portal"),
			entry(v1alpha1.SinkFamilyEvent, "changes"),
		},
		LastExportTime: &now,
		ItemCount:      42,
		SinksSynced:    "3/3",
	}
	specMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&spec)
	if err != nil {
		return nil, err
	}
	statusMap, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
	if err != nil {
		return nil, err
	}
	return &inventoryBodies{spec: specMap, status: statusMap}, nil
}

// object is the i-th object; suspended ones are left alone by kollect's
// exporter.
func (ib *inventoryBodies) object(gvr schema.GroupVersionResource, ns string, i int, suspended bool) *unstructured.Unstructured {
	spec := runtime.DeepCopyJSONValue(ib.spec).(map[string]any)
	if suspended {
		spec["suspend"] = true
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       "Inventory",
		"metadata":   map[string]any{"name": objName(i), "namespace": ns},
		"spec":       spec,
	}}
}

// exportFinalizer is what kollect's registry puts on every new Inventory
// (v1alpha1.ExportFinalizer); the export controller restores it if removed.
const exportFinalizer = "kollect.dev/export"

// waitControllersSaw waits, on the kollect paths, until every object of
// the namespace carries the export finalizer, so that no controller write
// can race the next measured operation (a GET + PUT would conflict, a
// watcher would count it). The registry adds it on create, so this holds
// at once unless a controller had to restore it. A CRD has no controller.
func waitControllersSaw(ctx context.Context, p apiPath, ri dynamic.ResourceInterface) error {
	if p.name == pathCRD {
		return nil
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		missing := 0
		for _, u := range l.Items {
			if !slices.Contains(u.GetFinalizers(), exportFinalizer) {
				missing++
			}
		}
		last = fmt.Sprintf("%d of %d objects without the finalizer", missing, len(l.Items))
		return missing == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s: waiting for the export controller: %w (last: %s)", p.name, err, last)
	}
	return nil
}

// watchWarned starts, on the kollect paths, a watch of the namespace's
// Events; the function it returns waits until a Warning Event about each
// of the objects lo..hi-1 (their sinks do not exist) arrived, and stops
// the watch. kollect's exporter posts them at its host client's pace,
// after the creates returned. A CRD has no controller to warn. A watch
// from the current version costs what arrives, not what the namespace
// holds.
func watchWarned(ctx context.Context, cs kubernetes.Interface, p apiPath, ns string) (func(lo, hi int) error, error) {
	if p.name == pathCRD {
		return func(int, int) error { return nil }, nil
	}
	events := cs.EventsV1().Events(ns)
	l, err := events.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	w, err := events.Watch(wctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
	if err != nil {
		cancel()
		return nil, err
	}
	return func(lo, hi int) error {
		defer cancel()
		defer w.Stop()
		warned := map[string]bool{}
		timeout := time.After(2 * time.Minute)
		for len(warned) < hi-lo {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					return fmt.Errorf("%s: the Events watch closed with %d of %d objects warned about", p.name, len(warned), hi-lo)
				}
				if e, ok := ev.Object.(*eventsv1.Event); ok && ev.Type == watch.Added && e.Type == corev1.EventTypeWarning && e.Regarding.Kind == "Inventory" {
					if i, ok := objIndex(e.Regarding.Name); ok && i >= lo && i < hi {
						warned[e.Regarding.Name] = true
					}
				}
			case <-timeout:
				return fmt.Errorf("%s: %d of %d objects warned about after 2m", p.name, len(warned), hi-lo)
			}
		}
		return nil
	}, nil
}

// deleteAll deletes the namespace's objects and waits until they are gone
// (kollect's export controller removes its finalizer first).
func deleteAll(ctx context.Context, p apiPath, ri dynamic.ResourceInterface) error {
	if err := ri.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		return fmt.Errorf("%s: deleting the objects: %w", p.name, err)
	}
	var left int
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		left = len(l.Items)
		return left == 0, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %d objects still there: %w", p.name, left, err)
	}
	return nil
}

// updateStatus is what an exporter does: GET, then PUT /status with its
// entries.
func (ib *inventoryBodies) updateStatus(ctx context.Context, ri dynamic.ResourceInterface, i int) error {
	u, err := ri.Get(ctx, objName(i), metav1.GetOptions{})
	if err != nil {
		return err
	}
	u.Object["status"] = runtime.DeepCopyJSONValue(ib.status)
	_, err = ri.UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}

// watchFanOut starts watchers watches on the namespace from its current
// resourceVersion, then patches objects lo..hi-1 (a label) one after
// the other, and measures for every watcher and update the time from the
// patch's response to the event's receipt (an event that arrives before
// the response counts 0). Elapsed runs from the first patch to the last
// event received.
func watchFanOut(ctx context.Context, ri dynamic.ResourceInterface, watchers, lo, hi int) (load.Result, error) {
	updates := hi - lo
	l, err := ri.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		return load.Result{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ws := make([]watch.Interface, 0, watchers)
	defer func() {
		for _, w := range ws {
			w.Stop()
		}
	}()
	for range watchers {
		w, err := ri.Watch(wctx, metav1.ListOptions{ResourceVersion: l.GetResourceVersion()})
		if err != nil {
			return load.Result{}, fmt.Errorf("starting watcher %d: %w", len(ws), err)
		}
		ws = append(ws, w)
	}
	recv := make([][]time.Time, watchers)
	errs := make(chan error, watchers)
	var wg sync.WaitGroup
	for n, w := range ws {
		recv[n] = make([]time.Time, updates)
		wg.Go(func() {
			got := 0
			for got < updates {
				select {
				case ev, ok := <-w.ResultChan():
					at := time.Now()
					if !ok {
						errs <- fmt.Errorf("watcher %d closed after %d of %d events", n, got, updates)
						return
					}
					switch ev.Type {
					case watch.Error:
						errs <- fmt.Errorf("watcher %d: %w", n, apierrors.FromObject(ev.Object))
						return
					case watch.Modified:
					default:
						continue
					}
					u, ok := ev.Object.(*unstructured.Unstructured)
					if !ok {
						continue
					}
					i, ok := objIndex(u.GetName())
					i -= lo
					if !ok || i < 0 || i >= updates || !recv[n][i].IsZero() {
						continue
					}
					recv[n][i] = at
					got++
				case <-wctx.Done():
					errs <- fmt.Errorf("watcher %d: %d of %d events: %w", n, got, updates, context.Cause(wctx))
					return
				}
			}
		})
	}
	responded := make([]time.Time, updates)
	begin := time.Now()
	for i := range updates {
		patch := fmt.Appendf(nil, `{"metadata":{"labels":{"bench.kollect.dev/seq":"%d"}}}`, i)
		if _, err := ri.Patch(ctx, objName(lo+i), types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			cancel()
			wg.Wait()
			return load.Result{}, fmt.Errorf("update %d: %w", i, err)
		}
		responded[i] = time.Now()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cancel()
		<-done
	}
	close(errs)
	if err := <-errs; err != nil {
		return load.Result{}, err
	}
	lat := make([]time.Duration, 0, watchers*updates)
	var last time.Time
	for n := range recv {
		for i, at := range recv[n] {
			lat = append(lat, max(at.Sub(responded[i]), 0))
			if at.After(last) {
				last = at
			}
		}
	}
	return load.FromLatencies("watch fan-out", watchers, lat, last.Sub(begin)), nil
}

func createNamespace(ctx context.Context, cs kubernetes.Interface, name string) error {
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// createInventoryCRD creates inventories.bench.kollect.dev and waits until
// it is Established.
func createInventoryCRD(ctx context.Context, dyn dynamic.Interface) error {
	crd := &unstructured.Unstructured{Object: inventoryCRD()}
	if _, err := dyn.Resource(crdsGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.GetName(), err)
	}
	var last string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(crdsGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
			if m["type"] == "NamesAccepted" && m["status"] == "False" {
				return false, fmt.Errorf("CRD names not accepted: %v", m["message"])
			}
		}
		last = "not Established yet"
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRD %s: %w (last: %s)", crd.GetName(), err, last)
	}
	return nil
}

// inventoryCRD is a CRD whose structural schema mirrors kollect's
// Inventory (pkg/apis/kollect/v1alpha1/types_export.go), as a CRD-based
// operator would declare it.
func inventoryCRD() map[string]any {
	str := func() map[string]any { return map[string]any{"type": "string"} }
	enum := func(values ...any) map[string]any { return map[string]any{"type": "string", "enum": values} }
	dateTime := func() map[string]any { return map[string]any{"type": "string", "format": "date-time"} }
	integer := func(format string) map[string]any {
		return map[string]any{"type": "integer", "format": format, "minimum": int64(0)}
	}
	object := func(props map[string]any, required ...any) map[string]any {
		o := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			o["required"] = required
		}
		return o
	}
	listMap := func(item map[string]any, keys ...any) map[string]any {
		return map[string]any{
			"type": "array", "items": item, "maxItems": int64(20),
			"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys,
		}
	}
	sinkRef := object(map[string]any{
		"name":              str(),
		"namespace":         str(),
		"exportMinInterval": str(),
	}, "name")
	condition := object(map[string]any{
		"type":               map[string]any{"type": "string", "maxLength": int64(316)},
		"status":             enum("True", "False", "Unknown"),
		"observedGeneration": integer("int64"),
		"lastTransitionTime": dateTime(),
		"reason":             map[string]any{"type": "string", "maxLength": int64(1024), "minLength": int64(1)},
		"message":            map[string]any{"type": "string", "maxLength": int64(32768)},
	}, "type", "status", "lastTransitionTime", "reason", "message")
	conditions := listMap(condition, "type")
	delete(conditions, "maxItems")
	sinkExport := object(map[string]any{
		"family":              enum("Snapshot", "Database", "Event"),
		"name":                str(),
		"namespace":           str(),
		"observedGeneration":  integer("int64"),
		"outcome":             enum("Exported", "Debounced", "Failed"),
		"reason":              str(),
		"message":             str(),
		"lastExportTime":      dateTime(),
		"lastAttemptTime":     dateTime(),
		"lastChecksum":        str(),
		"cursor":              str(),
		"itemCount":           integer("int64"),
		"effectiveInterval":   str(),
		"nextDueTime":         dateTime(),
		"consecutiveFailures": integer("int32"),
	}, "family", "name")
	schemaRoot := object(map[string]any{
		"apiVersion": str(),
		"kind":       str(),
		"metadata":   map[string]any{"type": "object"},
		"spec": object(map[string]any{
			"targetSelector":    map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
			"exportMinInterval": str(),
			"snapshotSinkRefs":  listMap(sinkRef, "name"),
			"databaseSinkRefs":  listMap(sinkRef, "name"),
			"eventSinkRefs":     listMap(sinkRef, "name"),
			"suspend":           map[string]any{"type": "boolean"},
		}),
		"status": object(map[string]any{
			"observedGeneration": integer("int64"),
			"conditions":         conditions,
			"sinkExports":        listMap(sinkExport, "family", "name"),
			"lastExportTime":     dateTime(),
			"itemCount":          integer("int64"),
			"sinksSynced":        str(),
		}),
	}, "spec")
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": crdInventories.Resource + "." + crdInventories.Group},
		"spec": map[string]any{
			"group": crdInventories.Group,
			"scope": "Namespaced",
			"names": map[string]any{
				"plural": "inventories", "singular": "inventory", "kind": "Inventory", "listKind": "InventoryList",
			},
			"versions": []any{map[string]any{
				"name":         crdInventories.Version,
				"served":       true,
				"storage":      true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema":       map[string]any{"openAPIV3Schema": schemaRoot},
			}},
		},
	}
}

// aggregatedConditions describes the run: the machine (load.Conditions),
// the versions of the servers and their stores, the load average.
func aggregatedConditions(cs kubernetes.Interface, toolsDir, kollectBin, loadBefore, loadAfter string, fleet *idleFleet) (string, error) {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return load.Conditions(
		fmt.Sprintf("kube-apiserver=k8s.io/kubernetes@%s (reports %s)", moduleVersion(filepath.Join(toolsDir, "kube-apiserver"), "k8s.io/kubernetes"), v.GitVersion),
		fmt.Sprintf("etcd=%s, one single-member process per API server (same binary and flags), fsync on (no --unsafe-no-fsync)", moduleVersion(filepath.Join(toolsDir, "etcd"), "go.etcd.io/etcd/server/v3")),
		fmt.Sprintf("kollect-apiserver=%s", moduleVersion(kollectBin, "kollect.dev/kollect")),
		"kollect controllers=on (this replica leads)",
		"background="+idleConditions(fleet),
		"kube-controller-manager=off",
		"transport=HTTPS on 127.0.0.1, one dynamic client (JSON, one HTTP/2 connection) per server, client-side rate limit off",
		"identity=admin client certificate (system:masters)",
		fmt.Sprintf("loadavg(before)=%s", loadBefore),
		fmt.Sprintf("loadavg(after)=%s", loadAfter),
	), nil
}

// moduleVersion is the version of module mod built into binary (its main
// module or a dependency), "?" when unknown.
func moduleVersion(binary, mod string) string {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return "?"
	}
	if info.Main.Path == mod {
		return info.Main.Version
	}
	for _, d := range info.Deps {
		if d.Path == mod {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "?"
}

// loadAverage is the 1, 5 and 15 minute load average from /proc/loadavg,
// "?" elsewhere.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], "/")
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
