package tenancy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

func scope(name string, spec kollect.ScopeSpec) kollect.Scope {
	return kollect.Scope{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a"}, Spec: spec}
}

// escalator answers `escalate` on scopes in team-a for jane alone.
func escalator() *answers {
	return &answers{allow: func(a authorizer.Attributes) bool {
		return a.GetUser().GetName() == "jane" && a.GetVerb() == tenancy.VerbEscalate
	}}
}

// TestScopeQuotaEscalate: a Scope setting a quota above the server's
// default needs `escalate` on scopes, asked for exactly that Scope; a value
// at or under the default, or any value where the default is 0, does not.
func TestScopeQuotaEscalate(t *testing.T) {
	d := tenancy.Quotas{MaxTargets: 100, MaxInventories: 0, MaxSinks: 100, MaxItems: 100_000, MaxItemBytes: 64 << 10}
	authz := escalator()
	c := New(Config{Authorizer: authz, Quotas: d})
	admission := c.Scopes()

	raised := scope("limits", kollect.ScopeSpec{MaxItems: ptr.To[int64](500_000)})
	err := admission.AdmitCreate(asUser("bob"), &raised)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("bob raising maxItems: %v, want 403", err)
	}
	for _, want := range []string{`scopes.kollect.dev "limits" is forbidden`, "spec.maxItems: 500000 is above the server default 100000 (--default-max-items)",
		`the verb "escalate" on scopes.kollect.dev in namespace "team-a"`, `user "bob"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the 403 should say %s: %v", want, err)
		}
	}
	got := authz.asked[len(authz.asked)-1]
	if got.GetVerb() != tenancy.VerbEscalate || got.GetAPIGroup() != kollect.GroupName || got.GetResource() != "scopes" ||
		got.GetNamespace() != "team-a" || got.GetName() != "limits" || !got.IsResourceRequest() || got.GetUser().GetName() != "bob" {
		t.Errorf("asked %+v as %q, want escalate on scopes team-a/limits as bob", got, got.GetUser().GetName())
	}
	if err := admission.AdmitCreate(asUser("jane"), &raised); err != nil {
		t.Errorf("jane, who may escalate: %v", err)
	}

	all := scope("all", kollect.ScopeSpec{MaxTargets: ptr.To[int32](101), MaxSinks: ptr.To[int32](1000), MaxItems: ptr.To[int64](100_001),
		MaxItemBytes: ptr.To(resource.MustParse("1Mi"))})
	err = admission.AdmitCreate(asUser("bob"), &all)
	for _, want := range []string{"spec.maxTargets: 101 is above the server default 100 (--default-max-targets)",
		"spec.maxSinks: 1000 is above the server default 100 (--default-max-sinks)",
		"spec.maxItems: 100001 is above", "spec.maxItemBytes: 1Mi is above the server default 64Ki (--default-max-item-bytes)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("every raised field should be named, %s: %v", want, err)
		}
	}

	asked := len(authz.asked)
	for _, spec := range []kollect.ScopeSpec{
		{},
		{MaxItems: ptr.To[int64](100_000), MaxTargets: ptr.To[int32](100), MaxItemBytes: ptr.To(resource.MustParse("64Ki"))},
		{MaxItems: ptr.To[int64](50), MaxSinks: ptr.To[int32](0)},
		// --default-max-inventories 0 sets no limit: any value lowers it.
		{MaxInventories: ptr.To[int32](1_000_000)},
	} {
		s := scope("lower", spec)
		if err := admission.AdmitCreate(asUser("bob"), &s); err != nil {
			t.Errorf("bob creating %+v, at or under the defaults: %v", spec, err)
		}
	}
	if n := len(authz.asked) - asked; n != 0 {
		t.Errorf("Scopes at or under the defaults asked the authorizer %d times, want none", n)
	}

	failing := New(Config{Quotas: d, Authorizer: authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
		return authorizer.DecisionNoOpinion, "RBAC: no binding", errors.New("connection refused")
	})})
	if err := failing.Scopes().AdmitCreate(asUser("jane"), &raised); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("an authorizer that cannot answer: %v, want 403 saying why", err)
	}
	if err := New(Config{Quotas: d}).Scopes().AdmitCreate(context.Background(), &raised); err != nil {
		t.Errorf("without an authorizer the check is skipped: %v", err)
	}
}

// TestScopeQuotaEscalateRatchet: on update only a new or raised value
// above the default needs `escalate`, and the 403 names exactly those
// fields; lowering, keeping, or unsetting a quota an operator raised does not.
func TestScopeQuotaEscalateRatchet(t *testing.T) {
	d := tenancy.Quotas{MaxTargets: 100, MaxSinks: 100, MaxItems: 100_000, MaxItemBytes: 64 << 10}
	c := New(Config{Authorizer: escalator(), Quotas: d})
	items := func(v *int64) kollect.Scope { return scope("limits", kollect.ScopeSpec{MaxItems: v}) }
	for _, tc := range []struct {
		name     string
		old, now kollect.Scope
		// refused are the fields the 403 names; none: allowed.
		refused []string
	}{
		{"unset to above", items(nil), items(ptr.To[int64](200_000)), []string{"maxItems"}},
		{"under to above", items(ptr.To[int64](50)), items(ptr.To[int64](200_000)), []string{"maxItems"}},
		{"above raised", items(ptr.To[int64](200_000)), items(ptr.To[int64](300_000)), []string{"maxItems"}},
		{"under to the default", items(ptr.To[int64](50)), items(ptr.To[int64](100_000)), nil},
		{"above lowered, still above", items(ptr.To[int64](300_000)), items(ptr.To[int64](200_000)), nil},
		{"above kept", items(ptr.To[int64](300_000)), items(ptr.To[int64](300_000)), nil},
		{"above unset", items(ptr.To[int64](300_000)), items(nil), nil},
		{"one kept above, another lowered",
			scope("limits", kollect.ScopeSpec{MaxItems: ptr.To[int64](300_000), MaxTargets: ptr.To[int32](50)}),
			scope("limits", kollect.ScopeSpec{MaxItems: ptr.To[int64](300_000), MaxTargets: ptr.To[int32](10)}), nil},
		{"one kept above, another raised",
			scope("limits", kollect.ScopeSpec{MaxItems: ptr.To[int64](300_000)}),
			scope("limits", kollect.ScopeSpec{MaxItems: ptr.To[int64](300_000), MaxSinks: ptr.To[int32](101)}), []string{"maxSinks"}},
	} {
		err := c.Scopes().AdmitUpdate(asUser("bob"), &tc.now, &tc.old)
		if len(tc.refused) == 0 {
			if err != nil {
				t.Errorf("%s: bob: %v, want allowed", tc.name, err)
			}
		} else if !apierrors.IsForbidden(err) {
			t.Errorf("%s: bob: %v, want 403", tc.name, err)
		} else {
			for _, f := range tenancy.QuotaFields {
				named := strings.Contains(err.Error(), "spec."+f.Name+":")
				if named != slices.Contains(tc.refused, f.Name) {
					t.Errorf("%s: the 403 names spec.%s: %v, want %v: %v", tc.name, f.Name, named, !named, err)
				}
			}
		}
		if err := c.Scopes().AdmitUpdate(asUser("jane"), &tc.now, &tc.old); err != nil {
			t.Errorf("%s: jane, who may escalate: %v", tc.name, err)
		}
	}
}
