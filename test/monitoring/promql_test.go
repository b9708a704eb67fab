package monitoring

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSelectors(t *testing.T) {
	for _, tc := range []struct {
		name, expr string
		want       []Selector
	}{
		{"bare name", `up`, []Selector{{Metric: "up"}}},
		{"name with colons", `job:requests:rate5m > 0`, []Selector{{Metric: "job:requests:rate5m"}}},
		{"matchers", `kollect_items{kind="InventoryItem", job=~"a|b"}`,
			[]Selector{{Metric: "kollect_items", Labels: []string{"job", "kind"}}}},
		{"functions, range and aggregation",
			`sum by (job, type) (rate(kollect_export_bytes_total{type!="git"}[5m]))`,
			[]Selector{{Metric: "kollect_export_bytes_total", Labels: []string{"type"}}}},
		{"grouping after the aggregation", `sum(kollect_items) without (instance, kind)`,
			[]Selector{{Metric: "kollect_items"}}},
		{"histogram quantile",
			`histogram_quantile(0.99, sum by (le, verb) (rate(apiserver_request_duration_seconds_bucket{group="kollect.dev",verb!~"WATCH|CONNECT"}[$__rate_interval])))`,
			[]Selector{{Metric: "apiserver_request_duration_seconds_bucket", Labels: []string{"group", "verb"}}}},
		{"binary operators and vector matching",
			`a / on (job) group_left (kind) b and ignoring (x) c or d unless e > bool 0.5`,
			[]Selector{{Metric: "a"}, {Metric: "b"}, {Metric: "c"}, {Metric: "d"}, {Metric: "e"}}},
		{"keywords in any case", `a AND b Or c`, []Selector{{Metric: "a"}, {Metric: "b"}, {Metric: "c"}}},
		{"offset, @ and subquery", `max_over_time(rate(x[5m])[1h:30s] offset 1h30m) @ start() - y @ 1609746000`,
			[]Selector{{Metric: "x"}, {Metric: "y"}}},
		{"numbers", `x * 1e-3 + 0x1F - .5 + 2 ^ Inf - NaN`, []Selector{{Metric: "x"}}},
		{"strings are not names", `label_replace(up{job="a"}, "dst", "$1", "instance", "(.*):.*")`,
			[]Selector{{Metric: "up", Labels: []string{"job"}}}},
		{"quotes and escapes in values", "x{a=\"b\\\"}c\", b='d', c=`e\\`} + y",
			[]Selector{{Metric: "x", Labels: []string{"a", "b", "c"}}, {Metric: "y"}}},
		{"__name__ matcher", `{__name__="kollect_informers", job="k"}`,
			[]Selector{{Metric: "kollect_informers", Labels: []string{"job"}}}},
		{"quoted name (Prometheus 3)", `{"my.metric", env="x"}`,
			[]Selector{{Metric: "my.metric", Labels: []string{"env"}}}},
		{"absent and vector", `absent(kollect_controllers_leader) or vector(0)`,
			[]Selector{{Metric: "kollect_controllers_leader"}}},
		{"duplicates once", `a / a + a{x="1"}`, []Selector{{Metric: "a"}, {Metric: "a", Labels: []string{"x"}}}},
		{"comments", "a # b c\n + d", []Selector{{Metric: "a"}, {Metric: "d"}}},
		{"no selector", `vector(1) + scalar(time())`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Selectors(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Selectors(%s)\n got %+v\nwant %+v", tc.expr, got, tc.want)
			}
		})
	}
}

func TestSelectorsErrors(t *testing.T) {
	for _, expr := range []string{
		`x{a="b"`,
		`x{a="b}`,
		`rate(x[5m)`,
		`{job="a"}`, // no metric name
		`x{a=b}`,
		`x{a}`,
		`x{a=="b"}`,
		`sum by (job`,
	} {
		if got, err := Selectors(expr); err == nil {
			t.Errorf("Selectors(%s) = %+v, want an error", expr, got)
		}
	}
}

func TestFromGrafana(t *testing.T) {
	for in, want := range map[string]string{
		`rate(x{job=~"$job",ns="${namespace}"}[$__rate_interval])`:        `rate(x{job=~"var",ns="var"}[5m])`,
		`increase(x[${__range}]) / $__interval`:                           `increase(x[5m]) / 5m`,
		`label_values(kollect_controllers_leader{ns=~"$namespace"}, job)`: `kollect_controllers_leader{ns=~"var"}`,
		`label_values(job)`: ``,
	} {
		if got := FromGrafana(in); got != want {
			t.Errorf("FromGrafana(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestExposition(t *testing.T) {
	e, err := ParseExposition(`# HELP kollect_informers Running informers.
# TYPE kollect_informers gauge
kollect_informers 3
# TYPE kollect_export_duration_seconds histogram
kollect_export_duration_seconds_bucket{type="file",le="0.001"} 0
kollect_export_duration_seconds_bucket{type="file",le="+Inf"} 2
kollect_export_duration_seconds_sum{type="file"} 0.01
kollect_export_duration_seconds_count{type="file"} 2
odd{v="a}b,c=\"d\""} 1 1700000000000
`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		sel  Selector
		want []string
	}{
		{Selector{Metric: "kollect_informers", Labels: []string{"job", "namespace"}}, nil},
		{Selector{Metric: "kollect_export_duration_seconds_bucket", Labels: []string{"le", "type"}}, nil},
		{Selector{Metric: "kollect_export_duration_seconds"}, []string{"kollect_export_duration_seconds"}},
		{Selector{Metric: "kollect_export_duration_seconds_sum", Labels: []string{"family"}}, []string{"kollect_export_duration_seconds_sum{family}"}},
		{Selector{Metric: "odd", Labels: []string{"v"}}, nil},
		{Selector{Metric: "kollect_items"}, []string{"kollect_items"}},
	} {
		if got := e.Missing(tc.sel); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Missing(%+v) = %v, want %v", tc.sel, got, tc.want)
		}
	}
}

// TestChartQueries parses every query of the dashboard and the rules (the
// names are checked against a live server in test/e2e).
func TestChartQueries(t *testing.T) {
	files := filepath.Join("..", "..", "charts", "kollect", "files")
	dash, err := DashboardQueries(filepath.Join(files, "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	rules, err := RuleQueries(filepath.Join(files, "prometheus-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dash) < 20 || len(rules) < 7 {
		t.Fatalf("%d dashboard and %d rule queries: too few", len(dash), len(rules))
	}
	for _, q := range append(dash, rules...) {
		names, err := MetricNames(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", q.Where, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: no metric in %s", q.Where, q.Expr)
		}
		if strings.Contains(q.Expr, "$") && !strings.Contains(q.Where, "rule") {
			t.Errorf("%s: a Grafana variable is left: %s", q.Where, q.Expr)
		}
	}
}
