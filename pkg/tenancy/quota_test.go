package tenancy

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestQuotasStrictestWins: the lowest value any Scope sets applies, named
// by the first Scope (by name) setting it; a field no Scope sets takes the
// server's default; a default of 0 sets none; a Scope's 0 allows nothing.
func TestQuotasStrictestWins(t *testing.T) {
	d := Quotas{MaxTargets: 100, MaxInventories: 0, MaxSinks: 7, MaxItems: 1000, MaxItemBytes: 4096}
	qs := NamespaceQuotas("team-a", []kollect.Scope{
		scope("z", kollect.ScopeSpec{MaxItems: ptr.To[int64](50), MaxTargets: ptr.To[int32](3)}),
		scope("b", kollect.ScopeSpec{MaxItems: ptr.To[int64](80), MaxItemBytes: ptr.To(resource.MustParse("1Ki"))}),
		scope("a", kollect.ScopeSpec{MaxItems: ptr.To[int64](50), MaxSinks: ptr.To[int32](0)}),
	}, d)
	for _, tc := range []struct {
		name  string
		q     Quota
		limit int64
		by    string
	}{
		{"items", qs.Items, 50, `maxItems of Scope "a" in namespace "team-a"`},
		{"targets", qs.Targets, 3, `maxTargets of Scope "z"`},
		{"sinks", qs.Sinks, 0, `maxSinks of Scope "a"`},
		{"item bytes", qs.ItemBytes, 1024, `maxItemBytes of Scope "b"`},
	} {
		if !tc.q.Set || tc.q.Limit != tc.limit || !strings.Contains(tc.q.By, tc.by) {
			t.Errorf("%s: %+v, want %d by %s", tc.name, tc.q, tc.limit, tc.by)
		}
	}
	if qs.Inventories.Set || !qs.Inventories.Allows(1<<40) {
		t.Errorf("inventories: %+v, want unlimited (no Scope sets it, the default is 0)", qs.Inventories)
	}
	if qs.Sinks.Allows(1) || !qs.Targets.Allows(3) || qs.Targets.Allows(4) {
		t.Error("Allows: 0 allows nothing, the limit itself is allowed")
	}

	none := NamespaceQuotas("team-b", nil, d)
	if !none.Items.Set || none.Items.Limit != 1000 || none.Items.By != `--default-max-items of the server (no Scope of namespace "team-b" sets maxItems)` {
		t.Errorf("defaults: %+v", none.Items)
	}
	if none.ItemBytes.Limit != 4096 || !strings.Contains(none.ItemBytes.By, "--default-max-item-bytes") {
		t.Errorf("default item bytes: %+v", none.ItemBytes)
	}
	if none.ClusterSinks.Set {
		t.Errorf("a namespace has no cluster-wide sink quota: %+v", none.ClusterSinks)
	}
}

// TestClusterQuotas: a ClusterScope's maxSinks caps all namespaces
// together and has no default; the other quotas limit the cluster kinds.
func TestClusterQuotas(t *testing.T) {
	d := Quotas{MaxTargets: 10, MaxSinks: 5, MaxItems: 100}
	qs := ClusterQuotas(nil, d)
	if qs.ClusterSinks.Set || qs.Sinks.Set || !qs.Targets.Set || qs.Targets.Limit != 10 || !strings.Contains(qs.Targets.By, "no ClusterScope sets maxTargets") {
		t.Errorf("defaults: %+v", qs)
	}
	qs = ClusterQuotas([]kollect.ClusterScope{
		{ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: kollect.ClusterScopeSpec{MaxSinks: ptr.To[int32](40), MaxItems: ptr.To[int64](7)}},
	}, d)
	if !qs.ClusterSinks.Set || qs.ClusterSinks.Limit != 40 || !strings.Contains(qs.ClusterSinks.By, `maxSinks of ClusterScope "platform", the sinks of all namespaces together`) {
		t.Errorf("cluster sinks: %+v", qs.ClusterSinks)
	}
	if qs.Items.Limit != 7 || qs.Sinks.Set {
		t.Errorf("items %+v, sinks %+v", qs.Items, qs.Sinks)
	}

	// The controllers' versioned objects give the same.
	served := ClusterScopeQuotas([]*v1alpha1.ClusterScope{{ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1alpha1.ClusterScopeSpec{MaxSinks: ptr.To[int32](40), MaxItems: ptr.To[int64](7)}}}, d)
	if served != qs {
		t.Errorf("ClusterScopeQuotas %+v, want %+v", served, qs)
	}
	ns := ScopeQuotas("team-a", []*v1alpha1.Scope{{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "team-a"},
		Spec: v1alpha1.ScopeSpec{MaxItemBytes: ptr.To(resource.MustParse("2Ki"))}}}, d)
	if ns.ItemBytes.Limit != 2048 || !strings.Contains(ns.ItemBytes.By, `Scope "s"`) {
		t.Errorf("ScopeQuotas: %+v", ns.ItemBytes)
	}
}

// TestItemSize counts attribute names and values, and the object.
func TestItemSize(t *testing.T) {
	attrs := map[string]kollect.Value{"image": {Raw: []byte(`"nginx"`)}, "n": {Raw: []byte(`3`)}}
	if got := ItemSize(attrs, nil); got != int64(len("image")+len(`"nginx"`)+len("n")+len("3")) {
		t.Errorf("attributes: %d", got)
	}
	if got := ItemSize(nil, &kollect.Value{Raw: []byte(`{"a":1}`)}); got != 7 {
		t.Errorf("object: %d", got)
	}
	if got := ItemSize(nil, nil); got != 0 {
		t.Errorf("empty: %d", got)
	}
}
