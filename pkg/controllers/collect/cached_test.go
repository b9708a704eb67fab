package collect

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"kollect.dev/kollect/pkg/controllers/extract"
)

// decodeJSON decodes an object the way the dynamic client does.
func decodeJSON(t testing.TB, data string) *unstructured.Unstructured {
	t.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return obj.(*unstructured.Unstructured)
}

// TestCachedObjectRoundTrip: extraction must see exactly what the informer
// decoded, types included (int64 1 and float64 1 give different CEL results).
func TestCachedObjectRoundTrip(t *testing.T) {
	objects := []string{
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"7","labels":{"b":"2","a":"1"}},"data":{"k":"v"}}`,
		`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n","labels":{}},"spec":{"int":1,"float":1.0,"exp":1e3,"neg":-0.0,"small":1e-300,"big":9223372036854775807,"min":-9223372036854775808,"huge":1e300,"frac":0.1}}`,
		`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n"},"spec":{"empty":{},"list":[],"nil":null,"bools":[true,false],"nested":[[],[{}],[null,1,"s",2.5]],"unicode":"é✓\u0000\ud83d\ude00","escaped":"\"\\/\b\f\n\r\t"}}`,
		`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},"data":{"password":"cGFzcw=="},"type":"Opaque"}`,
	}
	for _, data := range objects {
		u := decodeJSON(t, data)
		want := runtime.DeepCopyJSON(u.Object)
		o, ok := compact(u, nil).(*cachedObject)
		if !ok || o.raw == nil {
			t.Fatalf("%s: not compacted: %#v", data, o)
		}
		got, err := o.Object()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
			t.Errorf("round trip of %s:\n got %#v\nwant %#v", data, got, want)
		}
		if o.Source() != extract.SourceOf(u) {
			t.Errorf("source %+v, want %+v", o.Source(), extract.SourceOf(u))
		}
		again, _ := o.Object()
		if reflect.ValueOf(again).UnsafePointer() == reflect.ValueOf(got).UnsafePointer() {
			t.Error("two extractions share a map")
		}
	}
}

// sameJSON compares encodings too: DeepEqual does not tell -0 from 0.
func sameJSON(t testing.TB, a, b any) bool {
	t.Helper()
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	return bytes.Equal(ja, jb)
}

// TestCachedObjectRoundTripRandom round-trips random JSON documents.
func TestCachedObjectRoundTripRandom(t *testing.T) {
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
		u := decodeJSON(t, `{"apiVersion":"v1","kind":"K","metadata":{"name":"n"},"spec":`+value(0)+`}`)
		want := runtime.DeepCopyJSON(u.Object)
		got, err := compact(u, nil).(*cachedObject).Object()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
			t.Fatalf("round trip:\n got %#v\nwant %#v", got, want)
		}
	}
}

func TestCachedObjectMeta(t *testing.T) {
	u := decodeJSON(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns","uid":"u-1","resourceVersion":"7","labels":{"b":"2","a":"1","kollect.dev/watch":"disabled"}}}`)
	o := compact(u, nil).(*cachedObject)
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err != nil || key != "ns/a" {
		t.Errorf("key %q, %v", key, err)
	}
	if idx, err := namespaceIndex(o); err != nil || !reflect.DeepEqual(idx, []string{"ns"}) {
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
	if o.labels.Get(labelWatch) != "disabled" || o.labels.Has("zz") || o.labels.Get("zz") != "" {
		t.Error("label lookups")
	}
	for _, obj := range []any{o, cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: o}} {
		if ns, name, ok := objectName(obj); !ok || ns != "ns" || name != "a" {
			t.Errorf("objectName(%T) = %q %q %v", obj, ns, name, ok)
		}
	}
	if out := compact(o, nil); out != o {
		t.Error("compacting twice must keep the object")
	}
}

func BenchmarkCachedObject(b *testing.B) {
	u := decodeJSON(b, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-000001","namespace":"bench","uid":"0b5e1f0e-8c43-4c8e-9d6f-2f1b8e0f7a11","resourceVersion":"123456","creationTimestamp":"2026-01-01T00:00:00Z","labels":{"bench":"collect"}},"data":{"value":"v0","payload":"`+strings.Repeat("x", 200)+`"}}`)
	b.Run("compact", func(b *testing.B) {
		for b.Loop() {
			compact(u, nil)
		}
	})
	o := compact(u, nil).(*cachedObject)
	b.Run("decode", func(b *testing.B) {
		for b.Loop() {
			_, _ = o.Object()
		}
	})
}

func TestQueuedObject(t *testing.T) {
	k := objectKey{target: targetKey{Namespace: "ns", Name: "web"}, namespace: "ns", name: "a"}
	same := objectKey{target: targetKey{Namespace: "ns", Name: strings.Clone("web")}, namespace: strings.Clone("ns"), name: "a"}
	if k.queued() != same.queued() {
		t.Error("equal keys must queue as one")
	}
	if k.queued() == (objectKey{target: targetKey{Cluster: true, Name: "web"}, namespace: "ns", name: "a"}).queued() {
		t.Error("a ClusterTarget's key equals a Target's")
	}
	if k.queued().key() != k {
		t.Errorf("round trip: %+v", k.queued().key())
	}
	if got := k.queued().String(); got != "Target ns/web: ns/a" {
		t.Errorf("String() = %q", got)
	}
}
