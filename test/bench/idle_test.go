package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/test/bench/load"
)

// The idle fleet (issue 11, acceptance point 5): Inventories at rest, half
// exporting to a working file sink with nothing new, half referencing a
// webhook that answers 500, spread over namespaces under the default
// quotas. BenchmarkAggregatedVsCRD builds it, measures it at rest, and
// keeps it present while it measures the API.
const (
	idleLabel        = "bench.kollect.dev/idle" // "working" or "failing", on each Inventory
	idlePerNamespace = 50                       // half the default quota of 100 Inventories per namespace
	idleConfigMaps   = 10                       // collected in each namespace, never changed
	idleFileSink     = "files"
	idleFailingSink  = "down"
	classWorking     = "working"
	classFailing     = "failing"
)

// Assumptions of the due rate, from the exporter's documented behaviour
// (pkg/controllers/export): an unchanged payload is re-exported, and its
// status entry written, once per effective interval, or once per watchdog
// period with 0s; a failing sink is retried, and its entry written, after
// an exponential backoff min(backoffMax, backoffMin·2^(failures-1)) with
// jitter drawn from [½, 1] of it (mean ¾).
const (
	defaultWatchdog  = 30 * time.Second
	backoffMin       = time.Second
	backoffMax       = 5 * time.Minute
	backoffJitterMin = 0.5
	// dueDraws is how many jitter draws the expected count of a failing
	// entry's attempts averages.
	dueDraws = 200
)

// idleOptions size the idle fleet; KOLLECT_BENCH_IDLE_INVENTORIES (default
// 1000; 0 runs the API comparison without it), KOLLECT_BENCH_IDLE_SETTLE
// (default 1m: how long the fleet rests, once every Inventory reports its
// first outcome, before measuring) and KOLLECT_BENCH_IDLE_WINDOW (default
// 2m: each of two measured windows, one with a watch counting the writes
// by class, then one without, for the CPU goal);
// KOLLECT_BENCH_IDLE_ONLY=1 stops the benchmark after the fleet's table. With KOLLECT_BENCH_PPROF=dir, a CPU profile
// of kollect-apiserver over the window's first half goes to
// dir/cpu-idle.pprof.
type idleOptions struct {
	count          int
	settle, window time.Duration
	only           bool
}

func idleOptionsFromEnv() (idleOptions, error) {
	o := idleOptions{count: 1000, settle: time.Minute, window: 2 * time.Minute, only: os.Getenv("KOLLECT_BENCH_IDLE_ONLY") == "1"}
	if s := os.Getenv("KOLLECT_BENCH_IDLE_INVENTORIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return o, fmt.Errorf("KOLLECT_BENCH_IDLE_INVENTORIES: %q is not a count", s)
		}
		o.count = n
	}
	for name, d := range map[string]*time.Duration{"KOLLECT_BENCH_IDLE_SETTLE": &o.settle, "KOLLECT_BENCH_IDLE_WINDOW": &o.window} {
		if s := os.Getenv(name); s != "" {
			v, err := time.ParseDuration(s)
			if err != nil || v < 0 || (name == "KOLLECT_BENCH_IDLE_WINDOW" && v < 10*time.Second) {
				return o, fmt.Errorf("%s: %q is not a duration (window at least 10s)", name, s)
			}
			*d = v
		}
	}
	return o, nil
}

// process is a server whose CPU time is read from /proc.
type process struct {
	name string
	pid  int
}

// idleFleet is the running fleet.
type idleFleet struct {
	opts    idleOptions
	kube    kubernetes.Interface
	client  versioned.Interface // kollect-apiserver directly
	direct  *rest.Config
	procs   []process // kollect-apiserver first
	failing *failingReceiver

	namespaces []string
	create     load.Result   // creating the Inventories
	firstPass  time.Duration // from the first Inventory created to every one reporting an outcome
}

// startIdleFleet creates the fleet and waits until every Inventory has
// reported its first outcome (working: Exported with every item; failing:
// Failed), then rests opts.settle.
func startIdleFleet(ctx context.Context, opts idleOptions, kube kubernetes.Interface, direct *rest.Config, procs []process, failing *failingReceiver) (*idleFleet, error) {
	client, err := versioned.NewForConfig(benchClientConfig(direct))
	if err != nil {
		return nil, err
	}
	f := &idleFleet{opts: opts, kube: kube, client: client, direct: direct, procs: procs, failing: failing}
	api := client.KollectV1alpha1()
	for i := range (opts.count + idlePerNamespace - 1) / idlePerNamespace {
		ns := fmt.Sprintf("bench-idle-%02d", i)
		f.namespaces = append(f.namespaces, ns)
		if err := createNamespace(ctx, kube, ns); err != nil {
			return nil, err
		}
		for j := range idleConfigMaps {
			if _, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%02d", j), Labels: map[string]string{"bench": "idle"}},
				Data:       map[string]string{"value": "v0"},
			}, metav1.CreateOptions{}); err != nil {
				return nil, err
			}
		}
		if _, err := api.Profiles(ns).Create(ctx, &v1alpha1.Profile{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
			Spec: v1alpha1.ProfileSpec{
				TargetGVK:  v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				Attributes: []v1alpha1.Attribute{{Name: "value", Path: "{.data.value}"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if _, err := api.Targets(ns).Create(ctx, &v1alpha1.Target{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
			Spec: v1alpha1.TargetSpec{
				ProfileRef:    v1alpha1.LocalObjectReference{Name: "configmaps"},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "idle"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if _, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: idleFileSink},
			Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///idle"},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if _, err := api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
			ObjectMeta: metav1.ObjectMeta{Name: idleFailingSink},
			Spec:       v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: failing.srv.URL + "/events"},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	// Every Target holds its items before the Inventories exist, so that a
	// working Inventory's first export is its complete one.
	if err := f.waitItems(ctx); err != nil {
		return nil, err
	}
	begin := time.Now()
	f.create, err = load.Run(ctx, fmt.Sprintf("create %d Inventories (idle fleet)", opts.count), 8, opts.count, func(ctx context.Context, i int) error {
		_, err := api.Inventories(f.namespaces[i/idlePerNamespace]).Create(ctx, idleInventory(i), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := f.waitFirstPass(ctx); err != nil {
		return nil, err
	}
	f.firstPass = time.Since(begin)
	fmt.Fprintf(os.Stderr, "bench: idle fleet of %d Inventories reported in %s; resting %s\n", opts.count, f.firstPass.Round(time.Second), opts.settle)
	select {
	case <-time.After(opts.settle):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f, nil
}

// idleInventory is the fleet's i-th Inventory: even ones export to the
// file sink, odd ones to the failing webhook. Neither sets an interval:
// the default (30s) is what most Inventories run with.
func idleInventory(i int) *v1alpha1.Inventory {
	inv := &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inv-%04d", i)}}
	if i%2 == 0 {
		inv.Labels = map[string]string{idleLabel: classWorking}
		inv.Spec.SnapshotSinkRefs = []v1alpha1.SinkReference{{Name: idleFileSink}}
	} else {
		inv.Labels = map[string]string{idleLabel: classFailing}
		inv.Spec.EventSinkRefs = []v1alpha1.SinkReference{{Name: idleFailingSink}}
	}
	return inv
}

func (f *idleFleet) waitItems(ctx context.Context) error {
	want := len(f.namespaces) * idleConfigMaps
	var got int
	for {
		got = 0
		for _, ns := range f.namespaces {
			l, err := f.client.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			got += len(l.Items)
		}
		if got >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("idle fleet: %d of %d items collected: %w", got, want, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// waitFirstPass waits until every working Inventory's entry says Exported
// (or Debounced) with all its items and every failing one's says Failed.
func (f *idleFleet) waitFirstPass(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var last string
	for {
		l, err := f.client.KollectV1alpha1().Inventories("").List(ctx, metav1.ListOptions{LabelSelector: idleLabel})
		if err == nil {
			pending := 0
			for i := range l.Items {
				if why := idlePending(&l.Items[i]); why != "" {
					pending++
					last = why
				}
			}
			if pending == 0 && len(l.Items) == f.opts.count {
				return nil
			}
			last = fmt.Sprintf("%d of %d pending, e.g. %s", pending, len(l.Items), last)
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("idle fleet never settled: %s", last)
		case <-time.After(2 * time.Second):
		}
	}
}

// idlePending says why an Inventory has not reported its first outcome.
func idlePending(inv *v1alpha1.Inventory) string {
	if len(inv.Status.SinkExports) != 1 {
		return fmt.Sprintf("%s/%s: %d entries", inv.Namespace, inv.Name, len(inv.Status.SinkExports))
	}
	e := inv.Status.SinkExports[0]
	switch inv.Labels[idleLabel] {
	case classWorking:
		if (e.Outcome == v1alpha1.OutcomeExported || e.Outcome == v1alpha1.OutcomeDebounced) && e.ItemCount == idleConfigMaps {
			return ""
		}
	case classFailing:
		if e.Outcome == v1alpha1.OutcomeFailed {
			return ""
		}
	}
	return fmt.Sprintf("%s/%s: %s %s, %d items: %s", inv.Namespace, inv.Name, e.Outcome, e.Reason, e.ItemCount, e.Message)
}

// idleFigures is what one window measured.
type idleFigures struct {
	window time.Duration
	// cpu is the CPU time each process used over the window, by name.
	cpu map[string]float64
	// writes are the status writes seen (watch MODIFIED events) and due,
	// by class.
	writes, due map[string]float64
	// requests are the exporters' Inventory status entry writes, no-op
	// writes included.
	requests float64
	// perSecond counts the status writes seen in each second of the
	// window: how evenly the fleet's due writes spread over time.
	perSecond []int
	// inventories by class.
	inventories      map[string]int
	receiverRequests int64
}

// unobserved measures the fleet at rest for opts.window with no counting
// watch, which no user at rest runs: the CPU goal is read here. (A profile
// put about 6 % of kollect's idle CPU in serving that watch; measured
// side by side, its CPU per write is the same with and without it, 4.41
// and 4.43 ms.) Writes come from the server's own counter.
func (f *idleFleet) unobserved(ctx context.Context) (*idleFigures, error) {
	fig := &idleFigures{window: f.opts.window, cpu: map[string]float64{}}
	m, err := f.startMeter(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	select {
	case <-time.After(f.opts.window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fig.window = time.Since(start)
	return fig, m.read(ctx, fig)
}

// meter reads the processes' CPU and the server's status entry writes
// from its start.
type meter struct {
	f       *idleFleet
	cpu     map[string]float64
	metrics string
}

func (f *idleFleet) startMeter(ctx context.Context) (*meter, error) {
	metrics, err := serverMetrics(ctx, f.direct)
	if err != nil {
		return nil, err
	}
	cpu, err := cpuTimes(f.procs)
	if err != nil {
		return nil, err
	}
	return &meter{f: f, cpu: cpu, metrics: metrics}, nil
}

// read puts into fig what was used since the meter started.
func (m *meter) read(ctx context.Context, fig *idleFigures) error {
	cpu, err := cpuTimes(m.f.procs)
	if err != nil {
		return err
	}
	for name, c := range cpu {
		fig.cpu[name] = c - m.cpu[name]
	}
	metrics, err := serverMetrics(ctx, m.f.direct)
	if err != nil {
		return err
	}
	fig.requests = inventoryStatusWrites(metrics) - inventoryStatusWrites(m.metrics)
	return nil
}

// measure watches the fleet at rest for opts.window.
func (f *idleFleet) measure(ctx context.Context) (*idleFigures, error) {
	fig := &idleFigures{window: f.opts.window, cpu: map[string]float64{}, writes: map[string]float64{},
		due: map[string]float64{}, inventories: map[string]int{}}
	l, err := f.client.KollectV1alpha1().Inventories("").List(ctx, metav1.ListOptions{LabelSelector: idleLabel})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := f.client.KollectV1alpha1().Inventories("").Watch(wctx, metav1.ListOptions{LabelSelector: idleLabel, ResourceVersion: l.ResourceVersion})
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	m, err := f.startMeter(ctx)
	if err != nil {
		return nil, err
	}
	recv0 := f.failing.requests.Load()
	profiled := make(chan struct{})
	if dir := os.Getenv("KOLLECT_BENCH_PPROF"); dir != "" {
		// A CPU profile of the window's first half: where the idle CPU goes.
		go func() {
			defer close(profiled)
			cs, err := kubernetes.NewForConfig(f.direct)
			if err != nil {
				return
			}
			secs := strconv.Itoa(max(int(f.opts.window.Seconds())/2, 1))
			body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", secs).Timeout(f.opts.window).DoRaw(ctx)
			if err == nil {
				_ = os.WriteFile(filepath.Join(dir, "cpu-idle.pprof"), body, 0o644)
			}
		}()
	} else {
		close(profiled)
	}
	start := time.Now()
	end := start.Add(f.opts.window)
	for i := range l.Items {
		inv := &l.Items[i]
		class := inv.Labels[idleLabel]
		fig.inventories[class]++
		for _, e := range inv.Status.SinkExports {
			fig.due[class] += dueWrites(e, start, end)
		}
	}
	fig.perSecond = make([]int, max(int(f.opts.window/time.Second), 1))
	timer := time.NewTimer(f.opts.window)
	defer timer.Stop()
collect:
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("idle fleet: the watch closed after %s", time.Since(start).Round(time.Second))
			}
			if ev.Type == watch.Error {
				return nil, fmt.Errorf("idle fleet: watch error: %v", ev.Object)
			}
			if inv, ok := ev.Object.(*v1alpha1.Inventory); ok && ev.Type == watch.Modified {
				fig.writes[inv.Labels[idleLabel]]++
				fig.perSecond[min(int(time.Since(start)/time.Second), len(fig.perSecond)-1)]++
			}
		case <-timer.C:
			break collect
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	<-profiled
	if err := m.read(ctx, fig); err != nil {
		return nil, err
	}
	fig.receiverRequests = f.failing.requests.Load() - recv0
	fig.window = elapsed
	return fig, nil
}

// cpuTimes is the CPU time each process has used, by name, in seconds.
func cpuTimes(procs []process) (map[string]float64, error) {
	times := map[string]float64{}
	for _, p := range procs {
		c, err := cpuSeconds(p.pid)
		if err != nil {
			return nil, err
		}
		times[p.name] = c
	}
	return times, nil
}

// dueWrites is how many status writes an entry is due in [start, end):
// one per interval for an exporting entry (one per watchdog period with
// 0s), one per backoff step for a failing one, from its last attempt on.
func dueWrites(e v1alpha1.SinkExportStatus, start, end time.Time) float64 {
	window := end.Sub(start)
	if e.Outcome == v1alpha1.OutcomeFailed {
		if e.LastAttemptTime == nil {
			return 0
		}
		// The expected number of attempts: each backoff step's jitter is
		// drawn anew, and when steps straddle the window's end, the mean
		// step is not the mean count. Averaged over seeded draws.
		rng := rand.New(rand.NewPCG(uint64(e.LastAttemptTime.UnixNano()), uint64(e.ConsecutiveFailures)))
		var n float64
		for range dueDraws {
			at := e.LastAttemptTime.Time
			for failures := max(int(e.ConsecutiveFailures), 1); ; failures++ {
				step := min(backoffMax, backoffMin<<min(failures-1, 16))
				at = at.Add(time.Duration((backoffJitterMin + (1-backoffJitterMin)*rng.Float64()) * float64(step)))
				// An attempt due before the window that has not happened
				// yet (the entry still shows the previous one) happens in it.
				if at.Before(start) {
					at = start
				}
				if !at.Before(end) {
					break
				}
				n++
			}
		}
		return n / dueDraws
	}
	interval := defaultWatchdog
	if e.EffectiveInterval != nil && e.EffectiveInterval.Duration > 0 {
		interval = e.EffectiveInterval.Duration
	}
	return window.Seconds() / interval.Seconds()
}

// print writes the fleet's table.
func (f *idleFleet) print(w io.Writer, fig, quiet *idleFigures, ref *referenceFigures, conditions string) {
	perMin := func(v float64) float64 { return v / fig.window.Minutes() }
	pct := func(name string) float64 { return 100 * fig.cpu[name] / fig.window.Seconds() }
	nWorking, nFailing := fig.inventories[classWorking], fig.inventories[classFailing]
	total := nWorking + nFailing
	allWrites, allDue := fig.writes[classWorking]+fig.writes[classFailing], fig.due[classWorking]+fig.due[classFailing]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fmt.Fprintf(w, "\n== idle control loop: %d Inventories at rest, controllers on (issue 11, point 5)\n", total)
	fmt.Fprintf(w, "   conditions: %s\n", conditions)
	fmt.Fprintf(w, "   fleet: %d namespaces of %d Inventories, %d ConfigMaps collected in each (never changed); %d Inventories → the namespace's file SnapshotSink, %d → its webhook EventSink answering 500 (plain HTTP on 127.0.0.1; %d deliveries refused in the window); no interval set (default 30s), watchdog %s\n",
		len(f.namespaces), idlePerNamespace, idleConfigMaps, nWorking, nFailing, fig.receiverRequests, defaultWatchdog)
	fmt.Fprintf(w, "   created at %.0f/s (p99 %.0fms); every Inventory reported its first outcome %s after the first create; rested %s; measured over %s\n",
		f.create.Throughput(), msf(f.create.P99), f.firstPass.Round(time.Second), f.opts.settle, fig.window.Round(time.Second))
	fmt.Fprintf(w, "   due: working entries one write per effective interval; failing ones one per backoff step, min(%s, %s·2^(failures-1)) × a jitter uniform in [%.2f, 1], from their last attempt (expected count over %d draws)\n",
		backoffMax, backoffMin, backoffJitterMin, dueDraws)
	fmt.Fprintf(w, "   stock reference, measured before the fleet existed: kube-apiserver serving a CRD of the same Inventory shape, %d objects, all in the working Inventory's shape, their status written by a client at %.0f/min (the fleet's nominal due rate, asked; %.0f/min seen by one counting watch, %d refused) over %s, each write changing one entry's times as a due re-export does, evenly paced\n",
		f.opts.count, 60*ref.rate, ref.writes/ref.window.Minutes(), ref.failed, ref.window.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmeasured\tgoal\tmeasured/goal\t")
	quietPct := 100 * quiet.cpu["kollect-apiserver"] / quiet.window.Seconds()
	fmt.Fprintf(tw, "kollect-apiserver CPU, %% of one core (the next %s, no counting watch)\t%.2f %%\t≤ 5 %%\t%s\t\n", quiet.window.Round(time.Second), quietPct, ratio(quietPct, 5))
	fmt.Fprintf(tw, "  status entry writes/min over it (kollect_export_status_entry_writes_total; context)\t%.0f\t\t\t\n", quiet.requests/quiet.window.Minutes())
	if quiet.requests > 0 {
		fmt.Fprintf(tw, "  per status entry write (context)\t%.2f ms\t\t\t\n", 1000*quiet.cpu["kollect-apiserver"]/quiet.requests)
	}
	fmt.Fprintf(tw, "kollect-apiserver CPU while the bench's watch counts the writes below (context)\t%.2f %%\t\t\t\n", pct("kollect-apiserver"))
	if allWrites > 0 {
		// Comparable across machines and runs where the percentage is not:
		// nearly all of the fleet's work follows from these writes.
		fmt.Fprintf(tw, "  per status write (context)\t%.2f ms\t\t\t\n", 1000*fig.cpu["kollect-apiserver"]/allWrites)
	}
	refCPU := ref.cpu["kube-apiserver"]
	fmt.Fprintf(tw, "stock reference: kube-apiserver CPU serving the fleet's nominal rate of writes to a CRD (context)\t%.2f %%\t\t\t\n", 100*refCPU/ref.window.Seconds())
	fmt.Fprintf(tw, "  of which at rest (its CPU over %s before the writes)\t%.2f %%\t\t\t\n", referenceRest, 100*ref.rest["kube-apiserver"])
	perRef, refOK := ref.perWrite("kube-apiserver")
	if refOK {
		fmt.Fprintf(tw, "  per status write, less its rest (context)\t%.2f ms\t\t\t\n", 1000*perRef)
	} else {
		fmt.Fprintf(tw, "  per status write, less its rest (context)\t- (no writes, or its rest is over half its CPU)\t\t\t\n")
	}
	if refOK && allWrites > 0 {
		perKollect := fig.cpu["kollect-apiserver"] / allWrites
		fmt.Fprintf(tw, "kollect-apiserver per status write ÷ the reference's (context: kollect's includes its rest, no-op writes and exporters; the reference's leaves out its rest and its client)\t%.2f\t\t\t\n", perKollect/perRef)
	}
	if perEtcd, ok := ref.perWrite("kube-apiserver's etcd"); ok && allWrites > 0 {
		perKollect := fig.cpu["kollect etcd"] / allWrites
		fmt.Fprintf(tw, "etcd CPU per status write, kollect's (all of it) and the reference's (less its rest) (context)\t%.2f and %.2f ms\t\t\t\n", 1000*perKollect, 1000*perEtcd)
	}
	fmt.Fprintf(tw, "Inventory status writes/min, all (watch events)\t%.0f\t≤ due %.0f\t%s\t\n", perMin(allWrites), perMin(allDue), ratio(allWrites, allDue))
	fmt.Fprintf(tw, "  working (file sink)\t%.0f\t≤ due %.0f\t%s\t\n", perMin(fig.writes[classWorking]), perMin(fig.due[classWorking]), ratio(fig.writes[classWorking], fig.due[classWorking]))
	fmt.Fprintf(tw, "  failing (webhook 500)\t%.0f\t≤ due %.0f\t%s\t\n", perMin(fig.writes[classFailing]), perMin(fig.due[classFailing]), ratio(fig.writes[classFailing], fig.due[classFailing]))
	if total > 0 {
		fmt.Fprintf(tw, "status writes/min per idle Inventory\t%.2f\t≤ due %.2f\t%s\t\n", perMin(allWrites)/float64(total), perMin(allDue)/float64(total), ratio(allWrites, allDue))
	}
	if nWorking > 0 {
		fmt.Fprintf(tw, "  per working Inventory\t%.2f\t≤ due %.2f\t\t\n", perMin(fig.writes[classWorking])/float64(nWorking), perMin(fig.due[classWorking])/float64(nWorking))
	}
	if nFailing > 0 {
		fmt.Fprintf(tw, "  per failing Inventory\t%.2f\t≤ due %.2f\t\t\n", perMin(fig.writes[classFailing])/float64(nFailing), perMin(fig.due[classFailing])/float64(nFailing))
	}
	fmt.Fprintf(tw, "status entry writes/min (kollect_export_status_entry_writes_total; no-op writes too)\t%.0f\t≤ due %.0f\t%s\t\n", perMin(fig.requests), perMin(allDue), ratio(fig.requests, allDue))
	busiest, p90, idle := spread(fig.perSecond)
	fmt.Fprintf(tw, "status writes in the busiest second of the window (context: the mean is %.1f/s)\t%d\t\t\t\n", allWrites/fig.window.Seconds(), busiest)
	fmt.Fprintf(tw, "  in the 90th-percentile second; seconds with none\t%d; %d of %d\t\t\t\n", p90, idle, len(fig.perSecond))
	for _, p := range f.procs[1:] {
		fmt.Fprintf(tw, "%s CPU, %% of one core (context)\t%.2f %%\t\t\t\n", p.name, pct(p.name))
	}
	tw.Flush()
}

// spread summarizes writes per second: the busiest second, the 90th
// percentile second and how many seconds saw none. Exporters created
// together and re-exporting on the same period write in bursts.
func spread(perSecond []int) (busiest, p90, none int) {
	sorted := slices.Sorted(slices.Values(perSecond))
	if len(sorted) == 0 {
		return 0, 0, 0
	}
	for _, n := range sorted {
		if n == 0 {
			none++
		}
	}
	return sorted[len(sorted)-1], sorted[len(sorted)*9/10], none
}

// idleConditions names the fleet in the API comparison's conditions.
func idleConditions(f *idleFleet) string {
	if f == nil {
		return "no other Inventories"
	}
	return fmt.Sprintf("%d idle Inventories present in %d namespaces bench-idle-* (half exporting to a file sink, half failing on a webhook answering 500)",
		f.opts.count, len(f.namespaces))
}
