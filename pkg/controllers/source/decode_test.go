package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/controllers/extract"
)

// The reference: what the collector's informers kept before this package
// decoded JSON itself. The dynamic client's decoding, then the transform
// that dropped managedFields and the last-applied annotation, then the
// trim of the decoded maps to the shape's fields. The decoder must keep
// exactly what these keep.

// decodeJSON decodes an object the way the dynamic client does.
func decodeJSON(t testing.TB, data string) *unstructured.Unstructured {
	t.Helper()
	obj, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return obj.(*unstructured.Unstructured)
}

// referenceTransform drops what no user needs, in place.
func referenceTransform(shape Shape, u *unstructured.Unstructured) *unstructured.Unstructured {
	meta, ok := u.Object["metadata"].(map[string]any)
	if !ok {
		return u
	}
	if !shape.KeepManagedFields {
		delete(meta, "managedFields")
	}
	if !shape.KeepLastApplied {
		if annotations, ok := meta["annotations"].(map[string]any); ok {
			delete(annotations, extract.LastAppliedAnnotation)
			if len(annotations) == 0 {
				delete(meta, "annotations")
			}
		}
	}
	return u
}

// referenceTrim trims a decoded object to a tree, in place.
func referenceTrim(t fieldTree, m map[string]any) {
	if t == nil {
		return
	}
	for key, value := range m {
		sub, ok := t[key]
		if !ok {
			delete(m, key)
			continue
		}
		if child, isMap := value.(map[string]any); isMap && len(sub) > 0 {
			referenceTrim(sub, child)
		}
	}
}

// reference is what extraction was given, and the metadata matching read.
func reference(u *unstructured.Unstructured, shape Shape) (map[string]any, extractView) {
	view := extractView{source: extract.SourceOf(u), labels: u.GetLabels()}
	if len(view.labels) == 0 {
		view.labels = nil // no labels, whether absent or {}: matching sees none either way
	}
	referenceTransform(shape, u)
	obj := runtime.DeepCopyJSON(u.Object)
	referenceTrim(newFieldTree(shape.Fields), obj)
	return obj, view
}

type extractView struct {
	source any
	labels map[string]string
}

func viewOf(o *Object) extractView {
	var labels map[string]string
	for _, p := range o.labels {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[p.key.Value()] = p.value.Value()
	}
	return extractView{source: o.Source(), labels: labels}
}

// decodeObject decodes an object as a watch event carries it.
func decodeObject(t testing.TB, data string, shape Shape) *Object {
	t.Helper()
	_, obj, err := newDecoder(shape).event([]byte(`{"type":"ADDED","object":` + data + `}`))
	if err != nil {
		t.Fatalf("%s: %v", data, err)
	}
	return obj.(*Object)
}

// checkAgainstReference decodes data in every shape and compares with the
// reference; data must be an object the dynamic client decodes.
func checkAgainstReference(t *testing.T, data string, shapes []Shape) {
	t.Helper()
	for _, shape := range shapes {
		want, wantView := reference(decodeJSON(t, data), shape)
		o := decodeObject(t, data, shape)
		got, err := o.Decode()
		if err != nil {
			t.Fatalf("%s in %+v: %v", data, shape, err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) {
			t.Fatalf("%s in %+v:\n got %#v\nwant %#v", data, shape, got, want)
		}
		if gotView := viewOf(o); !reflect.DeepEqual(gotView, wantView) {
			t.Fatalf("%s: metadata\n got %+v\nwant %+v", data, gotView, wantView)
		}
	}
}

// testShapes are the shapes every decoded object is checked in.
func testShapes() []Shape {
	shapes := []Shape{{}, {KeepManagedFields: true}, {KeepLastApplied: true}, {KeepManagedFields: true, KeepLastApplied: true}}
	for _, paths := range [][]string{
		{"{.data.value}", "cel:object.metadata.name"},
		{"{.metadata}"},
		{"{.metadata.annotations}"},
		{"{.metadata.annotations.a/b}"},
		{"{.metadata.labels.app}", "{.spec.template.spec.containers[*].image}"},
		{"{.spec.a\\.b.c}", "{.spec.list[0].x.y}"},
		{"{.status}"},
	} {
		fields := ProfileFields(profileOf(paths...))
		shapes = append(shapes, Shape{Fields: fields}, Shape{Fields: fields, KeepLastApplied: true})
	}
	return shapes
}

// hardObjects are the odd cases: duplicate names (the last wins), values
// of the wrong type, escapes in names, empty and null containers.
var hardObjects = []string{
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{}},"data":{}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{"x":"1"},"annotations":{}}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{},"annotations":{"x":"1"}}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}","b":"c"}}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","annotations":null,"managedFields":[{"manager":"m"}],"managedFields":null}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"a":1,"a":"x","b":"y"}}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"a":"x","a":1}}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","labels":{"a":"x"},"labels":[]}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"metadata":{"namespace":"ns"}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"metadata":null}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":"a string"}`,
	`{"apiVersion":"v1","kind":5,"kind":"ConfigMap","metadata":{"name":7,"name":"b","uid":true}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"value":"1"},"data":"whole"}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":"whole","data":{"value":"1","payload":"p"}}`,
	`{"api\u0056ersion":"v1","kind":"ConfigMap","m\u0065tadata":{"n\u0061me":"esc","l\u0061bels":{"k\u0065y":"v\u00e9"}},"d\u0061ta":{"v\u0061lue":"1"}}`,
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"\u00e9\ud83d\ude00\"\\","namespace":"n\/s"}}`,
	"{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"a\xffb\",\"labels\":{\"k\":\"\xfe\"}}}",
	` { "apiVersion" : "v1" , "kind" : "ConfigMap" , "metadata" : { "name" : "spaced" , "labels" : { "a" : "b" } } , "data" : { "value" : [ 1 , 2.5 , -0 , 1e300 ] } } `,
	`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n","managedFields":[]},"spec":{"a.b":{"c":{"d":1}},"list":[{"x":{"y":1}}],"nested":{"a":{"b":{"c":[{}]}}}},"status":null}`,
	`{"kind":"K"}`,
	`{"kind":"K","metadata":{}}`,
}

// TestDecodeAgainstReference: every shape of every object keeps what the
// reference keeps, and reads the metadata it reads.
func TestDecodeAgainstReference(t *testing.T) {
	objects := append(append([]string{}, fieldObjects...), hardObjects...)
	for _, data := range objects {
		checkAgainstReference(t, data, testShapes())
	}
}

// TestBookmark: the reflector reads the end of the initial events in a
// bookmark's annotations.
func TestBookmark(t *testing.T) {
	d := newDecoder(Shape{Fields: ProfileFields(profileOf("{.data.value}"))})
	typ, obj, err := d.event([]byte(`{"type":"BOOKMARK","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}}}}`))
	if err != nil || typ != watch.Bookmark {
		t.Fatal(typ, err)
	}
	var m metav1.Object = obj.(*Object)
	if m.GetResourceVersion() != "42" || m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark %+v", m)
	}
	// Other objects keep no annotations beside the JSON.
	_, obj, _ = d.event([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","annotations":{"x":"y"}}}}`))
	if obj.(*Object).annotations != nil {
		t.Error("annotations kept outside bookmarks")
	}
}

func TestErrorEvent(t *testing.T) {
	typ, obj, err := newDecoder(Shape{}).event([]byte(`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}`))
	if err != nil || typ != watch.Error {
		t.Fatal(typ, err)
	}
	if s, ok := obj.(*metav1.Status); !ok || s.Code != 410 || s.Reason != metav1.StatusReasonExpired {
		t.Errorf("status %#v", obj)
	}
}

func TestBadEvents(t *testing.T) {
	for _, frame := range []string{
		`{"type":"ADDED"}`,
		`{"type":"NOPE","object":{}}`,
		`{"type":"ADDED","object":[]}`,
		`{"type":"ADDED","object":null}`,
		`{"type":"ADDED","object":{"metadata":{"name":"a"}}} x`,
		`{"type":"ADDED","object":{"metadata":{"name":"a",}}}`,
		`{"type":"ADDED","object":{"metadata":{"name":"a"}}`,
		`{"type":"ADDED","object":{"data":{"v":01}}}`,
		`{"type":"ADDED","object":{"data":{"v":"\x"}}}`,
		`{"type":"ADDED","object":{"data":{"v":tru}}}`,
		`{"type":"ADDED","object":{"data":{"v":1.}}}`,
		"{\"type\":\"ADDED\",\"object\":{\"data\":{\"v\":\"a\nb\"}}}",
		`[]`,
		``,
	} {
		if _, _, err := newDecoder(Shape{}).event([]byte(frame)); err == nil {
			t.Errorf("%s: decoded", frame)
		}
	}
}

// TestList: items of a typed list carry no kind; the dynamic client gives
// them the list's.
func TestList(t *testing.T) {
	body := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"9","continue":"c1","remainingItemCount":3},"items":[` +
		`{"metadata":{"name":"a","namespace":"ns","resourceVersion":"5"},"data":{"value":"1"}},` +
		`{"kind":"Other","metadata":{"name":"b","namespace":"ns"}},` +
		`{"kind":5,"apiVersion":null,"metadata":{"name":"c","namespace":"ns"}}]}`
	shape := Shape{Fields: ProfileFields(profileOf("{.data.value}"))}
	list, err := newDecoder(shape).list([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if list.ResourceVersion != "9" || list.Continue != "c1" || list.RemainingItemCount == nil || *list.RemainingItemCount != 3 || len(list.Items) != 3 {
		t.Fatalf("list %+v", list)
	}
	ul := &unstructured.UnstructuredList{}
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode([]byte(body), nil, ul); err != nil {
		t.Fatal(err)
	}
	for i, o := range list.Items {
		u := &ul.Items[i]
		want, wantView := reference(u, shape)
		got, err := o.Decode()
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(viewOf(o), wantView) {
			t.Errorf("item %d:\n got %#v %+v\nwant %#v %+v", i, got, viewOf(o), want, wantView)
		}
	}
	empty, err := newDecoder(shape).list([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":null}`))
	if err != nil || len(empty.Items) != 0 || empty.ResourceVersion != "1" {
		t.Errorf("empty list %+v %v", empty, err)
	}
}

// TestFrames: events are cut out of a stream however it arrives.
func TestFrames(t *testing.T) {
	events := []string{
		`{"type":"ADDED","object":{"metadata":{"name":"a {[\"}"}}}`,
		`{"type":"MODIFIED","object":{"metadata":{"name":"b"},"data":{"x":"\\"}}}`,
		`{"type":"DELETED","object":{"metadata":{"name":"c"},"data":{"big":"` + strings.Repeat("y", 200<<10) + `"}}}`,
	}
	stream := strings.Join(events, "\n") + "\n\r\n "
	for name, r := range map[string]io.Reader{
		"whole":       strings.NewReader(stream),
		"one byte":    iotest.OneByteReader(strings.NewReader(stream)),
		"half a page": iotest.HalfReader(strings.NewReader(stream)),
	} {
		f := newFrameReader(r)
		for i, want := range events {
			got, err := f.next()
			if err != nil || string(got) != want {
				t.Fatalf("%s: frame %d: %v %.80q", name, i, err, got)
			}
		}
		if _, err := f.next(); err != io.EOF {
			t.Errorf("%s: end: %v", name, err)
		}
	}
	f := newFrameReader(strings.NewReader(`{"type":"ADDED","object":{"metadata"`))
	if _, err := f.next(); err != io.ErrUnexpectedEOF {
		t.Errorf("cut stream: %v", err)
	}
	if _, err := newFrameReader(strings.NewReader(`"event"`)).next(); err == nil {
		t.Error("a string is not an event")
	}
	reading := errors.New("connection reset")
	if _, err := newFrameReader(iotest.ErrReader(reading)).next(); !errors.Is(err, reading) {
		t.Errorf("read error: %v", err)
	}
}

// TestFrameLimit: a value that never ends cannot take all memory.
func TestFrameLimit(t *testing.T) {
	f := newFrameReader(io.MultiReader(strings.NewReader(`{"a":"`), endless{}))
	if _, err := f.next(); err != errFrameTooLarge {
		t.Errorf("got %v", err)
	}
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
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

// FuzzDecode: any input is decoded without a panic; an object the dynamic
// client decodes is decoded to what the reference keeps, in every shape;
// input encoding/json refuses is refused.
func FuzzDecode(f *testing.F) {
	for _, data := range append(append([]string{}, fieldObjects...), hardObjects...) {
		f.Add([]byte(data), uint8(0))
	}
	f.Add([]byte(`{"a":[1,{"b":"\u00e9"}],"metadata":{"labels":{"x":"y"}}}`), uint8(3))
	shapes := testShapes()
	f.Fuzz(func(t *testing.T, data []byte, which uint8) {
		shape := shapes[int(which)%len(shapes)]
		d := newDecoder(shape)
		_, obj, err := d.event(append(append([]byte(`{"type":"MODIFIED","object":`), data...), '}'))
		if !json.Valid(data) {
			if err == nil {
				t.Fatalf("%q is not JSON, decoded", data)
			}
			return
		}
		u, _, uerr := unstructured.UnstructuredJSONScheme.Decode(data, nil, nil)
		uu, isObject := u.(*unstructured.Unstructured)
		if uerr != nil || !isObject || bytes.TrimSpace(data)[0] != '{' {
			return // not an object the informer would get
		}
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		want, wantView := reference(uu, shape)
		got, err := obj.(*Object).Decode()
		if err != nil {
			t.Fatalf("%q: %v", data, err)
		}
		if !reflect.DeepEqual(got, want) || !sameJSON(t, got, want) || !reflect.DeepEqual(viewOf(obj.(*Object)), wantView) {
			t.Fatalf("%q in %+v:\n got %#v %+v\nwant %#v %+v", data, shape, got, viewOf(obj.(*Object)), want, wantView)
		}
	})
}

// FuzzFrames: any stream is cut without a panic, never into a frame that
// is not a prefix-free piece of it.
func FuzzFrames(f *testing.F) {
	f.Add([]byte(`{"type":"ADDED","object":{}} {"a":"}"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr := newFrameReader(bytes.NewReader(data))
		total := 0
		for i := 0; i < 1000; i++ {
			frame, err := fr.next()
			if err != nil {
				return
			}
			total += len(frame)
			if total > len(data) || !bytes.Contains(data, frame) {
				t.Fatalf("frame %q not from %q", frame, data)
			}
		}
	})
}
