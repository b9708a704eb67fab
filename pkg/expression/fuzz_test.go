package expression

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

var seedPaths = []string{
	"{.spec.replicas}",
	"{.spec.template.spec.containers[*].image}",
	`{.status.conditions[?(@.type=="Ready")].status}`,
	"{range .spec.containers[*]}{.name}{end}",
	"{..image}",
	"{.spec.containers[0:2:1].name}",
	"{.spec.containers[-1]}",
	"{.metadata['labels','annotations']}",
	"cel:object.spec.replicas",
	"cel:object.spec.containers.map(c, c.image)",
	"cel:object.metadata.?labels.app.orValue('')",
	"cel:object.spec.containers.filter(c, c.name.startsWith('a')).size()",
	"cel:[object.metadata.name, 1, 2.5, true, null, b'x', {'k': [1]}]",
	"cel:object.spec.containers.map(a, object.spec.containers.map(b, 1))",
	"cel:object.map(k, k)",
	"cel:object.metadata.all(k, v, v != '')",
	"cel:object.spec.containers.map(c, c.name).join(',')",
	"cel:'%s'.format([object.metadata])",
	"cel:object.metadata.name.split('e')",
	"cel:object.metadata.name.replace('', '-')",
	"cel:object.spec.containers != object.spec.containers",
	"cel:'web' in object.metadata.labels",
	"cel:object.spec.containers + [1]",
	"cel:[[1], [2]].flatten()",
	"cel:sets.contains(object.spec.containers, [1])",
	"{.metadata.*}",
	"cel:",
	"{",
	"",
}

const seedObject = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","labels":{"app":"web"}},
"spec":{"replicas":3,"containers":[{"name":"app","image":"nginx"},{"name":"proxy","image":"envoy"}]},
"status":{"conditions":[{"type":"Ready","status":"True"}]}}`

// FuzzCompile checks that no path makes Compile or Evaluate panic.
func FuzzCompile(f *testing.F) {
	for _, p := range seedPaths {
		f.Add(p)
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(seedObject), &obj); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path string) {
		expr, err := Compile(path)
		if err != nil {
			if expr != nil {
				t.Fatalf("Compile(%q) returned an expression and an error", path)
			}
			return
		}
		evaluate(t, expr, obj)
	})
}

// FuzzEvaluate checks that no path and object make Evaluate panic, and that
// every found value is within MaxValueBytes.
func FuzzEvaluate(f *testing.F) {
	for _, p := range seedPaths {
		f.Add(p, seedObject)
	}
	f.Add("{.a[*].b}", `{"a":[{"b":1},{"b":[1,2]},null,{"c":{}}]}`)
	f.Add("cel:object.a.map(x, x.b)", `{"a":[{"b":1},{"b":"s"}]}`)
	f.Fuzz(func(t *testing.T, path, objJSON string) {
		var obj map[string]any
		if json.Unmarshal([]byte(objJSON), &obj) != nil {
			return
		}
		expr, err := Compile(path)
		if err != nil {
			return
		}
		evaluate(t, expr, obj)
	})
}

// evaluate checks one path on one object, and that a second and third
// evaluation give the same outcome: an item's hash must not move while its
// object does not. Maps built by transformMap are walked in no fixed order
// (docs/collection.md), so paths that build them are not held to it.
func evaluate(t *testing.T, expr *Expression, obj map[string]any) {
	t.Helper()
	first := outcome(t, expr, obj)
	if strings.Contains(expr.String(), "transformMap") {
		return
	}
	// The guard on calls (guard.go) changes nothing but what it refuses.
	if strings.HasPrefix(expr.String(), CELPrefix) && first != "cancelled" && !refusedForWork(first) {
		if plain := outcome(t, unguarded(t, expr.String()), obj); plain != first && plain != "cancelled" && !refusedForWork(plain) {
			t.Fatalf("%q: %s; without the guard %s", expr, first, plain)
		}
	}
	for range 2 {
		if again := outcome(t, expr, obj); again != first {
			t.Fatalf("%q: evaluated again, %s; first %s", expr, again, first)
		}
	}
}

func refusedForWork(outcome string) bool {
	return strings.Contains(outcome, "would walk or make") || strings.Contains(outcome, "runtime cost limit")
}

func outcome(t *testing.T, expr *Expression, obj map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	value, found, err := expr.Evaluate(ctx, obj)
	if err != nil || !found {
		if value != nil {
			t.Fatalf("%q: a value %#v without a result", expr, value)
		}
		if ctx.Err() != nil {
			return "cancelled" // how far it got depends on the machine
		}
		return fmt.Sprintf("found=%v err=%v", found, err)
	}
	raw, err := json.Marshal(value)
	if err != nil {
		t.Fatalf("%q: the value %#v is not JSON: %v", expr, value, err)
	}
	if len(raw) > MaxValueBytes {
		t.Fatalf("%q: a value of %d bytes", expr, len(raw))
	}
	return string(raw)
}
