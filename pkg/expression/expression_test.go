package expression

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

func testObject() map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata": map[string]any{
			"name":      "web",
			"namespace": "team-a",
			"labels":    map[string]any{"app": "web"},
		},
		"spec": map[string]any{
			"replicas": int64(3),
			"paused":   nil,
			"containers": []any{
				map[string]any{"name": "app", "image": "nginx:1.27"},
				map[string]any{"name": "proxy", "image": "envoy:1.30"},
			},
			"single": []any{
				map[string]any{"name": "only", "image": "busybox"},
			},
		},
		"status": map[string]any{
			"conditions": []any{
				map[string]any{"type": "Available", "status": "True"},
				map[string]any{"type": "Progressing", "status": "False"},
			},
		},
	}
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name       string
		path       string
		obj        map[string]any
		want       any
		wantFound  bool
		compileErr string // substring of the Compile error
		evalErr    string // substring of the Evaluate error
	}{
		// JSONPath
		{name: "jsonpath scalar", path: "{.spec.replicas}", want: int64(3), wantFound: true},
		{name: "jsonpath string", path: "{.metadata.name}", want: "web", wantFound: true},
		{name: "jsonpath object", path: "{.metadata.labels}", want: map[string]any{"app": "web"}, wantFound: true},
		{name: "jsonpath null is found", path: "{.spec.paused}", want: nil, wantFound: true},
		{name: "jsonpath index", path: "{.spec.containers[1].image}", want: "envoy:1.30", wantFound: true},
		{name: "jsonpath negative index", path: "{.spec.containers[-1].name}", want: "proxy", wantFound: true},
		{name: "jsonpath wildcard", path: "{.spec.containers[*].image}", want: []any{"nginx:1.27", "envoy:1.30"}, wantFound: true},
		{name: "jsonpath wildcard single match is an array", path: "{.spec.single[*].image}", want: []any{"busybox"}, wantFound: true},
		{name: "jsonpath slice is an array", path: "{.spec.containers[0:1].name}", want: []any{"app"}, wantFound: true},
		{name: "jsonpath filter", path: `{.status.conditions[?(@.type=="Available")].status}`, want: []any{"True"}, wantFound: true},
		{name: "jsonpath filter without match", path: `{.status.conditions[?(@.type=="Ready")].status}`, wantFound: false},
		{name: "jsonpath union", path: "{.spec.containers[0,1].name}", want: []any{"app", "proxy"}, wantFound: true},
		{name: "jsonpath recursive descent is sorted", path: "{..image}", want: []any{"busybox", "envoy:1.30", "nginx:1.27"}, wantFound: true},
		{name: "jsonpath map wildcard is sorted", path: "{.metadata.*}", want: []any{"team-a", "web", map[string]any{"app": "web"}}, wantFound: true},
		{name: "jsonpath range", path: "{range .spec.containers[*]}{.name}{end}", want: []any{"app", "proxy"}, wantFound: true},
		{name: "jsonpath missing key", path: "{.spec.template.spec}", wantFound: false},
		{name: "jsonpath missing key under wildcard", path: "{.spec.containers[*].ports}", wantFound: false},
		{name: "jsonpath index out of range", path: "{.spec.containers[5].image}", wantFound: false},
		{name: "jsonpath not a list", path: "{.metadata.name[0]}", evalErr: "is not array or slice"},
		{name: "jsonpath without braces", path: ".spec.replicas", compileErr: "must be enclosed in braces"},
		{name: "jsonpath empty", path: "", compileErr: "must be enclosed in braces"},
		{name: "jsonpath unterminated", path: "{.spec.containers[}", compileErr: "invalid JSONPath"},
		{name: "jsonpath bad index", path: "{.spec.containers[x]}", compileErr: "invalid JSONPath"},
		{name: "jsonpath text between blocks", path: "{.metadata.name}-{.metadata.namespace}", compileErr: "text outside {}"},
		{name: "jsonpath string literal", path: `{"literal"}`, compileErr: "string literals"},
		{name: "jsonpath end without range", path: "{end}", compileErr: "{end} without its {range}"},
		{name: "jsonpath range without end", path: "{range .spec.containers[*]}{.name}", compileErr: "{range} without its {end}"},

		// CEL
		{name: "cel scalar", path: "cel:object.spec.replicas", want: int64(3), wantFound: true},
		{name: "cel map over containers", path: "cel:object.spec.containers.map(c, c.image)", want: []any{"nginx:1.27", "envoy:1.30"}, wantFound: true},
		{name: "cel filter then map", path: "cel:object.spec.containers.filter(c, c.name == 'app').map(c, c.image)", want: []any{"nginx:1.27"}, wantFound: true},
		{name: "cel exists", path: "cel:object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')", want: true, wantFound: true},
		{name: "cel built map", path: "cel:{'name': object.metadata.name, 'n': 1.5}", want: map[string]any{"name": "web", "n": 1.5}, wantFound: true},
		{name: "cel strings library", path: "cel:object.metadata.name.upperAscii()", want: "WEB", wantFound: true},
		{name: "cel lists library", path: "cel:object.spec.containers.map(c, c.name).reverse()", want: []any{"proxy", "app"}, wantFound: true},
		{name: "cel missing key is not found", path: "cel:object.spec.template.spec", wantFound: false},
		{name: "cel index out of range is not found", path: "cel:object.spec.containers[5].image", wantFound: false},
		{name: "cel optional absent", path: "cel:object.spec.?template.?spec", wantFound: false},
		{name: "cel optional present", path: "cel:object.metadata.?labels.?app", want: "web", wantFound: true},
		{name: "cel optional default", path: "cel:object.metadata.?annotations.orValue({})", want: map[string]any{}, wantFound: true},
		{name: "cel null", path: "cel:null", want: nil, wantFound: true},
		{name: "cel timestamp", path: "cel:timestamp('2024-01-02T03:04:05Z')", want: "2024-01-02T03:04:05Z", wantFound: true},
		{name: "cel bytes", path: "cel:b'hi'", want: "aGk=", wantFound: true},
		{name: "cel non string map key", path: "cel:{1: 'a'}", evalErr: "JSON keys are strings"},
		{name: "cel division by zero", path: "cel:object.spec.replicas / 0", evalErr: "division by zero"},
		{name: "cel wrong type at runtime", path: "cel:object.metadata.name + 1", evalErr: "CEL evaluation failed"},
		{name: "cel NaN", path: "cel:double(object.spec.replicas) / 0.0 * 0.0", evalErr: "NaN"},
		{name: "cel syntax error", path: "cel:object.spec.(", compileErr: "invalid CEL expression at line 1, column"},
		{name: "cel nested too deeply has no position", path: "cel:" + strings.Repeat("[", 200) + strings.Repeat("]", 200), compileErr: "invalid CEL expression: expression recursion limit exceeded: 100"},
		{name: "cel undeclared reference", path: "cel:self.spec", compileErr: "undeclared reference"},
		{name: "cel empty", path: "cel: ", compileErr: "empty"},
		{name: "cel nested loops over budget", path: "cel:object.spec.containers.map(a, object.spec.containers.map(b, object.spec.containers.map(c, a.name + b.name + c.name)))", compileErr: "too expensive"},
		{name: "cel two nested loops over budget", path: "cel:object.spec.containers.map(a, object.spec.containers.exists(b, a.name == b.name))", compileErr: "too expensive"},
		{name: "cel unbounded range over budget", path: "cel:lists.range(object.spec.replicas)", compileErr: "too expensive"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			expr, err := Compile(tc.path)
			if !matchErr(t, "Compile", err, tc.compileErr) || err != nil {
				return
			}
			if expr.String() != tc.path {
				t.Errorf("String() = %q, want %q", expr.String(), tc.path)
			}
			obj := tc.obj
			if obj == nil {
				obj = testObject()
			}
			got, found, err := expr.Evaluate(context.Background(), obj)
			if !matchErr(t, "Evaluate", err, tc.evalErr) || err != nil {
				return
			}
			if found != tc.wantFound {
				t.Fatalf("found = %v, want %v (value %#v)", found, tc.wantFound, got)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("value = %#v, want %#v", got, tc.want)
			}
		})
	}
}

// matchErr reports whether err matches the wanted error substring, failing
// the test when it does not. An empty want means no error.
func matchErr(t *testing.T, op string, err error, want string) bool {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s: unexpected error: %v", op, err)
		return false
	case want != "" && err == nil:
		t.Errorf("%s: no error, want one containing %q", op, want)
		return false
	case want != "" && !strings.Contains(err.Error(), want):
		t.Errorf("%s: error %q does not contain %q", op, err, want)
		return false
	}
	if err != nil && (strings.Contains(err.Error(), "\n") || len(err.Error()) > 300) {
		t.Errorf("%s: error is not one short line: %q", op, err)
	}
	return true
}

func stringList(n, length int) []any {
	items := make([]any, n)
	for i := range items {
		items[i] = strings.Repeat("a", length)
	}
	return items
}

func TestRuntimeCostLimit(t *testing.T) {
	// The estimate allows a loop over a list of the object; evaluation on a
	// large list built from the object costs more than RuntimeCostLimit.
	expr, err := Compile("cel:object.items.map(x, x.matches('^[a-z]+[a-z]*[a-z]*$'))")
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	if _, found, err := expr.Evaluate(context.Background(), map[string]any{"items": stringList(10, 100)}); err != nil || !found {
		t.Fatalf("small list: found=%v err=%v", found, err)
	}
	_, found, err := expr.Evaluate(context.Background(), map[string]any{"items": stringList(100, 30_000)})
	if err == nil || !strings.Contains(err.Error(), "runtime cost limit") {
		t.Fatalf("big list: found=%v err=%v, want the runtime cost limit error", found, err)
	}
}

func TestEvaluateCancelled(t *testing.T) {
	expr, err := Compile("cel:object.items.map(x, x + 'b')")
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = expr.Evaluate(ctx, map[string]any{"items": stringList(1000, 1)})
	if err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("err = %v, want a cancellation", err)
	}
}

func TestValueTooLarge(t *testing.T) {
	big := strings.Repeat("x", MaxValueBytes)
	for _, path := range []string{"{.data.big}", "cel:object.data.big", "{.data.*}"} {
		expr, err := Compile(path)
		if err != nil {
			t.Fatalf("Compile(%q): %v", path, err)
		}
		_, found, err := expr.Evaluate(context.Background(), map[string]any{"data": map[string]any{"big": big}})
		if err == nil || !strings.Contains(err.Error(), "larger than 256 KiB") {
			t.Errorf("%s: found=%v err=%v, want the size error", path, found, err)
		}
	}
}

// TestEvaluateRepeatedly checks that a compiled JSONPath with a range can be
// evaluated again: the client-go evaluator keeps state while it runs.
func TestEvaluateRepeatedly(t *testing.T) {
	expr, err := Compile("{range .spec.containers[*]}{.name}{end}")
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	for i := 0; i < 3; i++ {
		got, found, err := expr.Evaluate(context.Background(), testObject())
		if err != nil || !found || !reflect.DeepEqual(got, []any{"app", "proxy"}) {
			t.Fatalf("run %d: got %#v found=%v err=%v", i, got, found, err)
		}
	}
}
