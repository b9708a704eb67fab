package e2e

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/e2e/framework"
	"kollect.dev/kollect/test/monitoring"
)

const monitoringNS = "monitoring-e2e"

// TestDashboardAndAlertMetrics checks the Grafana dashboard and the alert
// rules of charts/kollect/files against the live kollect-apiserver: promtool
// parses every query, and every metric a query names, with the label names
// of its matchers, is on /metrics once the server has collected, exported
// and failed to export (for the breaker and the error counters).
func TestDashboardAndAlertMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()

	files := env.Path("charts/kollect/files")
	rulesPath := filepath.Join(files, "prometheus-rules.yaml")
	dashboard, err := monitoring.DashboardQueries(filepath.Join(files, "grafana-dashboard.json"))
	must(t, err, "reading the dashboard")
	rules, err := monitoring.RuleQueries(rulesPath)
	must(t, err, "reading the alert rules")
	queries := append(dashboard, rules...)
	checkSyntax(t, ctx, dashboard, rulesPath)

	// What each query needs of the scrape.
	type need struct {
		sel   monitoring.Selector
		where []string
	}
	var needs []*need
	for _, q := range queries {
		sels, err := monitoring.Selectors(q.Expr)
		must(t, err, q.Where)
		for _, s := range sels {
			i := slices.IndexFunc(needs, func(n *need) bool { return n.sel.Metric == s.Metric && slices.Equal(n.sel.Labels, s.Labels) })
			if i < 0 {
				needs = append(needs, &need{sel: s})
				i = len(needs) - 1
			}
			needs[i].where = append(needs[i].where, q.Where)
		}
	}

	driveMetrics(t, ctx)

	cs, err := kubernetes.NewForConfig(env.Cluster.KollectRESTConfig(env.Kollect))
	must(t, err, "a client of kollect-apiserver")
	var (
		scrape  monitoring.Exposition
		missing map[string][]string // what is missing -> the queries that use it
	)
	// Gauges such as apiserver_resource_objects are set periodically: poll.
	err = wait.PollUntilContextTimeout(ctx, 2*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return false, fmt.Errorf("GET /metrics: %w", err)
		}
		if scrape, err = monitoring.ParseExposition(string(body)); err != nil {
			return false, fmt.Errorf("parsing /metrics: %w", err)
		}
		missing = map[string][]string{}
		for _, n := range needs {
			for _, m := range scrape.Missing(n.sel) {
				missing[m] = append(missing[m], n.where...)
			}
		}
		return len(missing) == 0, nil
	})
	for _, m := range slices.Sorted(maps.Keys(missing)) {
		t.Errorf("%s is not on kollect-apiserver's /metrics; used by:\n  %s", m, strings.Join(missing[m], "\n  "))
	}
	if err != nil && len(missing) == 0 {
		t.Fatal(err)
	}
	if len(missing) == 0 {
		t.Logf("%d queries, %d selectors, all on /metrics", len(queries), len(needs))
	}

	// The breaker of the broken sink is open, as KollectSinkBreakerOpen sees it.
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	must(t, err, "GET /metrics")
	if v := framework.SampleSum(string(body), "kollect_sink_breaker_open", `name="`+monitoringNS+`/broken"`); v != 1 {
		t.Errorf(`kollect_sink_breaker_open{name="%s/broken"} = %v, want 1`, monitoringNS, v)
	}
	if v := framework.SampleSum(string(body), "kollect_reconcile_errors_total", `kind="Target"`, `error_class="extraction"`); v < 1 {
		t.Errorf(`kollect_reconcile_errors_total{kind="Target",error_class="extraction"} = %v, want at least 1`, v)
	}
}

// checkSyntax has the real promtool parse the dashboard's queries (as
// recording rules) and the alert rules.
func checkSyntax(t *testing.T, ctx context.Context, dashboard []monitoring.Query, rulesPath string) {
	t.Helper()
	var log bytes.Buffer
	bin, err := localcluster.BuildTools(ctx, env.Root, &log, "promtool")
	if err != nil {
		t.Fatalf("cannot build promtool (hack/build-tools.sh promtool): %v\n%s", err, log.String())
	}
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var recs []rule
	for i, q := range dashboard {
		recs = append(recs, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: q.Expr})
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	must(t, err, "encoding the dashboard's queries")
	path := filepath.Join(t.TempDir(), "dashboard-rules.yaml")
	must(t, os.WriteFile(path, data, 0o644), "writing the dashboard's queries")
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "promtool"), "check", "rules", path, rulesPath).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
}

// driveMetrics makes the server collect (with one object its Profile
// cannot extract: kollect_reconcile_errors_total), export to a file sink
// (the export metrics), debounce (exportMinInterval not elapsed) and fail
// to export to a sink whose directory cannot exist (the breaker opens after
// three failures).
func driveMetrics(t *testing.T, ctx context.Context) {
	t.Helper()
	// Under the server's --file-sink-root: file:///good is DIR/<ns>/good.
	good := filepath.Join(fileSinkRoot, monitoringNS, "good")
	must(t, os.MkdirAll(good, 0o750), "creating the good sink's directory")
	blocker := filepath.Join(fileSinkRoot, monitoringNS, "a-file")
	must(t, os.WriteFile(blocker, nil, 0o640), "creating the file the broken sink's directory would need to be")
	env.Kubectl(t, ctx, "create", "namespace", monitoringNS)
	t.Cleanup(func() {
		// The Inventory first, so that its exporters stop before the
		// temporary directories go.
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "inventory", "colors", "-n", monitoringNS, "--ignore-not-found")
		_, _, _ = env.Cluster.Kubectl(context.Background(), "delete", "namespace", monitoringNS, "--wait=false")
	})
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: painted, namespace: %[1]s, labels: {app: monitoring-e2e}}
data: {color: blue}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: plain, namespace: %[1]s, labels: {app: monitoring-e2e}}
data: {shape: round}
---
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: colors, namespace: %[1]s}
spec:
  targetGVK: {version: v1, kind: ConfigMap}
  attributes:
  - {name: color, path: "{.data.color}"} # required: plain has none
---
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: colors, namespace: %[1]s}
spec:
  profileRef: {name: colors}
  labelSelector: {matchLabels: {app: monitoring-e2e}}
---
apiVersion: kollect.dev/v1alpha1
kind: SnapshotSink
metadata: {name: files, namespace: %[1]s}
spec: {type: file, endpoint: "file://%[2]s"}
---
apiVersion: kollect.dev/v1alpha1
kind: SnapshotSink
metadata: {name: broken, namespace: %[1]s}
spec: {type: file, endpoint: "file://%[3]s/exports"}
---
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: colors, namespace: %[1]s}
spec:
  exportMinInterval: 1h
  snapshotSinkRefs: [{name: files}, {name: broken}]
`, monitoringNS, "/good", "/a-file"))

	kollect := env.KollectClient(t).KollectV1alpha1()
	eventually(ctx, t, "the target collects painted and fails on plain", func(ctx context.Context) (bool, string) {
		tg, err := kollect.Targets(monitoringNS).Get(ctx, "colors", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		c := tg.Status.Collection
		return c != nil && c.ItemCount == 1 && c.FailedCount == 1, fmt.Sprintf("%+v", c)
	})
	eventually(ctx, t, "exported to files, failing on broken", func(ctx context.Context) (bool, string) {
		inv, err := kollect.Inventories(monitoringNS).Get(ctx, "colors", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		exported, failed := false, false
		for _, e := range inv.Status.SinkExports {
			// lastExportTime stays set whatever the entry says later.
			exported = exported || e.Name == "files" && e.LastExportTime != nil
			failed = failed || e.Name == "broken" && e.Outcome == v1alpha1.OutcomeFailed && e.ConsecutiveFailures >= 3
		}
		return exported && failed, fmt.Sprintf("%+v", inv.Status.SinkExports)
	})
	exportedFile(t, good)
}
