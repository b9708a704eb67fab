package collect

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

func TestWatched(t *testing.T) {
	for _, tc := range []struct {
		obj, ns string
		want    bool
	}{
		{"", "", true},
		{"", "enabled", true},
		{"", "disabled", false},
		{"disabled", "", false},
		{"disabled", "enabled", false},
		{"enabled", "disabled", true},
		{"bogus", "disabled", false},
		{"bogus", "", true},
	} {
		obj, ns := map[string]string{}, map[string]string{}
		if tc.obj != "" {
			obj[labelWatch] = tc.obj
		}
		if tc.ns != "" {
			ns[labelWatch] = tc.ns
		}
		if got := watched(obj, ns); got != tc.want {
			t.Errorf("object %q, namespace %q: %v, want %v", tc.obj, tc.ns, got, tc.want)
		}
	}
}

func TestNamespaceSelection(t *testing.T) {
	v := &targetObject{
		key:               targetKey{Cluster: true, Name: "c"},
		namespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}},
		exclude:           []string{"blocked"},
	}
	s, err := newSelection(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	team := map[string]string{"team": "a"}
	if !s.namespaceSelected("x", team) || s.namespaceSelected("x", nil) || s.namespaceSelected("blocked", team) {
		t.Error("selector or exclude not applied")
	}

	// ClusterScopes: every allowedNamespaces set must allow the namespace,
	// no deniedNamespaces may hold it.
	limits := tenancy.ClusterLimits([]kollect.ClusterScope{
		{ObjectMeta: metav1.ObjectMeta{Name: "allow"}, Spec: kollect.ClusterScopeSpec{AllowedNamespaces: []string{"x", "y"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deny"}, Spec: kollect.ClusterScopeSpec{DeniedNamespaces: []string{"y"}}},
	})
	if s, err = newSelection(v, &limits); err != nil {
		t.Fatal(err)
	}
	if !s.namespaceSelected("x", team) || s.namespaceSelected("y", team) || s.namespaceSelected("z", team) {
		t.Error("the ClusterScopes' namespace limits not applied")
	}

	v.include = []string{"only"}
	v.namespaceSelector = nil
	if s, err = newSelection(v, nil); err != nil {
		t.Fatal(err)
	}
	if !s.namespaceSelected("only", nil) || s.namespaceSelected("x", team) {
		t.Error("include not applied, or an absent selector selects nothing")
	}
	if !s.objects.Empty() {
		t.Error("an absent label selector must select every object")
	}
	v.labelSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Bogus"}}}
	if _, err := newSelection(v, nil); err == nil {
		t.Error("an invalid selector compiles")
	}
}

func TestLabelValue(t *testing.T) {
	if got := labelValue("web"); got != "web" {
		t.Errorf("short names stay: %q", got)
	}
	long := strings.Repeat("a", 60) + "." + strings.Repeat("b", 40)
	got := labelValue(long)
	if len(validation.IsValidLabelValue(got)) > 0 || got != labelValue(long) || got == labelValue(long+"c") {
		t.Errorf("labelValue(%d chars) = %q", len(long), got)
	}
	if got := labelValue(strings.Repeat("-", 70)); len(validation.IsValidLabelValue(got)) > 0 {
		t.Errorf("labelValue of dashes = %q", got)
	}
}
