package extract

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

func deployment() map[string]any {
	var obj map[string]any
	if err := json.Unmarshal([]byte(`{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": {
			"name": "web", "namespace": "team-a", "uid": "5f0c6a7e-1", "resourceVersion": "42", "generation": 3,
			"labels": {"app": "web"},
			"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "owner": "team-a"},
			"managedFields": [{"manager": "kubectl"}]
		},
		"spec": {
			"replicas": 3,
			"template": {"spec": {"containers": [
				{"name": "app", "image": "nginx:1.27", "env": [{"name": "password", "value": "hunter2"}]},
				{"name": "sidecar", "image": "envoy:1.30"}
			]}}
		},
		"status": {"readyReplicas": 2, "conditions": [{"type": "Available", "status": "True"}]}
	}`), &obj); err != nil {
		panic(err)
	}
	return obj
}

func secret() map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{
			"name": "db", "namespace": "team-a", "uid": "u-1",
			"annotations": map[string]any{LastAppliedAnnotation: `{"data":{"password":"aHVudGVyMg=="}}`},
		},
		"type":       "Opaque",
		"data":       map[string]any{"password": "aHVudGVyMg=="},
		"stringData": map[string]any{"user": "admin"},
	}
}

func attrProfile(attrs ...v1alpha1.Attribute) *v1alpha1.Profile {
	return &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "team-a"},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK:  v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: attrs,
			Export:     v1alpha1.ProfileExport{Mode: v1alpha1.ExportModeAttributes},
		},
	}
}

func resourceProfile(include v1alpha1.ResourceInclude, prune *v1alpha1.ResourcePrune) *v1alpha1.Profile {
	p := attrProfile()
	p.Spec.Export = v1alpha1.ProfileExport{Mode: v1alpha1.ExportModeResource, Include: include, Prune: prune}
	return p
}

func secretProfile(mode v1alpha1.ExportMode, annotations map[string]string, attrs ...v1alpha1.Attribute) *v1alpha1.Profile {
	p := attrProfile(attrs...)
	p.Annotations = annotations
	p.Spec.TargetGVK = v1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"}
	p.Spec.Export.Mode = mode
	if mode == v1alpha1.ExportModeResource {
		p.Spec.Export.Include = v1alpha1.IncludeAll
	}
	return p
}

func boolPtr(b bool) *bool { return &b }

// attrsJSON renders attributes as one JSON object, for comparison.
func attrsJSON(t *testing.T, c Content) string {
	t.Helper()
	m := map[string]json.RawMessage{}
	for k, v := range c.Attributes {
		m[k] = v.Raw
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExtract(t *testing.T) {
	optIn := map[string]string{kollect.AnnotationCollectSecrets: "true"}
	bothOptIns := map[string]string{kollect.AnnotationCollectSecrets: "true", kollect.AnnotationExportSecretValues: "true"}
	for _, tc := range []struct {
		name    string
		profile *v1alpha1.Profile
		obj     map[string]any
		// want is the JSON of the attributes, or of the object in Resource mode.
		want    string
		wantErr string
	}{
		{
			name:    "JSONPath [*] is an array",
			profile: attrProfile(v1alpha1.Attribute{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}),
			want:    `{"image":["nginx:1.27","envoy:1.30"]}`,
		},
		{
			name:    "JSONPath single match is a scalar",
			profile: attrProfile(v1alpha1.Attribute{Name: "image", Path: "{.spec.template.spec.containers[0].image}"}),
			want:    `{"image":"nginx:1.27"}`,
		},
		{
			name:    "JSONPath object value",
			profile: attrProfile(v1alpha1.Attribute{Name: "labels", Path: "{.metadata.labels}"}),
			want:    `{"labels":{"app":"web"}}`,
		},
		{
			name: "CEL values",
			profile: attrProfile(
				v1alpha1.Attribute{Name: "replicas", Path: "cel:object.spec.replicas"},
				v1alpha1.Attribute{Name: "names", Path: "cel:object.spec.template.spec.containers.map(c, c.name)"},
				v1alpha1.Attribute{Name: "ready", Path: "cel:object.status.readyReplicas == object.spec.replicas"},
			),
			want: `{"names":["app","sidecar"],"ready":false,"replicas":3}`,
		},
		{
			name: "optional attributes are omitted when absent",
			profile: attrProfile(
				v1alpha1.Attribute{Name: "replicas", Path: "{.spec.replicas}"},
				v1alpha1.Attribute{Name: "paused", Path: "{.spec.paused}", Optional: true},
				v1alpha1.Attribute{Name: "strategy", Path: "cel:object.spec.strategy.type", Optional: true},
			),
			want: `{"replicas":3}`,
		},
		{
			name:    "a required JSONPath attribute that matches nothing fails",
			profile: attrProfile(v1alpha1.Attribute{Name: "paused", Path: "{.spec.paused}"}),
			wantErr: `required attribute "paused" ({.spec.paused}) matched nothing`,
		},
		{
			name:    "a required CEL attribute that matches nothing fails",
			profile: attrProfile(v1alpha1.Attribute{Name: "owner", Path: "cel:object.metadata.labels.owner"}),
			wantErr: `required attribute "owner"`,
		},
		{
			name:    "a CEL runtime error fails",
			profile: attrProfile(v1alpha1.Attribute{Name: "bad", Path: "cel:object.spec.replicas / 0"}),
			wantErr: `attribute "bad"`,
		},
		{
			name:    "Resource SpecAndStatus prunes managedFields, last-applied and resourceVersion by default",
			profile: resourceProfile(v1alpha1.IncludeSpecAndStatus, nil),
			obj: map[string]any{
				"apiVersion": "v1", "kind": "Thing", "extra": "x",
				"metadata": map[string]any{"name": "a", "resourceVersion": "9", "managedFields": []any{"m"},
					"annotations": map[string]any{LastAppliedAnnotation: "{}"}},
				"spec": map[string]any{"a": int64(1)}, "status": map[string]any{"b": true},
			},
			want: `{"apiVersion":"v1","kind":"Thing","metadata":{"name":"a"},"spec":{"a":1},"status":{"b":true}}`,
		},
		{
			name:    "Resource Metadata keeps metadata only",
			profile: resourceProfile(v1alpha1.IncludeMetadata, &v1alpha1.ResourcePrune{}),
			obj: map[string]any{"apiVersion": "v1", "kind": "Thing", "metadata": map[string]any{"name": "a"},
				"spec": map[string]any{"a": int64(1)}, "status": map[string]any{}},
			want: `{"apiVersion":"v1","kind":"Thing","metadata":{"name":"a"}}`,
		},
		{
			name:    "Resource Spec and Status",
			profile: resourceProfile(v1alpha1.IncludeStatus, nil),
			obj: map[string]any{"apiVersion": "v1", "kind": "Thing", "metadata": map[string]any{"name": "a"},
				"spec": map[string]any{"a": int64(1)}, "status": map[string]any{"s": "ok"}},
			want: `{"apiVersion":"v1","kind":"Thing","metadata":{"name":"a"},"status":{"s":"ok"}}`,
		},
		{
			name:    "Resource All keeps other top-level fields",
			profile: resourceProfile(v1alpha1.IncludeAll, nil),
			obj:     map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}, "data": map[string]any{"k": "v"}},
			want:    `{"apiVersion":"v1","data":{"k":"v"},"kind":"ConfigMap","metadata":{"name":"a"}}`,
		},
		{
			name:    "Resource keeps managedFields and last-applied when told",
			profile: resourceProfile(v1alpha1.IncludeMetadata, &v1alpha1.ResourcePrune{ManagedFields: boolPtr(false), LastAppliedAnnotation: boolPtr(false)}),
			obj: map[string]any{"apiVersion": "v1", "kind": "Thing", "metadata": map[string]any{"name": "a", "managedFields": []any{"m"},
				"annotations": map[string]any{LastAppliedAnnotation: "{}"}}},
			want: `{"apiVersion":"v1","kind":"Thing","metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"},"managedFields":["m"],"name":"a"}}`,
		},
		{
			name: "Resource JSON pointers and scrub keys",
			profile: resourceProfile(v1alpha1.IncludeSpecAndStatus, &v1alpha1.ResourcePrune{
				JSONPointers: []string{"/status/conditions", "/spec/template/spec/containers/1", "/metadata/annotations/owner", "/spec/missing/x", "/spec/template/spec/containers/9"},
				ScrubKeys:    []string{"value"},
			}),
			obj:  deployment(),
			want: `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{},"generation":3,"labels":{"app":"web"},"name":"web","namespace":"team-a","uid":"5f0c6a7e-1"},"spec":{"replicas":3,"template":{"spec":{"containers":[{"env":[{"name":"password","value":"REDACTED"}],"image":"nginx:1.27","name":"app"}]}}},"status":{"readyReplicas":2}}`,
		},
		{
			name:    "JSON pointer escapes",
			profile: resourceProfile(v1alpha1.IncludeMetadata, &v1alpha1.ResourcePrune{JSONPointers: []string{"/metadata/labels/a~1b", "/metadata/labels/c~0d"}}),
			obj: map[string]any{"apiVersion": "v1", "kind": "Thing", "metadata": map[string]any{"name": "a",
				"labels": map[string]any{"a/b": "1", "c~d": "2", "e": "3"}}},
			want: `{"apiVersion":"v1","kind":"Thing","metadata":{"labels":{"e":"3"},"name":"a"}}`,
		},
		{
			name:    "Secrets without the opt-in are refused",
			profile: secretProfile(v1alpha1.ExportModeAttributes, nil, v1alpha1.Attribute{Name: "type", Path: "{.type}"}),
			obj:     secret(),
			wantErr: ErrSecretsNotAllowed.Error(),
		},
		{
			name:    "Secret attributes see redacted values",
			profile: secretProfile(v1alpha1.ExportModeAttributes, bothOptIns, v1alpha1.Attribute{Name: "data", Path: "{.data}"}, v1alpha1.Attribute{Name: "keys", Path: "cel:object.data.map(k, k)"}),
			obj:     secret(),
			want:    `{"data":{"password":"REDACTED"},"keys":["password"]}`,
		},
		{
			name:    "Secret resources are redacted with only the collect opt-in",
			profile: secretProfile(v1alpha1.ExportModeResource, optIn),
			obj:     secret(),
			want:    `{"apiVersion":"v1","data":{"password":"REDACTED"},"kind":"Secret","metadata":{"name":"db","namespace":"team-a","uid":"u-1"},"stringData":{"user":"REDACTED"},"type":"Opaque"}`,
		},
		{
			name:    "Secret resources keep values with both opt-ins",
			profile: secretProfile(v1alpha1.ExportModeResource, bothOptIns),
			obj:     secret(),
			want:    `{"apiVersion":"v1","data":{"password":"aHVudGVyMg=="},"kind":"Secret","metadata":{"name":"db","namespace":"team-a","uid":"u-1"},"stringData":{"user":"admin"},"type":"Opaque"}`,
		},
		{
			name:    "a Secret reaching a profile of another kind is redacted",
			profile: resourceProfile(v1alpha1.IncludeAll, nil),
			obj:     secret(),
			want:    `{"apiVersion":"v1","data":{"password":"REDACTED"},"kind":"Secret","metadata":{"name":"db","namespace":"team-a","uid":"u-1"},"stringData":{"user":"REDACTED"},"type":"Opaque"}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.profile.Spec.Export.Mode == v1alpha1.ExportModeResource && tc.profile.Spec.Export.Include == "" {
				tc.profile.Spec.Export.Include = v1alpha1.IncludeSpecAndStatus
			}
			obj := tc.obj
			if obj == nil {
				obj = deployment()
			}
			before, _ := json.Marshal(obj)
			e, err := New(tc.profile)
			var content Content
			if err == nil {
				content, err = e.Extract(context.Background(), obj)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got string
			if content.Object != nil {
				got = string(content.Object.Raw)
			} else {
				got = attrsJSON(t, content)
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
			if after, _ := json.Marshal(obj); string(after) != string(before) {
				t.Errorf("the input object was modified:\n%s\n%s", before, after)
			}
		})
	}
}

// TestEvaluateTimeout: every evaluation has a deadline, whatever the caller's context.
func TestEvaluateTimeout(t *testing.T) {
	e, err := New(attrProfile(v1alpha1.Attribute{Name: "n", Path: "cel:object.items.filter(x, x > 0).size()"}))
	if err != nil {
		t.Fatal(err)
	}
	e.Timeout = time.Nanosecond
	items := make([]any, 20000)
	for i := range items {
		items[i] = int64(i)
	}
	_, err = e.Extract(context.Background(), map[string]any{"items": items})
	if err == nil {
		t.Fatal("want a timeout or cost error")
	}
}

func TestKeeps(t *testing.T) {
	if e, _ := New(attrProfile(v1alpha1.Attribute{Name: "a", Path: "{.a}"})); e.KeepsManagedFields() || e.KeepsLastApplied() || e.ResourceMode() {
		t.Error("Attributes mode keeps nothing")
	}
	e, _ := New(resourceProfile(v1alpha1.IncludeAll, &v1alpha1.ResourcePrune{ManagedFields: boolPtr(false), LastAppliedAnnotation: boolPtr(false)}))
	if !e.KeepsManagedFields() || !e.KeepsLastApplied() {
		t.Error("Resource mode with prune off keeps both")
	}
	e, _ = New(secretProfile(v1alpha1.ExportModeResource, map[string]string{kollect.AnnotationCollectSecrets: "true"}))
	if e.KeepsLastApplied() {
		t.Error("redacted Secrets never keep the last-applied annotation")
	}
	if _, err := New(secretProfile(v1alpha1.ExportModeAttributes, nil, v1alpha1.Attribute{Name: "a", Path: "{.a}"})); !errors.Is(err, ErrSecretsNotAllowed) {
		t.Errorf("err = %v", err)
	}
}

func TestHash(t *testing.T) {
	src := kollect.ItemSource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", UID: "u1", ResourceVersion: "1"}
	content := func(attrs map[string]string) Content {
		c := Content{Attributes: map[string]kollect.Value{}}
		for k, v := range attrs {
			c.Attributes[k] = kollect.Value{Raw: []byte(v)}
		}
		return c
	}
	base := Hash(src, content(map[string]string{"image": `"nginx"`, "replicas": `3`}))
	if len(base) != 64 || len(validation.IsDNS1123Label(base[:63])) != 0 {
		t.Fatalf("hash %q is not 64 hex digits", base)
	}
	// Stable across runs and map order; resourceVersion does not count.
	for range 20 {
		other := src
		other.ResourceVersion = "999"
		if h := Hash(other, content(map[string]string{"replicas": `3`, "image": `"nginx"`})); h != base {
			t.Fatalf("hash moved: %s vs %s", h, base)
		}
	}
	if want := "67ce42f3c31bd14c81fe988df4b769d39f0933710e1d045e4fee464f6b224d68"; base != want {
		t.Errorf("hash of the canonical form changed: %s, want %s (bump hashVersion when that is intended)", base, want)
	}
	for name, h := range map[string]string{
		"value":     Hash(src, content(map[string]string{"image": `"nginx:2"`, "replicas": `3`})),
		"attribute": Hash(src, content(map[string]string{"image": `"nginx"`})),
		"uid":       Hash(kollect.ItemSource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "a", Name: "web", UID: "u2"}, content(map[string]string{"image": `"nginx"`, "replicas": `3`})),
		"object":    Hash(src, Content{Object: &kollect.Value{Raw: []byte(`{}`)}}),
	} {
		if h == base {
			t.Errorf("changing the %s does not change the hash", name)
		}
	}
	if Hash(src, Content{Attributes: map[string]kollect.Value{"a": {}}}) != Hash(src, Content{Attributes: map[string]kollect.Value{"a": {Raw: []byte("null")}}}) {
		t.Error("an empty value and null must hash alike: storage turns one into the other")
	}
	// Invalid raw JSON, which extraction never makes, still hashes by
	// content: it used to hash the encoder's error text, one hash for all.
	one, two := Hash(src, content(map[string]string{"a": `{"x":`})), Hash(src, content(map[string]string{"a": `{"y":`}))
	if one == two || len(one) != 64 || one != Hash(src, content(map[string]string{"a": `{"x":`})) {
		t.Errorf("invalid JSON hashes %s and %s", one, two)
	}
	if Hash(src, content(map[string]string{"a": ``, "b": `{"x":`})) != Hash(src, content(map[string]string{"a": `null`, "b": `{"x":`})) {
		t.Error("an empty value and null must hash alike beside invalid JSON too")
	}
}

func TestItemName(t *testing.T) {
	src := kollect.ItemSource{Namespace: "a", Name: "web", UID: "0b5d6b5c-4f0e-4e55-9d7e-4a1b1e0c2f11"}
	name := ItemName("web", src)
	if name != ItemName("web", src) || !strings.HasPrefix(name, "web-") || len(name) != len("web-")+16 {
		t.Errorf("name %q", name)
	}
	if ItemName("web", kollect.ItemSource{Namespace: "a", Name: "web", UID: "other"}) == name {
		t.Error("another uid gives the same name")
	}
	long := strings.Repeat("a", 230) + "." + strings.Repeat("b", 22)
	for _, target := range []string{long, strings.Repeat("x", 235) + "-" + strings.Repeat("y", 17), "a", "web.team-a"} {
		n := ItemName(target, src)
		if msgs := validation.IsDNS1123Subdomain(n); len(msgs) > 0 || len(n) > 253 {
			t.Errorf("ItemName(%d chars) = %q: %v", len(target), n, msgs)
		}
	}
	if n := ItemName("web", kollect.ItemSource{Namespace: "a", Name: "web"}); n == name || len(n) != len(name) {
		t.Errorf("without uid: %q", n)
	}
}

func TestSourceOf(t *testing.T) {
	u := &unstructured.Unstructured{Object: deployment()}
	got := SourceOf(u)
	want := kollect.ItemSource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web", UID: "5f0c6a7e-1", ResourceVersion: "42"}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}
