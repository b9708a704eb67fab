package expression

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestCELWalksMapsInKeyOrder: an expression whose result follows the order
// of a map's keys gives the same value at every evaluation. Go's map order
// differs between runs, so twenty evaluations of a map of twenty keys would
// agree by chance with a probability far below one in a million.
func TestCELWalksMapsInKeyOrder(t *testing.T) {
	labels := map[string]any{}
	var sorted []any
	for i := range 20 {
		k := fmt.Sprintf("k%02d", i)
		labels[k] = int64(i)
		sorted = append(sorted, k)
	}
	obj := map[string]any{
		"metadata": map[string]any{"labels": labels},
		"spec":     map[string]any{"list": []any{map[string]any{"b": int64(1), "a": int64(2), "c": int64(3)}}},
	}
	tests := []struct {
		expr string
		want any
	}{
		{"cel:object.metadata.labels.map(k, k)", sorted},
		{"cel:object.metadata.labels.filter(k, object.metadata.labels[k] < 3)", []any{"k00", "k01", "k02"}},
		{"cel:object.metadata.labels.transformList(k, v, v)", []any{
			int64(0), int64(1), int64(2), int64(3), int64(4), int64(5), int64(6), int64(7), int64(8), int64(9),
			int64(10), int64(11), int64(12), int64(13), int64(14), int64(15), int64(16), int64(17), int64(18), int64(19)}},
		{"cel:object.spec.list[0].map(k, k)", []any{"a", "b", "c"}},
		{"cel:object.map(k, k)", []any{"metadata", "spec"}},
		{"cel:{'b': 1, 'a': 2, 'd': 3, 'c': 4}.map(k, k)", []any{"a", "b", "c", "d"}},
		{"cel:{3: 'x', 1: 'y', 2: 'z'}.map(k, k)", []any{int64(1), int64(2), int64(3)}},
		{"cel:{'b': 1, 1: 2, true: 3, 'a': 4}.map(k, string(k)).join(',')", "true,1,a,b"},
	}
	for _, tt := range tests {
		expr, err := Compile(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		for i := range 20 {
			got, found, err := expr.Evaluate(context.Background(), obj)
			if err != nil || !found || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("%s, evaluation %d: got %#v found=%v err=%v, want %#v", tt.expr, i, got, found, err, tt.want)
			}
		}
	}
}

// TestOrderedMapsKeepMapSemantics: the ordered maps still compare, index and
// test membership as CEL maps do.
func TestOrderedMapsKeepMapSemantics(t *testing.T) {
	obj := map[string]any{"spec": map[string]any{"a": int64(1), "b": map[string]any{"c": "d"}}}
	tests := []struct {
		expr string
		want any
	}{
		{"cel:object.spec == {'a': 1, 'b': {'c': 'd'}}", true},
		{"cel:{'b': {'c': 'd'}, 'a': 1} == object.spec", true},
		{"cel:'a' in object.spec && !('z' in object.spec)", true},
		{"cel:object.spec.b.c", "d"},
		{"cel:size(object.spec)", int64(2)},
		{"cel:object.spec.all(k, v, k != 'z')", true},
		{"cel:object.spec", map[string]any{"a": int64(1), "b": map[string]any{"c": "d"}}},
		{"cel:object.spec.transformMap(k, v, k)", map[string]any{"a": "a", "b": "b"}},
	}
	for _, tt := range tests {
		expr, err := Compile(tt.expr)
		if err != nil {
			t.Fatalf("%s: %v", tt.expr, err)
		}
		got, found, err := expr.Evaluate(context.Background(), obj)
		if err != nil || !found || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: got %#v found=%v err=%v, want %#v", tt.expr, got, found, err, tt.want)
		}
	}
}

// TestOrderHoldsOnHostileInput: what the adapter cannot order is refused,
// and what it wraps keeps the behaviour of the map it wraps.
func TestOrderHoldsOnHostileInput(t *testing.T) {
	labels := map[string]any{}
	for i := range 20 {
		labels[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
	}
	obj := map[string]any{
		"metadata": map[string]any{"labels": labels, "annotations": map[string]any{}},
		"pods": map[string]any{"p": map[string]any{"containers": []any{map[string]any{"image": "nginx"}}},
			"q": map[string]any{"containers": []any{map[string]any{"image": "envoy"}}}},
		"spec": map[string]any{"a": []any{int64(1)}, "b": "x", "c": int64(5), "d": true, "l1": []any{int64(1)}, "l2": []any{int64(1)},
			"empty": []any{}},
	}
	tests := []struct{ path, want string }{
		// cel-go builds messages without the adapter: refused.
		{"cel:google.protobuf.Struct{fields: object.metadata.labels}.map(k, k)", "compile: invalid CEL expression: message construction (google.protobuf.Struct{...}) is not supported; use a map"},
		{"cel:google.protobuf.Value{string_value: 'x'}", "compile: invalid CEL expression: message construction (google.protobuf.Value{...}) is not supported; use a map"},
		// A key CEL does not allow has no order: an error, every time.
		{"cel:{dyn(object.spec.l1): 'a', dyn(object.spec.l2): 'b'}.transformList(k, v, v)", "error: CEL evaluation failed: unsupported map key type list: CEL map keys are bool, int, uint or string"},
		// Keys of a type CEL maps do not take are refused at admission
		// (cel-go panicked on bytes keys).
		{"cel:{b'a': 1}", "compile: invalid CEL expression: a map key of type bytes: CEL map keys are bool, int, uint or string"},
		{"cel:{1.5: 1}", "compile: invalid CEL expression: a map key of type double: CEL map keys are bool, int, uint or string"},
		{"cel:{dyn(1.5): 1}", "error: CEL evaluation failed: unsupported map key type double: CEL map keys are bool, int, uint or string"},
		// The wrapper keeps the emptiness test of the map it wraps.
		{"cel:optional.ofNonZeroValue({}).hasValue()", "false"},
		{"cel:optional.ofNonZeroValue(object.metadata.annotations)", "not found"},
		{"cel:optional.ofNonZeroValue(object.metadata.labels).hasValue()", "true"},
		{"cel:optional.ofNonZeroValue(object.spec.empty)", "not found"},
		{"cel:optional.ofNonZeroValue(object.spec.a)", "[1]"},
		// A map or list of the object as a key: refused, not a panic.
		{"cel:{dyn(object.spec): 1}", "error: CEL evaluation failed: unsupported map key type map: CEL map keys are bool, int, uint or string"},
		{"cel:{dyn(object.spec.a): 1}", "error: CEL evaluation failed: unsupported map key type list: CEL map keys are bool, int, uint or string"},
		// Two-variable comprehensions over the object's lists and maps.
		{"cel:object.spec.a.all(i, v, i == 0 && v == 1)", "true"},
		{"cel:object.spec.transformList(k, v, k)", `["a","b","c","d","empty","l1","l2"]`},
		// cel-go's error for it printed the whole value: refused.
		{"cel:[?object.spec]", "compile: invalid CEL expression: an optional element ([?x]) must be an optional value, such as object.?field or optional.of(x)"},
		// The first failing entry of a built map is always the same one.
		{"cel:object.metadata.labels.transformMap(k, v, k == 'k00' ? dyn(1.0/0.0) : dyn(type(v)))", "error: the CEL result is NaN or infinite, which JSON cannot hold"},
		// A JSONPath wildcard that cannot be followed from some of the
		// values it reaches matches nothing, whichever it meets first.
		{"{.spec.*[0]}", "not found"},
		{"{.spec.*[5:]}", "not found"},
		{`{.spec.*[?(@.x=="y")]}`, "not found"},
		{"{.spec.*}", `["x",5,[1],[1],[1],[],true]`},
		// An index out of range is not found, wildcard or not.
		{"{..containers[1].image}", "not found"},
		{"{.pods.*.containers[1].image}", "not found"},
		{"{.pods.*.containers[0].image}", `["envoy","nginx"]`},
		{"{.spec.a[1]}", "not found"},
	}
	for _, tt := range tests {
		first := outcomeOf(tt.path, obj)
		for i := range 30 {
			if got := outcomeOf(tt.path, obj); got != first {
				t.Errorf("%s, evaluation %d: %s; first %s", tt.path, i+1, got, first)
				break
			}
		}
		if first != tt.want {
			t.Errorf("%s: %s, want %s", tt.path, first, tt.want)
		}
	}
}

// outcomeOf compiles and evaluates a path and says what came out.
func outcomeOf(path string, obj map[string]any) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("panic: %v", r)
		}
	}()
	expr, err := Compile(path)
	if err != nil {
		return "compile: " + err.Error()
	}
	value, found, err := expr.Evaluate(context.Background(), obj)
	switch {
	case err != nil:
		return "error: " + err.Error()
	case !found:
		return "not found"
	}
	raw, _ := json.Marshal(value)
	return string(raw)
}

// TestObjectValuesAreNotConverted: a result that is the object's own map or
// list is returned as it is, and one far over MaxValueBytes is refused
// before it is encoded (it took 2.9 s to convert and encode eight copies of
// a map of 230,000 labels).
func TestObjectValuesAreNotConverted(t *testing.T) {
	labels := map[string]any{}
	for i := range 50_000 {
		labels[fmt.Sprintf("k%06d", i)] = "v"
	}
	list := []any{map[string]any{"x": int64(1)}, "s", nil}
	obj := map[string]any{"metadata": map[string]any{"labels": labels}, "spec": map[string]any{"list": list}}
	for path, want := range map[string]any{"cel:object.metadata.labels": labels, "cel:object.spec.list": list, "cel:object.spec.list[0]": list[0]} {
		expr, err := Compile(path)
		if err != nil {
			t.Fatal(err)
		}
		got, found, err := expr.Evaluate(context.Background(), obj)
		if path == "cel:object.metadata.labels" {
			if !errors.Is(err, errValueTooLarge) {
				t.Errorf("%s: found=%v err=%v, want the size error", path, found, err)
			}
			continue
		}
		if err != nil || !found || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v found=%v err=%v", path, got, found, err)
		}
	}
	expr, err := Compile("cel:[object.metadata.labels, object.metadata.labels, object.metadata.labels, object.metadata.labels]")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := expr.Evaluate(context.Background(), obj); !errors.Is(err, errValueTooLarge) {
		t.Errorf("four copies of the labels: %v, want the size error", err)
	}
}

// TestJSONSizeAtLeast: the shortcut is a lower bound of the encoding, equal
// to it where no character needs escaping and numbers have one digit, and
// it stops counting at the limit.
func TestJSONSizeAtLeast(t *testing.T) {
	values := []any{
		nil, true, int64(7), "", "abc", map[string]any{}, []any{},
		map[string]any{"a": "b", "c": []any{int64(1), nil, true, map[string]any{"d": map[string]any{}}}},
		[]any{[]any{}, []any{"x"}, map[string]any{"k": "v", "k2": []any{}}},
	}
	for _, v := range values {
		raw, _ := json.Marshal(v)
		if got, deep := jsonSizeAtLeast(v, 1<<30, 0); deep || got != len(raw) {
			t.Errorf("%s: %d %v, want %d", raw, got, deep, len(raw))
		}
	}
	for _, v := range []any{"a<b\n", float64(1234.5), int64(-100), false, map[string]any{"\u00e9": "\x00"}} {
		raw, _ := json.Marshal(v)
		if got, deep := jsonSizeAtLeast(v, 1<<30, 0); deep || got > len(raw) {
			t.Errorf("%s: %d %v, more than the encoding's %d", raw, got, deep, len(raw))
		}
	}
	long := make([]any, 1000)
	for i := range long {
		long[i] = "0123456789"
	}
	if got, deep := jsonSizeAtLeast(long, 100, 0); deep || got < 100 || got > 200 {
		t.Errorf("a limit of 100 counted %d %v", got, deep)
	}
}

// TestDeepObjectValueRefused: the object's own maps reach the result
// without conversion, and one nested deeper than maxDepth is refused as a
// built one is, by CEL and JSONPath alike.
func TestDeepObjectValueRefused(t *testing.T) {
	deep := any("leaf")
	for range maxDepth + 5 {
		deep = map[string]any{"d": deep}
	}
	obj := map[string]any{"spec": deep}
	for _, path := range []string{"cel:object.spec", "cel:[[object.spec]]", "{.spec}"} {
		if got := outcomeOf(path, obj); got != "error: "+errTooDeep.Error() {
			t.Errorf("%s: %s", path, got)
		}
	}
	shallow := map[string]any{"spec": map[string]any{"d": map[string]any{"d": "leaf"}}}
	if got := outcomeOf("cel:object.spec", shallow); got != `{"d":{"d":"leaf"}}` {
		t.Errorf("shallow: %s", got)
	}
}

// TestDeepAndLargeOneMessage: a value both too large and too deep is too
// large, whatever order its maps are walked in.
func TestDeepAndLargeOneMessage(t *testing.T) {
	deep := any("leaf")
	for range maxDepth + 1 {
		deep = map[string]any{"d": deep}
	}
	obj := map[string]any{"spec": map[string]any{"a": deep, "b": strings.Repeat("x", MaxValueBytes+10)}}
	for _, path := range []string{"{.spec}", "cel:object.spec", "{.*}"} {
		for i := range 50 {
			if got := outcomeOf(path, obj); got != "error: "+errValueTooLarge.Error() {
				t.Fatalf("%s, evaluation %d: %s", path, i, got)
			}
		}
	}
}

// TestJSONPathMistakesRefused: what fails on any data once data reaches it
// is refused at compile time, since under a wildcard it would match
// nothing on every object; and a value quoting client-go's out-of-range
// message is not taken for one.
func TestJSONPathMistakesRefused(t *testing.T) {
	for path, want := range map[string]string{
		`{..containers[?(@.name == nginx)].image}`: `unrecognized identifier nginx`,
		`{.containers[?(@.name == nginx)].image}`:  `unrecognized identifier nginx`,
		`{..containers[0:2:0]}`:                    `the step of a slice must be greater than 0`,
		`{..containers[2:1]}`:                      `the slice starts at 2, after its end 1`,
		`{..containers[-1:-2]}`:                    `the slice starts at -1, after its end -2`,
	} {
		if _, err := Compile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", path, err, want)
		}
	}
	for _, path := range []string{`{..containers[?(@.name == "nginx")].image}`, `{range .items[*]}{.name}{end}`, `{.a[-2:]}`, `{.a[1:1]}`, `{.a[::2]}`, `{.a[-2:-1]}`, `{.a[-1:0]}`, `{.a[1:-1]}`} {
		if _, err := Compile(path); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	obj := map[string]any{"spec": map[string]any{"s": "array index out of bounds: index 1, length 0"}}
	if got := outcomeOf(`{.spec.s[?(@.x == "y")]}`, obj); !strings.HasPrefix(got, "error: ") {
		t.Errorf("a value quoting the out-of-range message: %s", got)
	}
}
