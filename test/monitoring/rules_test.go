package monitoring

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/localcluster"
)

const (
	rulesFile     = "charts/kollect/files/prometheus-rules.yaml"
	rulesTestFile = "test/monitoring/prometheus-rules.test.yaml"
)

var buildPromtool = sync.OnceValues(func() (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	var log bytes.Buffer
	bin, err := localcluster.BuildTools(ctx, root, &log, "promtool")
	if err != nil {
		return "", &buildError{err: err, log: log.String()}
	}
	return filepath.Join(bin, "promtool"), nil
})

type buildError struct {
	err error
	log string
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.log }

// promtool runs the pinned promtool in the repository root. It fails the
// test, never skips it, when promtool cannot be built: the rules would go
// unchecked.
func promtool(t *testing.T, args ...string) string {
	t.Helper()
	bin, err := buildPromtool()
	if err != nil {
		t.Fatalf("cannot build promtool (hack/build-tools.sh promtool, module hack/tools/promtool): %v", err)
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	out := promtool(t, "check", "rules", "--lint=all", "--lint-fatal", rulesFile)
	t.Log(out)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool check rules did not report SUCCESS:\n%s", out)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	out := promtool(t, "test", "rules", rulesTestFile)
	t.Log(out)
	if !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules did not report SUCCESS:\n%s", out)
	}
}

// ruleTests is the part of a promtool unit test file the checks read.
type ruleTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		Name          string `json:"name"`
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			Alertname string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// TestEveryAlertTested: every alert has a unit test where it fires and one
// where it does not, every unit test names an existing alert, and every
// alert carries what the runbook and routing need.
func TestEveryAlertTested(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	rules, err := ReadRules(filepath.Join(root, rulesFile))
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rulesTestFile))
	if err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal(data, &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	if len(tests.RuleFiles) != 1 || filepath.Clean(filepath.Join(filepath.Dir(rulesTestFile), tests.RuleFiles[0])) != rulesFile {
		t.Errorf("%s tests rule_files %v, want only %s", rulesTestFile, tests.RuleFiles, rulesFile)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.Alertname]++
			} else {
				quiet[a.Alertname]++
			}
		}
	}
	anchors := markdownAnchors(t, filepath.Join(root, "docs", "install.md"))
	alerts := map[string]bool{}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts[r.Alert] = true
			if firing[r.Alert] == 0 {
				t.Errorf("alert %s: no unit test expects it to fire", r.Alert)
			}
			if quiet[r.Alert] == 0 {
				t.Errorf("alert %s: no unit test expects it not to fire", r.Alert)
			}
			if r.For == "" {
				t.Errorf("alert %s: no for: duration", r.Alert)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("alert %s: no %s annotation", r.Alert, a)
				}
			}
			if _, anchor, ok := strings.Cut(r.Annotations["runbook_url"], "docs/install.md#"); !ok || !slices.Contains(anchors, anchor) {
				t.Errorf("alert %s: runbook_url %q is not a heading of docs/install.md", r.Alert, r.Annotations["runbook_url"])
			}
		}
	}
	if len(alerts) == 0 {
		t.Fatalf("%s has no alerts", rulesFile)
	}
	for name := range firing {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
	for name := range quiet {
		if !alerts[name] {
			t.Errorf("%s tests alert %s, which %s does not define", rulesTestFile, name, rulesFile)
		}
	}
}

// markdownAnchors returns the anchors GitHub gives a document's headings.
func markdownAnchors(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	var anchors []string
	inFence := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		anchors = append(anchors, strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(title), ""), " ", "-"))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors
}
