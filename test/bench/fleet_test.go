package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/cmd/server"
	"kollect.dev/kollect/pkg/controllers/shard"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/bench/load"
	"kollect.dev/kollect/test/collectenv"
)

// The fleet's shape: three members, their ConfigMaps in one namespace, a
// ClusterTarget over the members labelled bench=fleet.
const (
	fleetMembers   = 3
	fleetNamespace = "bench" // in each member
	fleetTarget    = "fleet-configmaps"
	fleetChurnRate = 50 // updates a second, in one member
	fleetChurnTime = 20 * time.Second
	fleetGroups    = 3    // attribute group: 1/3 of the items, as many as one member's
	fleetSlots     = 1000 // attribute slot: 1/1000 of the items
)

// BenchmarkFleet measures collection from member clusters (issue 14,
// acceptance point 6) with one hub replica and then with two, side by side:
// three members (each its own etcd and kube-apiserver) hold N ConfigMaps
// each, registered with a hub before it selects them; per hub:
//
//   - initial sync: the ClusterTarget created, until kollect's etcd holds
//     all 3·N items, and when each member's entry of status.clusters first
//     reported N; the peak RSS (VmHWM) and the CPU of each kollect-apiserver
//     replica over it, and which replica owns each member
//     (MemberCluster status.collection.owner);
//   - change to item: 50 ConfigMap updates a second for 20 s in one member,
//     from the update request to the MODIFIED event of its item on a watch
//     of the hub;
//   - on the first hub only, lists of the 3·N items through the hub's
//     aggregator: unfiltered, with the label selector kollect.dev/cluster
//     (N items), and with the field selectors source.cluster (N),
//     attributes.group of a selectable attribute (N, in every member) and
//     attributes.slot (3·N/1000).
//
// The hubs run the same flags on a fresh etcd each; replicas are named by
// POD_NAME (hub-1, hub-2-1: see replicaIDs), so owners read as the replica. With a single
// leader collecting every member the two-replica figures differ from the
// one-replica ones only by the idle follower; once members are sharded
// across replicas they show the split. Nothing is asserted.
// KOLLECT_BENCH_FLEET_OBJECTS (default 20000) is N, KOLLECT_BENCH_FLEET_LISTS
// (default 20) how many lists of each kind are timed. At the defaults it
// takes about 15 minutes on 2 cores, most of it in the lists.
func BenchmarkFleet(b *testing.B) {
	n, err := countFromEnv("KOLLECT_BENCH_FLEET_OBJECTS", 20_000)
	if err != nil {
		b.Fatal(err)
	}
	lists, err := countFromEnv("KOLLECT_BENCH_FLEET_LISTS", 20)
	if err != nil {
		b.Fatal(err)
	}
	// About 2 ms an object to create and 1 ms an item to sync on 2 cores,
	// twice over, plus the members' and hubs' starts.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute+time.Duration(fleetMembers*n)*8*time.Millisecond)
	defer cancel()
	loadBefore := loadAverage()
	root, err := localcluster.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "kollect-fleet-")
	if err != nil {
		b.Fatal(err)
	}
	failed := true
	var members []*fleetMember
	defer func() {
		keep := failed || os.Getenv("KOLLECT_BENCH_KEEP") != ""
		for _, m := range members {
			_ = m.cluster.Stop()
		}
		if keep {
			fmt.Fprintf(os.Stderr, "the members' state and logs are in %s\n", dir)
		} else {
			_ = os.RemoveAll(dir)
		}
	}()
	tools, err := localcluster.BuildTools(ctx, root, os.Stderr)
	if err != nil {
		b.Fatal(err)
	}
	for i := range fleetMembers {
		name := fmt.Sprintf("member-%d", i+1)
		c, err := localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(dir, name), ToolsBinDir: tools, NoControllerManager: true, Log: os.Stderr})
		if err != nil {
			b.Fatalf("starting %s: %v", name, err)
		}
		m := &fleetMember{name: name, cluster: c}
		members = append(members, m)
		cfg := c.RESTConfig()
		cfg.QPS, cfg.Burst = -1, 0
		m.kube = kubernetes.NewForConfigOrDie(cfg)
		if m.kubeconfig, err = inlineKubeconfig(c.RESTConfig()); err != nil {
			b.Fatal(err)
		}
	}
	creates, err := createFleetObjects(ctx, members, n)
	if err != nil {
		b.Fatal(err)
	}

	var hubs []*hubFigures
	for _, replicas := range []int{1, 2} {
		// Lists are timed on the first hub only: the replica the APIService
		// routes to serves them from the shared etcd either way, and they
		// take most of the run's time.
		h, err := measureHub(ctx, members, replicas, n, lists)
		lists = 0
		if err != nil {
			b.Fatalf("hub with %d replica(s): %v", replicas, err)
		}
		hubs = append(hubs, h)
	}
	conditions := load.Conditions("hub and members on 127.0.0.1, each its own etcd (fsync on) and kube-apiserver", "loadavg(before)="+loadBefore, "loadavg(after)="+loadAverage(),
		fmt.Sprintf("%d members x %d ConfigMaps", fleetMembers, n), "hub: kube-controller-manager, kollect etcd external")
	printFleet(os.Stdout, conditions, n, creates, hubs)
	failed = false
}

// fleetMember is one member cluster of the benchmark.
type fleetMember struct {
	name       string
	cluster    *localcluster.Cluster
	kube       kubernetes.Interface
	kubeconfig []byte
}

// hubFigures is what one hub (one or two replicas) measured.
type hubFigures struct {
	replicas []string // the replicas' identities (POD_NAME)
	sync     time.Duration
	// load is /proc/loadavg when the sync started and ended: the machine
	// may be shared, and a busy one stretches every figure.
	load [2]string
	// memberSync is when each member's status entry first reported every
	// item, from the ClusterTarget's creation (0: never within the sync).
	memberSync map[string]time.Duration
	rss, cpu   []float64 // per replica: peak RSS in bytes, CPU seconds over the sync
	owners     map[string]string
	// per replica: kollect_fleet_members_owned and kollect_fleet_replicas,
	// "-" where not exported
	owned, live []string
	leases      []string // the Leases of the leader election namespace, "name=holder"
	churn       load.Result
	lists       []load.Sample
	listLegend  []string // what each list path selects, and how many items it returned
}

func countFromEnv(name string, def int) (int, error) {
	sizes, err := sizesFromEnv(name, []int{def})
	if err != nil {
		return 0, err
	}
	if len(sizes) != 1 {
		return 0, fmt.Errorf("%s: one count, got %v", name, sizes)
	}
	return sizes[0], nil
}

// inlineKubeconfig is a kubeconfig of cfg with every credential inline: the
// hub refuses kubeconfigs that name files.
func inlineKubeconfig(cfg *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["member"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["member"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken, ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts["member"] = &clientcmdapi.Context{Cluster: "member", AuthInfo: "member"}
	kc.CurrentContext = "member"
	return clientcmd.Write(*kc)
}

func fleetConfigMap(i int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: cmName(i), Labels: map[string]string{
			"bench": "fleet",
			"group": fmt.Sprintf("g%d", i%fleetGroups),
			"slot":  fmt.Sprintf("s%03d", i%fleetSlots),
		}},
		Data: map[string]string{"value": "v0", "payload": strings.Repeat("x", 200)},
	}
}

// createFleetObjects creates n ConfigMaps in every member, the members in
// parallel, reporting progress every 15 s.
func createFleetObjects(ctx context.Context, members []*fleetMember, n int) ([]load.Result, error) {
	var created atomic.Int64
	stop := progress(ctx, 15*time.Second, func(elapsed time.Duration) {
		c := created.Load()
		fmt.Fprintf(os.Stderr, "fleet: created %d/%d ConfigMaps in %.0fs (%.0f/s)\n", c, len(members)*n, elapsed.Seconds(), float64(c)/elapsed.Seconds())
	})
	defer stop()
	results := make([]load.Result, len(members))
	errs := make(chan error, len(members))
	for mi, m := range members {
		go func() {
			if err := createNamespace(ctx, m.kube, fleetNamespace); err != nil {
				errs <- err
				return
			}
			r, err := load.Run(ctx, fmt.Sprintf("create %d ConfigMaps (%s)", n, m.name), 32, n, func(ctx context.Context, i int) error {
				err := createRetrying(ctx, func(ctx context.Context) error {
					_, err := m.kube.CoreV1().ConfigMaps(fleetNamespace).Create(ctx, fleetConfigMap(i), metav1.CreateOptions{})
					return err
				})
				if err == nil {
					created.Add(1)
				}
				return err
			})
			results[mi] = r
			errs <- err
		}()
	}
	var first error
	for range members {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return results, first
}

// progress calls report every period until the returned stop is called.
func progress(ctx context.Context, period time.Duration, report func(elapsed time.Duration)) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				report(time.Since(start))
			}
		}
	}()
	return func() { close(done); <-finished }
}

// startReplica starts a kollect-apiserver replica whose identity (leader
// election, MemberCluster owner) is id: POD_NAME is read once, at its start.
func startReplica(id string, start func() error) error {
	prev, had := os.LookupEnv("POD_NAME")
	if err := os.Setenv("POD_NAME", id); err != nil {
		return err
	}
	defer func() {
		if had {
			_ = os.Setenv("POD_NAME", prev)
		} else {
			_ = os.Unsetenv("POD_NAME")
		}
	}()
	return start()
}

// measureHub starts a hub with the given number of replicas, registers the
// members, and measures the initial sync, change latency and lists. The hub
// is stopped when it returns.
func measureHub(ctx context.Context, members []*fleetMember, replicas, n, lists int) (_ *hubFigures, err error) {
	fmt.Fprintf(os.Stderr, "fleet: starting a hub with %d replica(s)\n", replicas)
	var env *collectenv.Env
	err = startReplica("hub-1", func() error {
		var err error
		// The members listen on 127.0.0.1, which the endpoint policy refuses
		// by default.
		env, err = collectenv.Start(ctx, collectenv.Options{Log: os.Stderr, KollectArgs: []string{"--allow-private-sink-endpoints", "--cluster-name=hub"}})
		return err
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		keep := err != nil || os.Getenv("KOLLECT_BENCH_KEEP") != ""
		if keep {
			fmt.Fprintf(os.Stderr, "the hub's state and logs are in %s\n", env.Dir)
		}
		_ = env.Stop(keep)
	}()
	h := &hubFigures{replicas: []string{"hub-1"}, memberSync: map[string]time.Duration{}}
	procs := []*localcluster.Process{env.Kollect}
	ids := replicaIDs(replicas)
	for i := 2; i <= replicas; i++ {
		id := ids[i-1]
		o := env.Replica
		o.Name = fmt.Sprintf("kollect-apiserver-%d", i)
		var p *localcluster.Process
		if err := startReplica(id, func() error {
			var err error
			p, err = env.Cluster.StartKollect(ctx, o)
			return err
		}); err != nil {
			return nil, err
		}
		procs = append(procs, p)
		h.replicas = append(h.replicas, id)
	}

	api := env.Client.KollectV1alpha1()
	if err := createNamespace(ctx, env.Kube, "fleet"); err != nil {
		return nil, err
	}
	for _, m := range members {
		if _, err := env.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.name + "-kubeconfig"},
			Data: map[string][]byte{"kubeconfig": m.kubeconfig}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
		if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Labels: map[string]string{"bench": "fleet"}},
			Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: m.name + "-kubeconfig"}},
		}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	if err := waitOwnersSettled(ctx, env, members); err != nil {
		return nil, err
	}
	if _, err := api.Profiles("fleet").Create(ctx, &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{
				{Name: "value", Path: "{.data.value}"},
				{Name: "group", Path: "{.metadata.labels.group}", Selectable: true},
				{Name: "slot", Path: "{.metadata.labels.slot}", Selectable: true},
			}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}

	// The initial sync, counted in kollect's etcd: reading the server's
	// /metrics or listing through it would cost it CPU measured here.
	etcdClient, err := clientv3.New(clientv3.Config{Endpoints: []string{env.Etcd.URL()}, DialTimeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	defer etcdClient.Close()
	prefix := path.Join(server.DefaultEtcdPrefix, "kollect.dev/clusterinventoryitems") + "/"
	total := int64(len(members) * n)
	cpu0 := make([]float64, len(procs))
	for i, p := range procs {
		if cpu0[i], err = cpuSeconds(p.Pid()); err != nil {
			return nil, err
		}
	}
	h.load[0] = loadAverage()
	start := time.Now()
	if _, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: fleetTarget},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "fleet", Name: "configmaps"},
			IncludeNamespaces: []string{fleetNamespace},
			LabelSelector:     &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "fleet"}},
			ClusterSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{"bench": "fleet"}}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var count atomic.Int64
	stop := progress(ctx, 10*time.Second, func(elapsed time.Duration) {
		c := count.Load()
		fmt.Fprintf(os.Stderr, "fleet: %d replica(s): %d/%d items after %.0fs (%.0f/s)\n", replicas, c, total, elapsed.Seconds(), float64(c)/elapsed.Seconds())
	})
	lastStatus := time.Time{}
	for count.Load() < total {
		resp, err := etcdClient.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil {
			count.Store(resp.Count)
		}
		// Once a second, the members' status entries: when each first
		// reported every item of its member.
		if time.Since(lastStatus) >= time.Second {
			lastStatus = time.Now()
			recordMemberSync(ctx, env, n, start, h.memberSync)
		}
		select {
		case <-ctx.Done():
			stop()
			return nil, fmt.Errorf("initial sync: %d of %d items before the deadline", count.Load(), total)
		case <-time.After(100 * time.Millisecond):
		}
	}
	h.sync = time.Since(start)
	h.load[1] = loadAverage()
	stop()
	for i, p := range procs {
		c, err := cpuSeconds(p.Pid())
		if err != nil {
			return nil, err
		}
		h.cpu = append(h.cpu, c-cpu0[i])
		h.rss = append(h.rss, float64(peakRSS(p.Pid())))
	}
	fmt.Fprintf(os.Stderr, "fleet: %d replica(s): %d items in %.1fs\n", replicas, total, h.sync.Seconds())
	// The status entries lag the items by up to their write interval: wait
	// a bounded while for the last, so that a lag shows as a late figure
	// rather than none.
	for deadline := time.Now().Add(time.Minute); len(h.memberSync) < len(members) && time.Now().Before(deadline); time.Sleep(time.Second) {
		recordMemberSync(ctx, env, n, start, h.memberSync)
	}
	if h.owners, err = owners(ctx, env); err != nil {
		return nil, err
	}
	for _, p := range procs {
		m, err := serverMetrics(ctx, env.Cluster.KollectRESTConfig(p))
		if err != nil {
			return nil, err
		}
		h.owned = append(h.owned, gauge(m, "kollect_fleet_members_owned"))
		h.live = append(h.live, gauge(m, "kollect_fleet_replicas"))
	}
	h.leases = leases(ctx, env)

	fmt.Fprintf(os.Stderr, "fleet: %d replica(s): %d updates/s for %s in %s\n", replicas, fleetChurnRate, fleetChurnTime, members[0].name)
	if h.churn, err = memberChurn(ctx, env, members[0], n); err != nil {
		return nil, err
	}
	if lists > 0 {
		fmt.Fprintf(os.Stderr, "fleet: %d replica(s): %d lists of each kind\n", replicas, lists)
		if h.lists, h.listLegend, err = listItems(ctx, env, members[0].name, replicas, lists); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// waitOwnersSettled waits until every member is Reachable and its owner has
// stayed the same for 20 s (longer than a lease duration: a replica that
// joined has been seen by the others). It gives up after 3 minutes.
func waitOwnersSettled(ctx context.Context, env *collectenv.Env, members []*fleetMember) error {
	const quiet = 20 * time.Second
	deadline := time.Now().Add(3 * time.Minute)
	var last map[string]string
	since := time.Now()
	for {
		o, err := owners(ctx, env)
		if err == nil && len(o) == len(members) && !slices.Contains(slices.Collect(maps.Values(o)), "") {
			if !maps.Equal(o, last) {
				last, since = o, time.Now()
			} else if time.Since(since) >= quiet {
				fmt.Fprintf(os.Stderr, "fleet: owners settled: %v\n", o)
				return nil
			}
		} else {
			last = nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("members not reachable with a settled owner within 3 minutes: %v (%v)", o, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// owners maps each Reachable member to status.collection.owner.
func owners(ctx context.Context, env *collectenv.Env) (map[string]string, error) {
	list, err := env.Client.KollectV1alpha1().MemberClusters().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range list.Items {
		if !meta.IsStatusConditionTrue(m.Status.Conditions, kollect.ConditionReachable) || m.Status.Collection == nil {
			continue
		}
		out[m.Name] = m.Status.Collection.Owner
	}
	return out, nil
}

// recordMemberSync notes, for each member whose entry of the ClusterTarget's
// status.clusters first reports n items, the time since start.
func recordMemberSync(ctx context.Context, env *collectenv.Env, n int, start time.Time, done map[string]time.Duration) {
	ct, err := env.Client.KollectV1alpha1().ClusterTargets().Get(ctx, fleetTarget, metav1.GetOptions{})
	if err != nil {
		return
	}
	for _, c := range ct.Status.Clusters {
		if _, ok := done[c.Name]; !ok && c.Collection.ItemCount >= int64(n) {
			done[c.Name] = time.Since(start)
		}
	}
}

// gauge is the value of an unlabelled sample in metrics, "-" when the server
// does not export it (the sharding metrics exist only once members are
// sharded).
func gauge(metrics, name string) string {
	for _, line := range strings.Split(metrics, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(rest)
		}
	}
	return "-"
}

// leases lists the Leases of the leader election namespace as name=holder.
func leases(ctx context.Context, env *collectenv.Env) []string {
	list, err := env.Kube.CoordinationV1().Leases(localcluster.KollectNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"? " + err.Error()}
	}
	var out []string
	for _, l := range list.Items {
		holder := ""
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		out = append(out, l.Name+"="+holder)
	}
	slices.Sort(out)
	return out
}

// memberChurn updates the member's ConfigMaps at fleetChurnRate and times
// each change to its item's MODIFIED event on a watch of the hub.
func memberChurn(ctx context.Context, env *collectenv.Env, m *fleetMember, n int) (load.Result, error) {
	items := env.Client.KollectV1alpha1().ClusterInventoryItems()
	sel := kollect.LabelCluster + "=" + m.name
	list, err := items.List(ctx, metav1.ListOptions{LabelSelector: sel, Limit: 1})
	if err != nil {
		return load.Result{}, err
	}
	w, err := items.Watch(ctx, metav1.ListOptions{LabelSelector: sel, ResourceVersion: list.ResourceVersion})
	if err != nil {
		return load.Result{}, err
	}
	defer w.Stop()
	update := func(ctx context.Context, token string) error {
		return patchValue(ctx, m.kube, fleetNamespace, cmName(rand.IntN(n)), token)
	}
	return churn(ctx, fmt.Sprintf("change to item at %d updates/s (%s)", fleetChurnRate, m.name), w, fleetChurnRate, fleetChurnTime, update), nil
}

// listItems times lists of ClusterInventoryItems through kube-apiserver, the
// kinds interleaved round by round so that each sees the same share of the
// machine's slow moments. The bodies are read, not decoded: the client's
// decoding is not the server's cost.
func listItems(ctx context.Context, env *collectenv.Env, member string, replicas, rounds int) ([]load.Sample, []string, error) {
	kinds := []struct {
		path string
		opts metav1.ListOptions
	}{
		{"label", metav1.ListOptions{LabelSelector: kollect.LabelCluster + "=" + member}},
		{"unfiltered", metav1.ListOptions{}},
		{"source.cluster", metav1.ListOptions{FieldSelector: "source.cluster=" + member}},
		{"attributes.group", metav1.ListOptions{FieldSelector: "attributes.group=g0"}},
		{"attributes.slot", metav1.ListOptions{FieldSelector: "attributes.slot=s042"}},
	}
	rc := env.Client.KollectV1alpha1().RESTClient()
	lat := make([][]time.Duration, len(kinds))
	counts := make([]int, len(kinds))
	elapsed := make([]time.Duration, len(kinds))
	for r := range rounds {
		for k, kind := range kinds {
			t := time.Now()
			body, err := rc.Get().Resource("clusterinventoryitems").VersionedParams(&kind.opts, metav1.ParameterCodec).DoRaw(ctx)
			d := time.Since(t)
			if err != nil {
				return nil, nil, fmt.Errorf("list %s: %w", kind.path, err)
			}
			lat[k] = append(lat[k], d)
			elapsed[k] += d
			if r == 0 {
				var l v1alpha1.ClusterInventoryItemList
				if err := json.Unmarshal(body, &l); err != nil {
					return nil, nil, fmt.Errorf("list %s: %w", kind.path, err)
				}
				counts[k] = len(l.Items)
			}
		}
	}
	var out []load.Sample
	var legend []string
	name := fmt.Sprintf("list items, %d replica(s)", replicas)
	for k, kind := range kinds {
		out = append(out, load.Sample{Path: kind.path, Result: load.FromLatencies(name, 1, lat[k], elapsed[k])})
		sel := "none"
		if kind.opts.LabelSelector != "" {
			sel = "-l " + kind.opts.LabelSelector
		} else if kind.opts.FieldSelector != "" {
			sel = "--field-selector " + kind.opts.FieldSelector
		}
		legend = append(legend, fmt.Sprintf("%s: %s (%d items)", kind.path, sel, counts[k]))
	}
	return out, legend, nil
}

func printFleet(w io.Writer, conditions string, n int, creates []load.Result, hubs []*hubFigures) {
	load.PrintTable(w, "fleet (issue 14): creating the members' objects", conditions, creates)

	one := hubs[0]
	fmt.Fprintf(w, "\n== fleet: initial sync of %d members x %d ConfigMaps (ClusterTarget created -> %d items in kollect's etcd); ratios to one replica\n",
		fleetMembers, n, fleetMembers*n)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hub replicas\ttime\titems/s\ttime ×1\tpeak RSS per replica\tpeak RSS sum\tRSS sum ×1\tCPU per replica\tCPU sum ×1\tloadavg start, end\t")
	for _, h := range hubs {
		fmt.Fprintf(tw, "%d\t%.1fs\t%.0f\t%.2f\t%s\t%.0f MiB\t%.2f\t%s\t%.2f\t%s, %s\t\n", len(h.replicas), h.sync.Seconds(),
			float64(fleetMembers*n)/h.sync.Seconds(), h.sync.Seconds()/one.sync.Seconds(),
			joinf(h.rss, func(v float64) string { return fmt.Sprintf("%.0f MiB", v/(1<<20)) }), sum(h.rss)/(1<<20), sum(h.rss)/sum(one.rss),
			joinf(h.cpu, func(v float64) string { return fmt.Sprintf("%.1fs", v) }), sum(h.cpu)/sum(one.cpu), h.load[0], h.load[1])
	}
	tw.Flush()

	fmt.Fprintf(w, "\n== fleet: who collects what (MemberCluster status.collection.owner; member synced: its status.clusters entry first reporting %d items, polled each second)\n", n)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "hub replicas\tmember\towner\tmember synced\t")
	for _, h := range hubs {
		for _, m := range slices.Sorted(maps.Keys(h.owners)) {
			synced := "-"
			if d, ok := h.memberSync[m]; ok {
				synced = fmt.Sprintf("%.1fs", d.Seconds())
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t\n", len(h.replicas), m, h.owners[m], synced)
		}
	}
	tw.Flush()
	for _, h := range hubs {
		fmt.Fprintf(w, "   %d replica(s): kollect_fleet_members_owned %s; kollect_fleet_replicas %s; Leases in %s (name=holder): %s\n", len(h.replicas),
			strings.Join(zipf(h.replicas, h.owned), " "), strings.Join(zipf(h.replicas, h.live), " "),
			localcluster.KollectNamespace, strings.Join(h.leases, " "))
	}

	var churns []load.Sample
	for _, h := range hubs {
		churns = append(churns, load.Sample{Path: fmt.Sprintf("%d replica(s)", len(h.replicas)), Result: h.churn})
	}
	for i := range churns {
		churns[i].Name = fmt.Sprintf("change to item at %d updates/s, %s, %s", fleetChurnRate, fleetChurnTime, churns[i].Path)
	}
	load.PrintTable(w, "fleet: change to item (update request in a member -> MODIFIED event of its item on a watch of the hub; errors: no event within 30 s, or the object updated again before it)", conditions, sampleResults(churns))
	if len(hubs) > 1 && hubs[0].churn.P99 > 0 {
		fmt.Fprintf(w, "   p99 two replicas ÷ one: %.2f, p50: %.2f\n", float64(hubs[1].churn.P99)/float64(hubs[0].churn.P99), float64(hubs[1].churn.P50)/float64(hubs[0].churn.P50))
	}

	for _, h := range hubs {
		if len(h.lists) == 0 {
			continue
		}
		load.PrintComparison(w, fmt.Sprintf("fleet: lists of ClusterInventoryItems (%d in all) through kube-apiserver, %d replica(s) (bodies read, not decoded); ratios to the label selector's",
			fleetMembers*n, len(h.replicas)), "", "label", h.lists)
		for _, l := range h.listLegend {
			fmt.Fprintf(w, "   %s\n", l)
		}
	}
}

func sampleResults(s []load.Sample) []load.Result {
	var out []load.Result
	for _, x := range s {
		out = append(out, x.Result)
	}
	return out
}

func joinf(vs []float64, f func(float64) string) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, f(v))
	}
	return strings.Join(parts, " + ")
}

func zipf(names, values []string) []string {
	var out []string
	for i := range names {
		out = append(out, names[i]+"="+values[i])
	}
	return out
}

func sum(vs []float64) float64 {
	var s float64
	for _, v := range vs {
		s += v
	}
	return s
}

// replicaIDs names n replicas hub-1, hub-2, ..., except that a name the
// members would all avoid gets a suffix (hub-2-1, ...): rendezvous hashing
// gave every one of member-1..3 to hub-1 among hub-1 and hub-2, and a
// two-replica hub with one replica idle measures nothing of the split.
func replicaIDs(n int) []string {
	members := make([]string, fleetMembers)
	for i := range members {
		members[i] = fmt.Sprintf("member-%d", i+1)
	}
	ids := []string{"hub-1"}
	for i := 2; i <= n; i++ {
		id := fmt.Sprintf("hub-%d", i)
		for k := 1; k < 100 && !everyOwns(append(slices.Clone(ids), id), members); k++ {
			id = fmt.Sprintf("hub-%d-%d", i, k)
		}
		ids = append(ids, id)
	}
	return ids
}

// everyOwns tells whether each replica owns at least one member.
func everyOwns(replicas, members []string) bool {
	owned := map[string]bool{}
	for _, m := range members {
		owned[shard.Owner(replicas, m)] = true
	}
	return len(owned) == min(len(replicas), len(members))
}
