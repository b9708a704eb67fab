package delivery

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/eventfold"
)

// TestTwoClustersShareSinks is issue 11's acceptance point 3: two
// kollect-apiservers on two clusters, --cluster-name east and west, each
// with the same namespace and Inventory (and same-named items of
// different content), export into one Postgres table, one git repository
// and one NATS stream with the default templates. Changes in both,
// deletions included, and anti-drift full syncs every 5s: each cluster's
// rows, document and folded events equal its own live set, and every row,
// document and event names its cluster.
func TestTwoClustersShareSinks(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	begin := time.Now()
	west, err := startCluster(ctx, "west", 1)
	must(t, err, "start the cluster west")
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("west: logs kept in %s/logs", west.dir)
		}
		if err := west.stop(t.Failed()); err != nil {
			fmt.Fprintf(os.Stderr, "e2e/delivery: stopping west: %v\n", err)
		}
	})
	t.Logf("west started in %s", time.Since(begin).Round(time.Millisecond))
	clusters := []*kcluster{east, west}

	// The shared sinks.
	ns := "shared-" + randomSuffix()
	schema := pgSchema(t, "fleet")
	gs := startGitServer(t)
	repoURL, gitDir := gs.repo(t, "fleet")
	stream := natsStream(ctx, t, "kollect.*."+ns+".>")
	fold := eventfold.New()
	eventfold.Follow(ctx, t, js, stream, fold)

	// The same namespace, sinks and Inventory in both; cm-0000..0019 exist
	// in both with different values.
	worlds := map[string]world{}
	for i, c := range clusters {
		w := world{}
		for j := range 30 - 10*i {
			w[fmt.Sprintf("cm-%04d", j)] = fmt.Sprintf("%s-%d", c.name, j)
		}
		worlds[c.name] = w
		c.namespace(ctx, t, ns)
		c.workload(ctx, t, ns, w)
		c.secret(ctx, t, ns, "db", map[string]string{"dsn": postgresDSN})
		c.secret(ctx, t, ns, "git-token", map[string]string{"username": gs.user, "token": gs.token})
		api := c.kollect.KollectV1alpha1()
		_, err := api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
			ObjectMeta: metav1.ObjectMeta{Name: "portal"},
			Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
				SecretRef: &v1alpha1.LocalObjectReference{Name: "db"},
				Postgres:  &v1alpha1.PostgresSinkConfig{Schema: schema, Table: table}},
		}, metav1.CreateOptions{})
		must(t, err, c.name+": database sink")
		_, err = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: "audit"},
			Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: repoURL,
				SecretRef: &v1alpha1.LocalObjectReference{Name: "git-token"},
				TLS:       &v1alpha1.TLSConfig{CABundle: gs.ca()},
				// The default path template, {cluster}/{namespace}/{inventory}.{ext}.
				Git: &v1alpha1.GitSinkConfig{Branch: "main"}},
		}, metav1.CreateOptions{})
		must(t, err, c.name+": git sink")
		_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
			ObjectMeta: metav1.ObjectMeta{Name: "changes"},
			Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: natsURL,
				NATS: &v1alpha1.NATSSinkConfig{Stream: stream}},
		}, metav1.CreateOptions{})
		must(t, err, c.name+": nats sink")
		_, err = api.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
			ObjectMeta: metav1.ObjectMeta{Name: "inv"},
			Spec: v1alpha1.InventorySpec{
				// Frequent anti-drift full syncs: each one diffs the table,
				// rewrites the document and resyncs the stream, and must
				// touch nothing of the other cluster.
				ExportMinInterval: &metav1.Duration{Duration: 5 * time.Second},
				SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "audit"}},
				DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
				EventSinkRefs:     []v1alpha1.SinkReference{{Name: "changes"}},
			},
		}, metav1.CreateOptions{})
		must(t, err, c.name+": inventory")
	}
	docPath := func(c *kcluster) string { return c.name + "/" + ns + "/inv.json" }
	checks := func(c *kcluster) []check {
		return []check{
			pgCheck(schema, table, c.name, ns, "inv"),
			gitCheck(gitDir, docPath(c), c.name),
			foldCheck("nats", fold, inventoryPath(c.name, ns, "inv")),
		}
	}
	converge := func(what string) map[string]liveSet {
		t.Helper()
		out := map[string]liveSet{}
		for _, c := range clusters {
			out[c.name] = c.waitConverged(ctx, t, c.name+": "+what, ns, checks(c)...)
		}
		// Both at once: converging the second must not have undone the first.
		for _, c := range clusters {
			if err := checkAll(ctx, c, ns, checks(c)); err != nil {
				t.Fatalf("%s after %s converged: %v", c.name, what, err)
			}
		}
		return out
	}
	converge("first export")

	// Changes in both: updates, deletions, objects leaving the selector,
	// new objects; some keys go in one cluster and stay in the other
	// (cm-0007 is deleted in east, cm-0003 in west).
	for i, c := range clusters {
		c.apply(ctx, t, ns, worlds[c.name], burst(worlds[c.name], 4-i, c.name+"-2", c.name+"-new"))
		c.waitItems(ctx, t, ns, worlds[c.name])
	}
	converge("after changes in both")

	// Full syncs of both after the changes: every entry exports again.
	mark := metav1.Now()
	for _, c := range clusters {
		eventually(ctx, t, c.name+": a full sync of every sink after the changes", func(ctx context.Context) (bool, string) {
			inv, err := c.kollect.KollectV1alpha1().Inventories(ns).Get(ctx, "inv", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if len(inv.Status.SinkExports) != 3 {
				return false, fmt.Sprintf("%d entries", len(inv.Status.SinkExports))
			}
			for _, e := range inv.Status.SinkExports {
				if e.LastExportTime == nil || !e.LastExportTime.After(mark.Time) || e.Outcome == v1alpha1.OutcomeFailed {
					return false, fmt.Sprintf("%s/%s: %s, last export %v: %s", e.Family, e.Name, e.Outcome, e.LastExportTime, e.Message)
				}
			}
			return true, ""
		})
	}
	live := converge("after full syncs of both")

	// The table: only these two clusters' rows, each its own.
	rows, err := pgRows(ctx, schema, table, "", "", "")
	must(t, err, "read the table")
	perCluster := map[string]int{}
	for _, r := range rows {
		perCluster[r.cluster]++
	}
	for _, c := range clusters {
		if perCluster[c.name] != len(live[c.name].hash) {
			t.Errorf("postgres: %d rows of %s, it has %d items", perCluster[c.name], c.name, len(live[c.name].hash))
		}
	}
	if len(rows) != perCluster["east"]+perCluster["west"] {
		t.Errorf("postgres: rows of other clusters: %v", perCluster)
	}
	t.Logf("postgres: %d rows: %v", len(rows), perCluster)

	// The repository: the two documents and nothing else, on a history
	// both pushed to.
	files := strings.Fields(gitCmd(t, gitDir, "ls-tree", "-r", "--name-only", "main"))
	want := []string{docPath(east), docPath(west)}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Errorf("git: main holds %v, want %v", files, want)
	}
	t.Logf("git: %s commits on main; files %v", gitCmd(t, gitDir, "rev-list", "--count", "main"), files)

	// The stream: every event names its cluster, in its subject, source,
	// id, inventory and kollectcluster.
	msgs := streamMessages(ctx, t, stream)
	perEvents := map[string]int{}
	bad := 0
	for _, m := range msgs {
		ev, cl := m.event, m.event.Cluster
		perEvents[cl]++
		src := "/clusters/" + cl + "/apis/kollect.dev/v1alpha1/namespaces/" + ns + "/inventories/inv"
		if (cl != "east" && cl != "west") || m.subject != "kollect."+cl+"."+ns+".inv" || ev.Source != src ||
			!strings.HasPrefix(ev.ID, inventoryPath(cl, ns, "inv")+"/") || ev.Data.Inventory.Cluster != cl {
			if bad++; bad <= 5 {
				t.Errorf("nats: message %d does not name its cluster consistently: subject %s, kollectcluster %q, source %s, id %s, inventory %+v",
					m.seq, m.subject, cl, ev.Source, ev.ID, ev.Data.Inventory)
			}
		}
	}
	if perEvents["east"] == 0 || perEvents["west"] == 0 || len(msgs) != perEvents["east"]+perEvents["west"] {
		t.Errorf("nats: events per cluster %v", perEvents)
	}
	repeats := checkIDs(t, "nats", msgs)
	t.Logf("nats: %d messages (%v), %d repeating an id", len(msgs), perEvents, repeats)
	for _, c := range clusters {
		s := fold.Stats(inventoryPath(c.name, ns, "inv"))
		t.Logf("nats fold of %s: %d events, %d duplicates, %d stale, resyncs %d started / %d completed, %d checksum mismatches; %d items",
			c.name, s.Events, s.Duplicates, s.Stale, s.ResyncsStarted, s.ResyncsCompleted, s.ChecksumMismatches, len(live[c.name].hash))
		if s.ChecksumMismatches != 0 || s.Stale != 0 {
			t.Errorf("nats fold of %s: %d checksum mismatches, %d stale events; want none", c.name, s.ChecksumMismatches, s.Stale)
		}
	}
	if err := fold.Err(); err != nil {
		t.Errorf("nats: events the consumer cannot fold: %v", err)
	}
}
