package source

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/extract"
)

// fieldObjects are objects of several shapes, as the dynamic client decodes them.
var fieldObjects = []string{
	`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns","uid":"u1","resourceVersion":"3","labels":{"app":"web","app.kubernetes.io/name":"web"},"annotations":{"a/b":"x"}},"data":{"value":"v0","payload":"xxxxxxxx"}}`,
	`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"ns","uid":"u2","labels":{"app":"web"}},
	  "spec":{"replicas":3,"paused":false,"selector":{"matchLabels":{"app":"web"}},"template":{"metadata":{"labels":{"app":"web"}},
	  "spec":{"containers":[{"name":"a","image":"registry/a:1","ports":[{"containerPort":80}]},{"name":"b","image":"registry/b:2"}]}}},
	  "status":{"replicas":3,"ratio":1.0,"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"False"}]}}`,
	`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns","annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{\"data\":{\"password\":\"cGFzcw==\"}}"}},"data":{"password":"cGFzcw=="},"type":"Opaque"}`,
	`{"apiVersion":"x.dev/v1","kind":"Odd","metadata":{"name":"o"},"spec":{"a.b":{"c":1},"list":[{"x":{"y":1}},2,"s",null],"empty":{},"nil":null}}`,
}

// fieldPaths are attribute paths of every kind the analysis handles, and
// some it gives up on.
var fieldPaths = []string{
	"{.metadata.name}",
	"{.data.value}",
	"{.data}",
	"{$.kind}",
	"{@.metadata.uid}",
	"{.metadata.labels.app}",
	"{.metadata.labels['app\\.kubernetes\\.io/name']}",
	"{.metadata.annotations.a/b}",
	"{.spec.template.spec.containers[*].image}",
	"{.spec.template.spec.containers[0].name}",
	"{.status.conditions[?(@.type==\"Available\")].status}",
	"{.spec['replicas','paused']}",
	"{.spec.*}",
	"{..image}",
	"{.metadata.name}{.metadata.namespace}",
	"{range .spec.template.spec.containers[*]}{.name}{end}",
	"{.spec.a\\.b.c}",
	"{.spec.list[0].x.y}",
	"{.status.ratio}",
	"cel:object.metadata.name",
	"cel:object.data.value",
	"cel:object.metadata.name + '/' + object.kind",
	"cel:object.metadata.namespace + '/' + object.metadata.name + '/' + string(object.?data.value.orValue(''))",
	"cel:[object.spec.replicas, object.status.replicas]",
	"cel:[object.spec.replicas, .object.status.replicas]",
	"cel:.object.metadata.name",
	"cel:has(object.spec.replicas)",
	"cel:has(object.spec.replicas) ? object.spec.replicas * 2 : 0",
	"cel:object.?spec.?replicas.orValue(0)",
	"cel:object.metadata.annotations[?'a/b'].orValue('')",
	"cel:object['metadata']['name']",
	"cel:object.spec.template.spec.containers.map(c, c.image)",
	"cel:object.spec.template.spec.containers.all(c, has(c.image))",
	"cel:object.metadata.labels.exists(k, k == 'app')",
	"cel:object.status.conditions.filter(c, c.type == 'Available')[0].status",
	"cel:size(object)",
	"cel:object",
	"cel:object.spec",
	"cel:object.data[object.kind == 'ConfigMap' ? 'value' : 'payload']",
	"cel:[1, 2].map(object, object + 1)",
	"cel:'constant'",
	"cel:object.status.ratio",
	"cel:object.spec.list[0].x.y",
	"cel:object.data.exists_one(k, v, v == 'v0')",
}

func profileOf(paths ...string) *v1alpha1.Profile {
	p := &v1alpha1.Profile{Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}}
	for i, path := range paths {
		p.Spec.Attributes = append(p.Spec.Attributes, v1alpha1.Attribute{Name: fmt.Sprintf("a%d", i), Path: path, Optional: i%2 == 0})
	}
	return p
}

// extracted is what extraction makes of an object: content and hash, or the error.
func extracted(t *testing.T, e *extract.Extractor, obj map[string]any) string {
	t.Helper()
	c, err := e.Extract(context.Background(), obj)
	if err != nil {
		return "error: " + err.Error()
	}
	raw, _ := json.Marshal(c)
	return string(raw) + " " + extract.Hash(kollect.ItemSource{Name: "x"}, c)
}

// TestFieldsKeepExtraction: extraction from an object trimmed to its
// Profile's fields gives exactly what extraction from the whole object
// gives, errors included, for every path alone and for all together.
func TestFieldsKeepExtraction(t *testing.T) {
	profiles := [][]string{fieldPaths}
	for _, p := range fieldPaths {
		profiles = append(profiles, []string{p})
	}
	for _, paths := range profiles {
		p := profileOf(paths...)
		e, err := extract.New(p)
		if err != nil {
			t.Fatalf("%v: %v", paths, err)
		}
		for _, data := range fieldObjects {
			checkTrimmed(t, p, e, data)
		}
	}
}

// checkTrimmed compares extraction from an object with extraction from the
// object as the informer keeps it for the Profile: the metadata transform
// first, then trimmed to the Profile's fields.
func checkTrimmed(t *testing.T, p *v1alpha1.Profile, e *extract.Extractor, data string) {
	t.Helper()
	shape := Shape{KeepManagedFields: e.KeepsManagedFields(), KeepLastApplied: e.KeepsLastApplied(), Fields: ProfileFields(p)}
	whole := referenceTransform(shape, decodeJSON(t, data))
	want := extracted(t, e, runtime.DeepCopyJSON(whole.Object))
	trimmed, err := decodeObject(t, data, shape).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if got := extracted(t, e, trimmed); got != want {
		var paths []string
		for _, a := range p.Spec.Attributes {
			paths = append(paths, a.Path)
		}
		t.Errorf("%q on %s (fields %s):\n got %s\nwant %s", paths, data, shape.Fields, got, want)
	}
}

func TestProfileFields(t *testing.T) {
	for _, tc := range []struct {
		paths []string
		want  string // "" keeps the whole object
	}{
		{[]string{"{.data.value}", "cel:object.metadata.name"}, `[["apiVersion"],["data","value"],["kind"],["metadata","name"]]`},
		{[]string{"{.spec.template.spec.containers[*].image}"}, `[["apiVersion"],["kind"],["spec","template","spec","containers"]]`},
		{[]string{"{.metadata}", "{.metadata.name}"}, `[["apiVersion"],["kind"],["metadata"]]`},
		{[]string{"cel:object.?spec.?replicas.orValue(1)", "cel:has(object.status.x)"}, `[["apiVersion"],["kind"],["spec","replicas"],["status","x"]]`},
		{[]string{"cel:object.data[object.kind]"}, `[["apiVersion"],["data"],["kind"]]`},
		{[]string{"cel:'constant'"}, `[["apiVersion"],["kind"]]`},
		{[]string{"{..image}"}, ""},
		{[]string{"{range .items[*]}{.name}{end}"}, ""},
		{[]string{"cel:size(object)"}, ""},
		{[]string{"cel:object"}, ""},
		{[]string{"{.metadata.name}", "cel:object"}, ""},
	} {
		if got := ProfileFields(profileOf(tc.paths...)); got != tc.want {
			t.Errorf("%v: %s, want %s", tc.paths, got, tc.want)
		}
	}
	resource := profileOf("{.metadata.name}")
	resource.Spec.Export.Mode = v1alpha1.ExportModeResource
	if got := ProfileFields(resource); got != "" {
		t.Errorf("Resource mode: %s", got)
	}
}

func TestUnionFields(t *testing.T) {
	a := encodeFields([]fieldPath{{"kind"}, {"spec", "replicas"}})
	b := encodeFields([]fieldPath{{"spec"}, {"metadata", "name"}})
	if got, want := unionFields(a, b), `[["kind"],["metadata","name"],["spec"]]`; got != want {
		t.Errorf("union %s, want %s", got, want)
	}
	if unionFields(a, "") != "" || unionFields("", b) != "" {
		t.Error("the whole object and anything is the whole object")
	}
	if got := Combine(map[string]Shape{"1": {Fields: a}, "2": {Fields: b}}); got.Fields != unionFields(a, b) {
		t.Errorf("combine: %+v", got)
	}
}

func TestFieldTreeKeep(t *testing.T) {
	kept, err := decodeObject(t, fieldObjects[1], Shape{Fields: ProfileFields(profileOf("{.spec.template.spec.containers[*].image}", "cel:object.metadata.name"))}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			keys = append(keys, prefix)
			return
		}
		for k, child := range m {
			walk(prefix+"/"+k, child)
		}
	}
	walk("", kept)
	slices.Sort(keys)
	if got, want := strings.Join(keys, " "), "/apiVersion /kind /metadata/name /spec/template/spec/containers"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
	whole, err := decodeObject(t, fieldObjects[1], Shape{}).Decode()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(whole, decodeJSON(t, fieldObjects[1]).Object) {
		t.Error("the whole object must be kept as is")
	}
}

// TestTrimmedMeta: matching and the item's source read the metadata of the
// whole object, whatever extraction keeps.
func TestTrimmedMeta(t *testing.T) {
	u := decodeJSON(t, fieldObjects[0])
	want := extract.SourceOf(u)
	o := decodeObject(t, fieldObjects[0], Shape{Fields: ProfileFields(profileOf("{.data.value}"))})
	if o.Source() != want || o.labels.Get("app") != "web" || o.Namespace() != "ns" {
		t.Errorf("metadata lost: %+v", o)
	}
	obj, err := o.Decode()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := obj["metadata"]; ok || obj["data"].(map[string]any)["value"] != "v0" || len(obj["data"].(map[string]any)) != 1 {
		t.Errorf("kept %v", obj)
	}
}

// FuzzFieldsKeepExtraction: for any attribute path the Profile validation
// accepts, trimming an object to the fields the analysis finds must not
// change what extraction makes of it, and the analysis must not panic.
func FuzzFieldsKeepExtraction(f *testing.F) {
	for i, p := range fieldPaths {
		f.Add(p, uint8(i))
	}
	f.Fuzz(func(t *testing.T, path string, which uint8) {
		if len(path) > 256 {
			return
		}
		p := profileOf(path)
		e, err := extract.New(p)
		if err != nil {
			return // rejected at admission
		}
		checkTrimmed(t, p, e, fieldObjects[int(which)%len(fieldObjects)])
	})
}
