package tenancy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func scope(name string, spec kollect.ScopeSpec) kollect.Scope {
	return kollect.Scope{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}, Spec: spec}
}

// TestFloorIsTheHighest: the highest minExportInterval applies, named by
// the first Scope (by name) that sets it; no Scope, no floor.
func TestFloorIsTheHighest(t *testing.T) {
	for _, tc := range []struct {
		scopes    []kollect.Scope
		floor     time.Duration
		by        string
		unlimited bool
	}{
		{unlimited: true},
		{scopes: []kollect.Scope{scope("a", kollect.ScopeSpec{})}, unlimited: true},
		{scopes: []kollect.Scope{scope("b", kollect.ScopeSpec{MinExportInterval: duration(time.Minute)}), scope("a", kollect.ScopeSpec{MinExportInterval: duration(5 * time.Minute)})},
			floor: 5 * time.Minute, by: `"a"`},
		{scopes: []kollect.Scope{scope("z", kollect.ScopeSpec{MinExportInterval: duration(time.Minute)}), scope("y", kollect.ScopeSpec{MinExportInterval: duration(time.Minute)})},
			floor: time.Minute, by: `"y"`},
		{scopes: []kollect.Scope{scope("zero", kollect.ScopeSpec{MinExportInterval: duration(0)})}, floor: 0, by: `"zero"`},
	} {
		floor, by := scopeLimits(tc.scopes).floor()
		if tc.unlimited {
			if by != nil {
				t.Errorf("%v: floor %s by %s, want none", tc.scopes, floor, by.name)
			}
			continue
		}
		if by == nil || floor != tc.floor || !strings.Contains(by.name, tc.by) {
			t.Errorf("%v: floor %s by %v, want %s by %s", tc.scopes, floor, by, tc.floor, tc.by)
		}
	}
}

// TestAllowlistsIntersect: a kind or sink must pass every list that is
// set; wildcards match any group or kind; absent and empty lists allow all.
func TestAllowlistsIntersect(t *testing.T) {
	ls := scopeLimits([]kollect.Scope{
		scope("apps", kollect.ScopeSpec{AllowedGVKs: []kollect.GroupKind{{Group: "apps", Kind: "*"}, {Kind: "ConfigMap"}}, SnapshotSinkRefs: []string{"a", "b"}}),
		scope("deployments", kollect.ScopeSpec{AllowedGVKs: []kollect.GroupKind{{Group: "*", Kind: "Deployment"}, {Kind: "ConfigMap"}}, SnapshotSinkRefs: []string{"a"}}),
		scope("open", kollect.ScopeSpec{AllowedGVKs: []kollect.GroupKind{}}),
	})
	path := field.NewPath("spec", "targetGVK")
	for gvk, denied := range map[kollect.GroupVersionKind]string{
		{Group: "apps", Version: "v1", Kind: "Deployment"}:  "",
		{Version: "v1", Kind: "ConfigMap"}:                  "",
		{Group: "apps", Version: "v1", Kind: "StatefulSet"}: `Scope "deployments"`,
		{Version: "v1", Kind: "Secret"}:                     `Scope "apps" in namespace "team-a", Scope "deployments"`,
	} {
		err := ls.checkKind(gvk, path)
		switch {
		case denied == "" && err != nil:
			t.Errorf("%v: %v, want allowed", gvk, err)
		case denied != "" && (err == nil || !strings.Contains(err.Error(), denied)):
			t.Errorf("%v: %v, want denied by %s", gvk, err, denied)
		}
	}
	spec := exportSpec{refs: sinkRefs("team-a", []kollect.SinkReference{{Name: "a"}, {Name: "b"}}, nil, []kollect.SinkReference{{Name: "anything"}})}
	vs := ls.exportViolations(spec)
	if len(vs) != 1 || vs[0].err.Field != "spec.snapshotSinkRefs[1].name" || !strings.Contains(vs[0].err.Detail, `Scope "deployments"`) {
		t.Errorf("violations %+v, want snapshotSinkRefs[1] (b) denied by deployments only", vs)
	}
}

// TestRatchet: an update is refused only for violations it introduces.
func TestRatchet(t *testing.T) {
	ls := scopeLimits([]kollect.Scope{scope("floor", kollect.ScopeSpec{MinExportInterval: duration(time.Minute)})})
	spec := func(inv time.Duration, refs ...kollect.SinkReference) exportSpec {
		return exportSpec{interval: duration(inv), refs: sinkRefs("team-a", refs, nil, nil)}
	}
	old := ls.exportViolations(spec(10*time.Second, kollect.SinkReference{Name: "a", ExportMinInterval: duration(0)}))
	if len(old) != 2 {
		t.Fatalf("old violations %+v, want 2", old)
	}
	// Same values, the ref moved to another position: nothing new.
	same := ls.exportViolations(spec(10*time.Second, kollect.SinkReference{Name: "new"}, kollect.SinkReference{Name: "a", ExportMinInterval: duration(0)}))
	if errs := same.newSince(old); len(errs) != 0 {
		t.Errorf("unchanged offending values reported: %v", errs)
	}
	changed := ls.exportViolations(spec(20*time.Second, kollect.SinkReference{Name: "a", ExportMinInterval: duration(0)}))
	if errs := changed.newSince(old); len(errs) != 1 || errs[0].Field != "spec.exportMinInterval" {
		t.Errorf("a changed offending value: %v, want spec.exportMinInterval", errs)
	}
}

// TestCollectNamespaces: allowed namespaces need an explicit list within
// them; denied namespaces must be excluded.
func TestCollectNamespaces(t *testing.T) {
	allowed := clusterScopeLimits([]kollect.ClusterScope{{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: kollect.ClusterScopeSpec{AllowedNamespaces: []string{"a", "b"}}}})
	denied := clusterScopeLimits([]kollect.ClusterScope{{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: kollect.ClusterScopeSpec{DeniedNamespaces: []string{"kube-system"}}}})
	for _, tc := range []struct {
		ls               limits
		include, exclude []string
		fields           []string
	}{
		{ls: allowed, include: []string{"a"}},
		{ls: allowed, fields: []string{"spec.includeNamespaces"}},
		{ls: allowed, include: []string{"a", "c"}, fields: []string{"spec.includeNamespaces[1]"}},
		{ls: denied, fields: []string{"spec.excludeNamespaces"}},
		{ls: denied, exclude: []string{"kube-system"}},
		{ls: denied, include: []string{"x"}},
		{ls: denied, include: []string{"kube-system"}, fields: []string{"spec.includeNamespaces[0]"}},
		{ls: denied, exclude: []string{"other"}, fields: []string{"spec.excludeNamespaces"}},
	} {
		errs := tc.ls.checkCollectNamespaces(tc.include, tc.exclude)
		var got []string
		for _, e := range errs {
			got = append(got, e.Field)
		}
		if strings.Join(got, ",") != strings.Join(tc.fields, ",") {
			t.Errorf("include %v exclude %v: errors on %v, want %v (%v)", tc.include, tc.exclude, got, tc.fields, errs)
		}
	}
}
