package source

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/controllers/extract"
)

// TestCachedObjectRoundTrip: extraction must see exactly what the informer
// decoded, types included (int64 1 and float64 1 give different CEL results).
func TestObjectRoundTrip(t *testing.T) {
	objects := []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"7","labels":{"b":"2","a":"1"}},"data":{"k":"v"}}`,
		`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n","labels":{}},"spec":{"int":1,"float":1.0,"exp":1e3,"neg":-0.0,"small":1e-300,"big":9223372036854775807,"min":-9223372036854775808,"huge":1e300,"frac":0.1}}`,
		`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n"},"spec":{"empty":{},"list":[],"nil":null,"bools":[true,false],"nested":[[],[{}],[null,1,"s",2.5]],"unicode":"é✓\u0000\ud83d\ude00","escaped":"\"\\/\b\f\n\r\t"}}`,
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},"data":{"password":"cGFzcw=="},"type":"Opaque"}`,
	}
	for _, data := range objects {
		u := referenceTransform(Shape{}, decodeJSON(t, data))
		want := runtime.DeepCopyJSON(u.Object)
		o := decodeObject(t, data, Shape{})
		got, err := o.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
			t.Errorf("round trip of %s:\n got %#v\nwant %#v", data, got, want)
		}
		if o.Source() != extract.SourceOf(u) {
			t.Errorf("source %+v, want %+v", o.Source(), extract.SourceOf(u))
		}
		again, _ := o.Decode()
		if reflect.ValueOf(again).UnsafePointer() == reflect.ValueOf(got).UnsafePointer() {
			t.Error("two extractions share a map")
		}
	}
}

// TestCachedObjectRoundTripRandom round-trips random JSON documents.
func TestObjectRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var value func(depth int) string
	value = func(depth int) string {
		switch n := r.IntN(10); {
		case depth > 4 || n < 2:
			return strconv.Quote(strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(4)))
		case n == 2:
			return strconv.FormatInt(r.Int64()-r.Int64(), 10)
		case n == 3:
			return strconv.FormatFloat(r.NormFloat64()*1e6, 'g', -1, 64)
		case n == 4 && r.IntN(4) == 0:
			return "-0.0"
		case n == 4:
			return fmt.Sprintf("%d.0", r.IntN(100))
		case n == 5:
			return []string{"true", "false", "null"}[r.IntN(3)]
		case n == 6:
			var items []string
			for range r.IntN(4) {
				items = append(items, value(depth+1))
			}
			return "[" + strings.Join(items, ",") + "]"
		default:
			var fields []string
			for i := range r.IntN(5) {
				fields = append(fields, fmt.Sprintf("%q:%s", fmt.Sprintf("f%d", i), value(depth+1)))
			}
			return "{" + strings.Join(fields, ",") + "}"
		}
	}
	for range 2000 {
		data := `{"apiVersion":"v1","kind":"K","metadata":{"name":"n"},"spec":` + value(0) + `}`
		want := runtime.DeepCopyJSON(decodeJSON(t, data).Object)
		got, err := decodeObject(t, data, Shape{}).Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
		}
	}
}

func TestObjectMeta(t *testing.T) {
	data := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"7","labels":{"b":"2","a":"1","kollect.dev/watch":"disabled"}}}`
	u := decodeJSON(t, data)
	o := decodeObject(t, data, Shape{})
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err != nil || key != "ns/a" {
		t.Errorf("key %q, %v", key, err)
	}
	// The informer reads keys and resourceVersions through meta.Accessor:
	// the object itself, nothing built per call.
	if m, err := apimeta.Accessor(o); err != nil || m != metav1.Object(o) || m.GetResourceVersion() != "7" || m.GetUID() != "u-1" {
		t.Errorf("accessor %v, %v", m, err)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = cache.DeletionHandlingMetaNamespaceKeyFunc(o) }); n > 1 {
		t.Errorf("a key costs %v allocations, want the key's string only", n)
	}
	if got := o.GetLabels(); !reflect.DeepEqual(got, u.GetLabels()) {
		t.Errorf("labels %v, want %v", got, u.GetLabels())
	}
	if idx, err := NamespaceIndex(o); err != nil || !reflect.DeepEqual(idx, []string{"ns"}) {
		t.Errorf("namespace index %v, %v", idx, err)
	}
	for _, tc := range []struct {
		selector string
		want     bool
	}{
		{"", true}, {"a=1", true}, {"a=1,b=2", true}, {"a=2", false}, {"c", false}, {"!c", true}, {"b in (1,2)", true}, {"a notin (1)", false},
	} {
		sel, err := labels.Parse(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if got := sel.Matches(o.labels); got != tc.want || got != sel.Matches(labels.Set(u.GetLabels())) {
			t.Errorf("%q matches: %v, want %v", tc.selector, got, tc.want)
		}
	}
	if o.labels.Get("kollect.dev/watch") != "disabled" || o.labels.Has("zz") || o.labels.Get("zz") != "" {
		t.Error("label lookups")
	}
	for _, obj := range []any{o, cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: o}} {
		if ns, name, ok := NameOf(obj); !ok || ns != "ns" || name != "a" {
			t.Errorf("objectName(%T) = %q %q %v", obj, ns, name, ok)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	event := []byte(`{"type":"ADDED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-000001","namespace":"bench","uid":"0b5e1f0e-8c43-4c8e-9d6f-2f1b8e0f7a11","resourceVersion":"123456","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"bench":"collect"},"managedFields":[{"manager":"bench","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{".":{},"f:payload":{},"f:value":{}},"f:metadata":{"f:labels":{".":{},"f:bench":{}}}}}]},"data":{"value":"v0","payload":"` + strings.Repeat("x", 200) + `"}}}`)
	b.Run("event", func(b *testing.B) {
		d := newDecoder(Shape{Fields: ProfileFields(profileOf("{.data.value}", "cel:object.metadata.name"))})
		b.SetBytes(int64(len(event)))
		for b.Loop() {
			if _, _, err := d.event(event); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("dynamic client", func(b *testing.B) {
		b.SetBytes(int64(len(event)))
		for b.Loop() {
			var ev struct {
				Type   string          `json:"type"`
				Object json.RawMessage `json:"object"`
			}
			if err := json.Unmarshal(event, &ev); err != nil {
				b.Fatal(err)
			}
			if _, _, err := unstructured.UnstructuredJSONScheme.Decode(ev.Object, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	_, o, _ := newDecoder(Shape{Fields: ProfileFields(profileOf("{.data.value}", "cel:object.metadata.name"))}).event(event)
	b.Run("decode for extraction", func(b *testing.B) {
		for b.Loop() {
			_, _ = o.(*Object).Decode()
		}
	})
}

func TestCombine(t *testing.T) {
	a, b, c := "a/1", "b/2", "a/3"
	if got := Combine(map[string]Shape{a: {Namespace: "a"}, c: {Namespace: "a", KeepLastApplied: true}}); got != (Shape{Namespace: "a", KeepLastApplied: true}) {
		t.Errorf("same namespace: %+v", got)
	}
	if got := Combine(map[string]Shape{a: {Namespace: "a"}, b: {Namespace: "b", KeepManagedFields: true}}); got != (Shape{KeepManagedFields: true}) {
		t.Errorf("two namespaces: %+v", got)
	}
}

// TestNoisyMetadata: managedFields and the last-applied annotation (a full
// copy of the object, Secret values included) are dropped unless a shape
// keeps them.
func TestNoisyMetadata(t *testing.T) {
	data := []byte(`{"kind":"K","metadata":{"name":"x","managedFields":["m"],"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}}}`)
	decoded := func(shape Shape) map[string]any {
		o, err := Decode(data, shape)
		if err != nil {
			t.Fatal(err)
		}
		m, err := o.Decode()
		if err != nil {
			t.Fatal(err)
		}
		return m["metadata"].(map[string]any)
	}
	meta := decoded(Shape{})
	if _, ok := meta["managedFields"]; ok {
		t.Error("managedFields kept")
	}
	if _, ok := meta["annotations"]; ok {
		t.Error("last-applied kept")
	}
	if len(decoded(Shape{KeepManagedFields: true, KeepLastApplied: true})) != 3 {
		t.Error("kept metadata dropped")
	}
	if _, err := Decode([]byte(`"not an object"`), Shape{}); err == nil {
		t.Error("non-objects must be refused")
	}
}
