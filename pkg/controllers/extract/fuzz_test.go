package extract

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// FuzzExtract feeds arbitrary objects, paths, pointers and scrub keys to
// extraction in both modes: it must never panic, never modify its input,
// and produce valid JSON whose hash is stable.
func FuzzExtract(f *testing.F) {
	obj, _ := json.Marshal(deployment())
	sec, _ := json.Marshal(secret())
	f.Add(obj, "{.spec.template.spec.containers[*].image}", "/spec/template/spec/containers/0", "value", false)
	f.Add(obj, "cel:object.spec.replicas", "/metadata/annotations", "name", true)
	f.Add(sec, "{.data}", "/data/password", "password", true)
	f.Add([]byte(`{"a":[1,2,{"b":null}]}`), "{..b}", "/a/2/b", "b", false)
	f.Add([]byte(`[]`), "{.a[-1:]}", "/", "", true)
	f.Fuzz(func(t *testing.T, raw []byte, path, pointer, scrubKey string, resource bool) {
		// Bound each input's cost: the fuzzer must stop within its
		// -fuzztime, and one slow input past the deadline fails the run.
		if len(raw) > 16<<10 || len(path) > 256 {
			return
		}
		var obj map[string]any
		if json.Unmarshal(raw, &obj) != nil || obj == nil {
			return
		}
		p := attrProfile(v1alpha1.Attribute{Name: "a", Path: path, Optional: strings.Contains(path, "?")})
		if resource {
			p.Spec.Export = v1alpha1.ProfileExport{Mode: v1alpha1.ExportModeResource, Include: v1alpha1.IncludeAll,
				Prune: &v1alpha1.ResourcePrune{JSONPointers: []string{pointer}, ScrubKeys: []string{scrubKey}}}
		}
		e, err := New(p)
		if err != nil {
			return
		}
		e.Timeout = 100 * time.Millisecond
		before, _ := json.Marshal(obj)
		content, err := e.Extract(context.Background(), obj)
		if after, _ := json.Marshal(obj); string(after) != string(before) {
			t.Fatalf("input modified")
		}
		if err != nil {
			return
		}
		values := []kollect.Value{}
		for _, v := range content.Attributes {
			values = append(values, v)
		}
		if content.Object != nil {
			values = append(values, *content.Object)
		}
		for _, v := range values {
			if !json.Valid(v.Raw) {
				t.Fatalf("invalid JSON %q", v.Raw)
			}
		}
		src := kollect.ItemSource{APIVersion: "v1", Kind: "X", Name: "x", UID: "u"}
		if again, err := e.Extract(context.Background(), obj); err == nil && Hash(src, again) != Hash(src, content) {
			t.Fatalf("hash not stable")
		}
	})
}
