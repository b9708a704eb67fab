package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/bench/load"
	"kollect.dev/kollect/test/collectenv"
)

// BenchmarkCollection measures collection (issue 4) through the real
// kube-apiserver with kollect-apiserver on its own etcd, fsync on:
//
//   - initial sync: N ConfigMaps exist, then a Target selecting them is
//     created; the time until the collector holds N items (items/s), the
//     peak RSS of kollect-apiserver and the size of its etcd database;
//   - change-to-item latency: 50 ConfigMap updates per second for 20 s on
//     the largest set, from the update request to the item's MODIFIED
//     event on a watch;
//   - the raw etcd write rate of the same etcd in the same run (1 KiB puts,
//     as many clients as collector workers): the physical limit.
//
// Goals of issue 4 to report against: 100,000 items in 60 s or less, RSS at
// most 1 GiB, change latency p99 at most 500 ms. Nothing is asserted.
// KOLLECT_BENCH_SIZES (comma-separated, default 10000,100000) picks the
// sizes; KOLLECT_BENCH_PPROF names a directory for heap and allocation
// profiles of kollect-apiserver taken after each initial sync, and a CPU
// profile of its first 30 seconds.
func BenchmarkCollection(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if s := os.Getenv("KOLLECT_BENCH_SIZES"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				b.Fatalf("KOLLECT_BENCH_SIZES: %q", s)
			}
			sizes = append(sizes, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	env, err := collectenv.Start(ctx, collectenv.Options{Log: os.Stderr})
	if err != nil {
		b.Fatal(err)
	}
	failed := true
	defer func() { _ = env.Stop(failed) }()
	kube := env.Kube

	var results []load.Result
	var syncs []syncFigures
	record := func(r load.Result, err error) load.Result {
		if err != nil {
			b.Fatal(err)
		}
		results = append(results, r)
		return r
	}
	record(rawEtcdWrites(ctx, env.Etcd.URL()))

	total := 0
	var lastNS string
	for _, n := range sizes {
		ns := fmt.Sprintf("bench-collect-%d", n)
		lastNS = ns
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		record(load.Run(ctx, fmt.Sprintf("create %d ConfigMaps (kube-apiserver)", n), 64, n, func(ctx context.Context, i int) error {
			_, err := kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%06d", i), Labels: map[string]string{"bench": "collect"}},
				Data:       map[string]string{"value": "v0", "payload": strings.Repeat("x", 200)},
			}, metav1.CreateOptions{})
			return err
		}))
		if _, err := env.Client.KollectV1alpha1().Profiles(ns).Create(ctx, &v1alpha1.Profile{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
			Spec: v1alpha1.ProfileSpec{
				TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
				Attributes: []v1alpha1.Attribute{
					{Name: "value", Path: "{.data.value}"},
					{Name: "name", Path: "cel:object.metadata.name"},
				},
			},
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		cpuProfiled := make(chan struct{})
		if dir := os.Getenv("KOLLECT_BENCH_PPROF"); dir != "" {
			go func() {
				defer close(cpuProfiled)
				cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Kollect))
				if err != nil {
					return
				}
				body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "30").Timeout(time.Minute).DoRaw(ctx)
				if err == nil {
					_ = os.WriteFile(fmt.Sprintf("%s/cpu-%d.pprof", dir, n), body, 0o644)
				}
			}()
		} else {
			close(cpuProfiled)
		}
		if _, err := env.Client.KollectV1alpha1().Targets(ns).Create(ctx, &v1alpha1.Target{
			ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: ns},
			Spec: v1alpha1.TargetSpec{
				ProfileRef:    v1alpha1.LocalObjectReference{Name: "configmaps"},
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "collect"}},
			},
		}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		total += n
		for {
			m, err := metricsOf(ctx, env)
			if err == nil && metric(m, `kollect_items{kind="InventoryItem"}`) >= float64(total) {
				break
			}
			select {
			case <-ctx.Done():
				b.Fatalf("initial sync of %d: not done before the deadline", n)
			case <-time.After(100 * time.Millisecond):
			}
		}
		elapsed := time.Since(start)
		<-cpuProfiled
		f := syncFigures{n: n, elapsed: elapsed, rss: peakRSS(env.Kollect.Pid())}
		if m, err := etcdMetrics(ctx, env.Etcd.URL()); err == nil {
			f.dbSize = metric(m, "etcd_mvcc_db_total_size_in_bytes")
		}
		syncs = append(syncs, f)
		if dir := os.Getenv("KOLLECT_BENCH_PPROF"); dir != "" {
			if cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Kollect)); err == nil {
				for _, prof := range []string{"heap", "allocs"} {
					if body, err := cs.Discovery().RESTClient().Get().AbsPath("/debug/pprof/" + prof).DoRaw(ctx); err == nil {
						_ = os.WriteFile(fmt.Sprintf("%s/%s-%d.pprof", dir, prof, n), body, 0o644)
					}
				}
			}
		}
		results = append(results, load.Result{Name: fmt.Sprintf("initial sync %d items", n), Concurrency: 1, Ops: n, Elapsed: elapsed})
	}

	lat, err := changeLatency(ctx, env, lastNS, sizes[len(sizes)-1])
	if err != nil {
		b.Fatal(err)
	}
	results = append(results, lat)

	conditions := load.Conditions("kollect-apiserver and kube-apiserver on 127.0.0.1", "etcd fsync on", "kollect etcd: external single member")
	load.PrintTable(os.Stdout, "collection (issue 4): raw etcd writes, object creation, initial sync, change-to-item latency at 50 updates/s", conditions, results)
	fmt.Printf("\n== collection: initial sync (goals: 100,000 items in <= 60s, RSS <= 1 GiB, change p99 <= 500ms)\n")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "items\ttime\titems/s\tkollect-apiserver peak RSS\tkollect etcd db size\t")
	for _, f := range syncs {
		fmt.Fprintf(tw, "%d\t%.1fs\t%.0f\t%.0f MiB\t%.0f MiB\t\n", f.n, f.elapsed.Seconds(), float64(f.n)/f.elapsed.Seconds(), float64(f.rss)/(1<<20), f.dbSize/(1<<20))
	}
	tw.Flush()
	failed = false
}

type syncFigures struct {
	n       int
	elapsed time.Duration
	rss     int64
	dbSize  float64
}

// rawEtcdWrites is the write rate of kollect's etcd itself: 1 KiB puts from
// as many clients as the collector has workers.
func rawEtcdWrites(ctx context.Context, endpoint string) (load.Result, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return load.Result{}, err
	}
	defer cli.Close()
	value := strings.Repeat("x", 1024)
	r, err := load.Run(ctx, "raw etcd put 1KiB (physical limit)", 8, 10_000, func(ctx context.Context, i int) error {
		_, err := cli.Put(ctx, fmt.Sprintf("/bench/raw/%06d", i), value)
		return err
	})
	_, _ = cli.Delete(ctx, "/bench/raw/", clientv3.WithPrefix())
	return r, err
}

// changeLatency updates 50 ConfigMaps a second for 20 s and measures, for
// each, the time from the update request to the MODIFIED event of its item.
func changeLatency(ctx context.Context, env *collectenv.Env, ns string, n int) (load.Result, error) {
	items := env.Client.KollectV1alpha1().InventoryItems(ns)
	list, err := items.List(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=configmaps", Limit: 1})
	if err != nil {
		return load.Result{}, err
	}
	w, err := items.Watch(ctx, metav1.ListOptions{LabelSelector: "kollect.dev/target=configmaps", ResourceVersion: list.ResourceVersion})
	if err != nil {
		return load.Result{}, err
	}
	defer w.Stop()

	const rate, duration = 50, 20 * time.Second
	updates := int(rate * duration / time.Second)
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var latencies []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			it, ok := ev.Object.(*v1alpha1.InventoryItem)
			if !ok || ev.Type != watch.Modified {
				continue
			}
			var token string
			_ = json.Unmarshal(it.Attributes["value"].Raw, &token)
			mu.Lock()
			if t, ok := sent[token]; ok {
				latencies = append(latencies, time.Since(t))
				delete(sent, token)
			}
			finished := len(latencies) == updates
			mu.Unlock()
			if finished {
				return
			}
		}
	}()

	start := time.Now()
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / rate)
	defer tick.Stop()
	for i := range updates {
		<-tick.C
		token := fmt.Sprintf("t%d", i)
		name := fmt.Sprintf("cm-%06d", rand.IntN(n))
		mu.Lock()
		sent[token] = time.Now()
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			patch := fmt.Sprintf(`{"data":{"value":%q}}`, token)
			if _, err := env.Kube.CoreV1().ConfigMaps(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
				mu.Lock()
				delete(sent, token) // counted as an error below
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
	w.Stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	r := load.Result{Name: fmt.Sprintf("change to item at %d updates/s", rate), Concurrency: 1, Ops: updates, Elapsed: time.Since(start)}
	// Updates whose event never came (or the same object updated again before
	// its event: a later token wins) count as errors.
	r.Errors = int64(updates - len(latencies))
	sort.Slice(latencies, func(a, b int) bool { return latencies[a] < latencies[b] })
	if len(latencies) > 0 {
		r.P50 = latencies[int(float64(len(latencies))*0.50+0.5)-1]
		r.P99 = latencies[max(int(float64(len(latencies))*0.99+0.5)-1, 0)]
	}
	return r, nil
}

// metricsOf reads the /metrics of the (leading) kollect-apiserver replica.
func metricsOf(ctx context.Context, env *collectenv.Env) (string, error) {
	cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Kollect))
	if err != nil {
		return "", err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(body), err
}

func etcdMetrics(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		sb.WriteString(sc.Text())
		sb.WriteByte('\n')
	}
	return sb.String(), sc.Err()
}

// metric is the value of the sample whose name and labels start the line.
func metric(metrics, sample string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// peakRSS is the peak resident set (VmHWM) of a process, in bytes.
func peakRSS(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
