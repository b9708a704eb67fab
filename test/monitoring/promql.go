// Package monitoring checks the alert rules and the Grafana dashboard of
// charts/kollect/files: rules_test.go runs the real promtool on the rules
// and their unit tests; test/e2e/monitoring_test.go uses this package's
// helpers to check every query against a live kollect-apiserver's /metrics.
package monitoring

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"
)

// Selector is a vector selector of a PromQL expression: the metric name
// and the label names its matchers use.
type Selector struct {
	Metric string
	Labels []string
}

// keywords are the identifiers of PromQL that never name a metric when
// they are not followed by "(" (functions and aggregations always are).
var keywords = map[string]bool{
	"and": true, "or": true, "unless": true, "atan2": true, "bool": true, "offset": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true,
	// Modifiers of range selectors (experimental, Prometheus 3.x).
	"anchored": true, "smoothed": true,
}

// groupingKeywords take a parenthesized list of label names.
var groupingKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// Selectors returns the vector selectors of a PromQL expression, in order
// of appearance, duplicates removed. It skips function and aggregation
// names, keywords, label lists of grouping modifiers, strings, numbers and
// durations, and what is inside [] (ranges and subquery steps); inside {}
// it reads the matchers' label names, and a __name__ matcher or a quoted
// name as the metric name. It is a lexer, not a parser: promtool checks the
// syntax.
func Selectors(expr string) ([]Selector, error) {
	l := &lexer{src: expr}
	var out []Selector
	add := func(s Selector) {
		if !slices.ContainsFunc(out, func(o Selector) bool { return o.Metric == s.Metric && slices.Equal(o.Labels, s.Labels) }) {
			out = append(out, s)
		}
	}
	for {
		tok, err := l.next()
		if err != nil {
			return nil, err
		}
		switch tok.kind {
		case tokEOF:
			return out, nil
		case tokIdent:
			lower := strings.ToLower(tok.text)
			after, err := l.peek()
			if err != nil {
				return nil, err
			}
			if groupingKeywords[lower] {
				if after.kind == tokPunct && after.text == "(" {
					if err := l.skipUntil(")"); err != nil {
						return nil, err
					}
				}
				continue
			}
			// A function or aggregation: name( or, for aggregations,
			// name by (...) ( and name without (...) (.
			call := after.kind == tokPunct && after.text == "(" ||
				after.kind == tokIdent && (strings.EqualFold(after.text, "by") || strings.EqualFold(after.text, "without"))
			if keywords[lower] || call {
				continue
			}
			s := Selector{Metric: tok.text}
			if after.kind == tokPunct && after.text == "{" {
				l.mustNext()
				if s, err = l.matchers(s); err != nil {
					return nil, err
				}
			}
			add(s)
		case tokPunct:
			switch tok.text {
			case "{":
				s, err := l.matchers(Selector{})
				if err != nil {
					return nil, err
				}
				if s.Metric == "" {
					return nil, fmt.Errorf("selector without a metric name at offset %d of %q", tok.pos, expr)
				}
				add(s)
			case "[":
				if err := l.skipUntil("]"); err != nil {
					return nil, err
				}
			}
		}
	}
}

// MetricNames returns the metric names of expr's selectors.
func MetricNames(expr string) ([]string, error) {
	sels, err := Selectors(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, s := range sels {
		if !slices.Contains(names, s.Metric) {
			names = append(names, s.Metric)
		}
	}
	return names, nil
}

type tokenKind int

const (
	tokEOF tokenKind = iota
	tokIdent
	tokString
	tokNumber // numbers and durations
	tokPunct  // brackets, commas, operators
)

type token struct {
	kind tokenKind
	text string
	pos  int
}

type lexer struct {
	src string
	pos int
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || '0' <= c && c <= '9' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func (l *lexer) next() (token, error) {
	// Whitespace and comments.
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		if c == '#' {
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
			continue
		}
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			break
		}
		l.pos++
	}
	start := l.pos
	if l.pos >= len(l.src) {
		return token{kind: tokEOF, pos: start}, nil
	}
	c := l.src[l.pos]
	switch {
	case c == '"' || c == '\'' || c == '`':
		l.pos++
		for l.pos < len(l.src) && l.src[l.pos] != c {
			if l.src[l.pos] == '\\' && c != '`' {
				l.pos++
			}
			l.pos++
		}
		if l.pos >= len(l.src) {
			return token{}, fmt.Errorf("unterminated string at offset %d of %q", start, l.src)
		}
		l.pos++
		return token{kind: tokString, text: l.src[start:l.pos], pos: start}, nil
	case isDigit(c) || c == '.' && l.pos+1 < len(l.src) && isDigit(l.src[l.pos+1]):
		// 1, 0.5, 1e-3, 0x1f, 5m, 1h30m: a digit never starts a name.
		for l.pos < len(l.src) && (isIdentChar(l.src[l.pos]) || l.src[l.pos] == '.' ||
			(l.src[l.pos] == '+' || l.src[l.pos] == '-') && (l.src[l.pos-1] == 'e' || l.src[l.pos-1] == 'E') && !strings.HasPrefix(l.src[start:], "0x")) {
			l.pos++
		}
		return token{kind: tokNumber, text: l.src[start:l.pos], pos: start}, nil
	case isIdentStart(c):
		for l.pos < len(l.src) && isIdentChar(l.src[l.pos]) {
			l.pos++
		}
		return token{kind: tokIdent, text: l.src[start:l.pos], pos: start}, nil
	}
	l.pos++
	return token{kind: tokPunct, text: string(c), pos: start}, nil
}

func (l *lexer) peek() (token, error) {
	save := l.pos
	t, err := l.next()
	l.pos = save
	return t, err
}

func (l *lexer) mustNext() { _, _ = l.next() }

// skipUntil consumes tokens through the closing punctuation.
func (l *lexer) skipUntil(closing string) error {
	for {
		t, err := l.next()
		if err != nil {
			return err
		}
		if t.kind == tokEOF {
			return fmt.Errorf("missing %q in %q", closing, l.src)
		}
		if t.kind == tokPunct && t.text == closing {
			return nil
		}
	}
}

// matchers reads the matchers after "{" through "}": label names into
// s.Labels (sorted), and the metric name from __name__="..." or a quoted
// name standing alone.
func (l *lexer) matchers(s Selector) (Selector, error) {
	for {
		t, err := l.next()
		if err != nil {
			return s, err
		}
		switch {
		case t.kind == tokEOF:
			return s, fmt.Errorf("missing \"}\" in %q", l.src)
		case t.kind == tokPunct && t.text == "}":
			slices.Sort(s.Labels)
			return s, nil
		case t.kind == tokPunct && t.text == ",":
		case t.kind == tokIdent || t.kind == tokString:
			name := t.text
			if t.kind == tokString {
				name = unquote(name)
			}
			op, value, err := l.matchOp()
			if err != nil {
				return s, err
			}
			switch {
			case op == "" && t.kind == tokString && s.Metric == "":
				s.Metric = name // {"metric.name", ...}
			case op == "":
				return s, fmt.Errorf("label %s without a matcher in %q", name, l.src)
			case name == "__name__" && op == "=":
				s.Metric = value
			case !slices.Contains(s.Labels, name):
				s.Labels = append(s.Labels, name)
			}
		default:
			return s, fmt.Errorf("unexpected %q at offset %d in the matchers of %q", t.text, t.pos, l.src)
		}
	}
}

// matchOp reads "=", "!=", "=~" or "!~" and the quoted value that follows;
// no operator (a "," or "}" next) returns "".
func (l *lexer) matchOp() (op, value string, err error) {
	for {
		t, err := l.peek()
		if err != nil {
			return "", "", err
		}
		if t.kind != tokPunct || !strings.Contains("=!~", t.text) {
			break
		}
		l.mustNext()
		op += t.text
	}
	if op == "" {
		return "", "", nil
	}
	if op != "=" && op != "!=" && op != "=~" && op != "!~" {
		return "", "", fmt.Errorf("unknown matcher %q in %q", op, l.src)
	}
	t, err := l.next()
	if err != nil {
		return "", "", err
	}
	if t.kind != tokString {
		return "", "", fmt.Errorf("matcher %s without a quoted value at offset %d of %q", op, t.pos, l.src)
	}
	return op, unquote(t.text), nil
}

func unquote(s string) string {
	if len(s) >= 2 {
		s = s[1 : len(s)-1]
	}
	return s
}

// Query is one PromQL expression of the dashboard or the rules, and where
// it is.
type Query struct {
	Where string
	Expr  string
}

// grafanaVars are Grafana's built-in interval variables; other variables
// ($job, ${namespace}) only appear inside matcher values.
var (
	grafanaIntervals = regexp.MustCompile(`\$\{?__(rate_interval|interval|range)\}?`)
	grafanaVars      = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?`)
	labelValues      = regexp.MustCompile(`^\s*label_values\((.*),\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)
)

// FromGrafana turns a Grafana query into PromQL: interval variables become
// 5m, other variables ".*"-like text inside their quoted matcher values,
// and a label_values(selector, label) variable query its selector.
// label_values(label), with no selector, gives "".
func FromGrafana(q string) string {
	if strings.HasPrefix(strings.TrimSpace(q), "label_values(") {
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			return ""
		}
		q = m[1]
	}
	q = grafanaIntervals.ReplaceAllString(q, "5m")
	return grafanaVars.ReplaceAllString(q, "var")
}

// DashboardQueries reads a Grafana dashboard and returns the expression of
// every panel target (rows' nested panels included) and of every query
// variable, translated with FromGrafana.
func DashboardQueries(path string) ([]Query, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	type target struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	}
	type panel struct {
		ID      int      `json:"id"`
		Title   string   `json:"title"`
		Type    string   `json:"type"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Query
	var walk func(ps []panel) error
	walk = func(ps []panel) error {
		for _, p := range ps {
			if p.Type != "row" && len(p.Targets) == 0 {
				return fmt.Errorf("%s: panel %d %q has no query", path, p.ID, p.Title)
			}
			for _, t := range p.Targets {
				if strings.TrimSpace(t.Expr) == "" {
					return fmt.Errorf("%s: panel %d %q, target %s: empty expr", path, p.ID, p.Title, t.RefID)
				}
				out = append(out, Query{Where: fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, t.RefID), Expr: FromGrafana(t.Expr)})
			}
			if err := walk(p.Panels); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(d.Panels); err != nil {
		return nil, err
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string, or {"query": "..."} since Grafana 9.
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%s: variable %s: %w", path, v.Name, err)
			}
			q = obj.Query
		}
		if e := FromGrafana(q); e != "" {
			out = append(out, Query{Where: "variable " + v.Name, Expr: e})
		}
	}
	return out, nil
}

// RuleFile is a Prometheus rule file, as far as the checks read it.
type RuleFile struct {
	Groups []struct {
		Name     string `json:"name"`
		Interval string `json:"interval,omitempty"`
		Rules    []Rule `json:"rules"`
	} `json:"groups"`
}

// Rule is an alerting or recording rule.
type Rule struct {
	Alert         string            `json:"alert"`
	Record        string            `json:"record"`
	Expr          string            `json:"expr"`
	For           string            `json:"for"`
	KeepFiringFor string            `json:"keep_firing_for"`
	Labels        map[string]string `json:"labels"`
	Annotations   map[string]string `json:"annotations"`
}

// ReadRules parses a rule file.
func ReadRules(path string) (*RuleFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var f RuleFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &f, nil
}

// RuleQueries returns the expression of every rule of a rule file.
func RuleQueries(path string) ([]Query, error) {
	f, err := ReadRules(path)
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			out = append(out, Query{Where: fmt.Sprintf("rule %s%s (group %s)", r.Alert, r.Record, g.Name), Expr: r.Expr})
		}
	}
	return out, nil
}

// Exposition is what a /metrics scrape holds: the label names seen on each
// sample name (a histogram's samples are name_bucket, name_sum, name_count).
type Exposition map[string]map[string]bool

// ParseExposition reads the Prometheus text format.
func ParseExposition(text string) (Exposition, error) {
	e := Exposition{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			return nil, fmt.Errorf("line %d: no sample: %q", n, line)
		}
		labels := e[line[:end]]
		if labels == nil {
			labels = map[string]bool{}
			e[line[:end]] = labels
		}
		if line[end] != '{' {
			continue
		}
		sel, err := Selectors(line[:strings.LastIndexByte(line, '}')+1])
		if err != nil || len(sel) != 1 {
			return nil, fmt.Errorf("line %d: %q: %v", n, line, err)
		}
		for _, l := range sel[0].Labels {
			labels[l] = true
		}
	}
	return e, sc.Err()
}

// TargetLabels are the labels Prometheus attaches at scrape time (from the
// target, say a ServiceMonitor's), so a server's /metrics never has them.
var TargetLabels = []string{"job", "instance", "namespace", "pod", "service", "endpoint", "container"}

// Missing returns what of sel the exposition lacks: the metric, or label
// names of its matchers that no sample of it carries (target labels aside).
func (e Exposition) Missing(sel Selector) []string {
	labels, ok := e[sel.Metric]
	if !ok {
		return []string{sel.Metric}
	}
	var missing []string
	for _, l := range sel.Labels {
		if !labels[l] && !slices.Contains(TargetLabels, l) {
			missing = append(missing, fmt.Sprintf("%s{%s}", sel.Metric, l))
		}
	}
	return missing
}
