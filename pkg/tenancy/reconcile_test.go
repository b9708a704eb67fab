package tenancy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

func clusterScope(name string, spec kollect.ClusterScopeSpec) kollect.ClusterScope {
	return kollect.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// TestReconcileLimits: the reasons existing objects get when a Scope
// written later forbids what they do, and the same "every limit that is
// set applies" rule as admission.
func TestReconcileLimits(t *testing.T) {
	ns := NamespaceLimits([]kollect.Scope{
		scope("kinds", kollect.ScopeSpec{AllowedGVKs: []kollect.GroupKind{{Group: "apps", Kind: "*"}}, MinExportInterval: duration(time.Hour)}),
		scope("sinks", kollect.ScopeSpec{DatabaseSinkRefs: []string{"portal"}, MinExportInterval: duration(time.Minute)}),
	})
	if ns.Floor() != time.Hour {
		t.Errorf("floor %s, want the highest, 1h", ns.Floor())
	}
	if d := ns.Kind("apps", "Deployment"); d != nil {
		t.Errorf("apps/Deployment is allowed: %v", d)
	}
	if d := ns.Kind("", "Secret"); d == nil || d.Reason != kollect.ReasonScopeGVKDenied || !strings.Contains(d.Message, `Scope "kinds"`) {
		t.Errorf("core/Secret: %v, want ScopeGVKDenied naming the Scope", d)
	}
	if d := ns.Sink(kollect.SinkFamilyDatabase, "team-a", "portal", false); d != nil {
		t.Errorf("portal is allowed: %v", d)
	}
	if d := ns.Sink(kollect.SinkFamilyDatabase, "team-a", "other", false); d == nil || d.Reason != kollect.ReasonScopeSinkDenied {
		t.Errorf("database sink other: %v, want ScopeSinkDenied", d)
	}
	if d := ns.Sink(kollect.SinkFamilyEvent, "team-a", "other", false); d != nil {
		t.Errorf("no event sink allowlist is set: %v", d)
	}
	if NamespaceLimits(nil).Floor() != 0 {
		t.Error("no Scope, no floor")
	}

	cluster := ClusterLimits([]kollect.ClusterScope{
		clusterScope("refs", kollect.ClusterScopeSpec{ReferenceNamespaces: []string{"platform"}, SnapshotSinkRefs: []string{"platform/git"}}),
		clusterScope("namespaces", kollect.ClusterScopeSpec{AllowedNamespaces: []string{"a", "b"}, DeniedNamespaces: []string{"b"}}),
	})
	if d := cluster.ProfileNamespace("team-a"); d == nil || d.Reason != kollect.ReasonScopeNamespaceDenied {
		t.Errorf("profile in team-a: %v, want ScopeNamespaceDenied", d)
	}
	if d := cluster.Sink(kollect.SinkFamilySnapshot, "team-b", "git", true); d == nil || d.Reason != kollect.ReasonSinkNamespaceDenied {
		t.Errorf("sink in team-b: %v, want SinkNamespaceDenied", d)
	}
	if d := cluster.Sink(kollect.SinkFamilySnapshot, "platform", "files", true); d == nil || d.Reason != kollect.ReasonScopeSinkDenied {
		t.Errorf("sink platform/files: %v, want ScopeSinkDenied", d)
	}
	if d := cluster.Sink(kollect.SinkFamilySnapshot, "platform", "git", true); d != nil {
		t.Errorf("platform/git is allowed: %v", d)
	}
	for ns, want := range map[string]bool{"a": true, "b": false, "c": false} {
		if got := cluster.CollectsFrom(ns); got != want {
			t.Errorf("collects from %q: %v, want %v", ns, got, want)
		}
	}
	if d := cluster.IncludedNamespaces([]string{"a", "b", "c"}); d == nil || d.Reason != kollect.ReasonScopeNamespaceDenied ||
		!strings.Contains(d.Message, `"b", "c"`) || strings.Contains(d.Message, `"a"`) {
		t.Errorf("include a, b, c: %v, want ScopeNamespaceDenied naming b and c only", d)
	}
}

// recordingAuthorizer answers from a table and records what it was asked.
// The real delegated authorizer answers in the end-to-end tests; here the
// point is which attributes the re-check sends and how answers map.
type recordingAuthorizer struct {
	decision authorizer.Decision
	err      error
	asked    []authorizer.Attributes
}

func (a *recordingAuthorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attrs)
	return a.decision, "RBAC: no binding", a.err
}

func TestMayUseAndList(t *testing.T) {
	ctx := context.Background()
	requester := &v1alpha1.RequesterInfo{Username: "jane", UID: "42", Groups: []string{"platform"}, Extra: map[string]v1alpha1.ExtraValue{"scopes": {"s"}}}

	allow := &recordingAuthorizer{decision: authorizer.DecisionAllow}
	if d, err := MayUse(ctx, allow, requester, "databasesinks", "team-b", "portal"); d != nil || err != nil {
		t.Fatalf("allowed: %v %v", d, err)
	}
	got := allow.asked[0]
	if u := got.GetUser(); u.GetName() != "jane" || u.GetUID() != "42" || u.GetGroups()[0] != "platform" || u.GetExtra()["scopes"][0] != "s" {
		t.Errorf("the requester is not replayed whole: %+v", u)
	}
	if got.GetVerb() != "use" || got.GetAPIGroup() != "kollect.dev" || got.GetResource() != "databasesinks" ||
		got.GetNamespace() != "team-b" || got.GetName() != "portal" || !got.IsResourceRequest() {
		t.Errorf("asked %+v, want use on databasesinks team-b/portal", got)
	}

	deny := &recordingAuthorizer{decision: authorizer.DecisionNoOpinion}
	d, err := MayUse(ctx, deny, requester, "eventsinks", "team-b", "bus")
	if err != nil || d == nil || d.Reason != kollect.ReasonSinkForbidden || !strings.Contains(d.Message, `"jane"`) || !strings.Contains(d.Message, "RBAC: no binding") {
		t.Errorf("no opinion: %v %v, want SinkForbidden naming the user and the authorizer's reason", d, err)
	}
	if d, _ := MayUse(ctx, deny, requester, "profiles", "team-a", "p"); d == nil || d.Reason != kollect.ReasonProfileForbidden {
		t.Errorf("profile: %v, want ProfileForbidden", d)
	}
	if d, _ := MayUse(ctx, allow, nil, "snapshotsinks", "a", "b"); d == nil || d.Reason != kollect.ReasonSinkForbidden {
		t.Errorf("no requester recorded: %v, want a denial", d)
	}
	if _, err := MayUse(ctx, allow, requester, "secrets", "a", "b"); err == nil {
		t.Error("secrets cannot be referenced")
	}

	failing := &recordingAuthorizer{decision: authorizer.DecisionNoOpinion, err: errors.New("connection refused")}
	if d, err := MayUse(ctx, failing, requester, "snapshotsinks", "a", "b"); d != nil || err == nil {
		t.Errorf("an authorizer that cannot answer: %v %v, want an error to retry, not a denial", d, err)
	}

	gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	if d, _ := MayList(ctx, deny, requester, gvr, "team-a"); d == nil || d.Reason != kollect.ReasonProfileForbidden || !strings.Contains(d.Message, `in namespace "team-a"`) {
		t.Errorf("list denied: %v", d)
	}
	if got := deny.asked[len(deny.asked)-1]; got.GetVerb() != "list" || got.GetResource() != "secrets" || got.GetNamespace() != "team-a" {
		t.Errorf("asked %+v, want list secrets in team-a", got)
	}
	if d, _ := MayList(ctx, allow, requester, gvr, ""); d != nil {
		t.Errorf("list allowed: %v", d)
	}
}

// TestMayGetSecretAndListItems: the reconcile re-checks of a sink's Secret
// and of an inventory's items ask exactly get on the one Secret and list on
// the items of the inventory's scope, for the recorded requester.
func TestMayGetSecretAndListItems(t *testing.T) {
	ctx := context.Background()
	requester := &v1alpha1.RequesterInfo{Username: "jane", UID: "42", Groups: []string{"team-a"}}

	allow := &recordingAuthorizer{decision: authorizer.DecisionAllow}
	if d, err := MayGetSecret(ctx, allow, requester, "team-a", "hook-token"); d != nil || err != nil {
		t.Fatalf("allowed: %v %v", d, err)
	}
	got := allow.asked[0]
	if got.GetVerb() != "get" || got.GetAPIGroup() != "" || got.GetResource() != "secrets" || got.GetNamespace() != "team-a" ||
		got.GetName() != "hook-token" || !got.IsResourceRequest() || got.GetUser().GetName() != "jane" || got.GetUser().GetGroups()[0] != "team-a" {
		t.Errorf("asked %+v as %+v, want get on secrets team-a/hook-token as jane", got, got.GetUser())
	}

	deny := &recordingAuthorizer{decision: authorizer.DecisionNoOpinion}
	d, err := MayGetSecret(ctx, deny, requester, "team-a", "hook-token")
	if err != nil || d == nil || d.Reason != kollect.ReasonSecretForbidden {
		t.Fatalf("denied: %v %v, want SecretForbidden", d, err)
	}
	for _, want := range []string{`"jane"`, `Secret "hook-token"`, `namespace "team-a"`, `"get"`, "RBAC: no binding"} {
		if !strings.Contains(d.Message, want) {
			t.Errorf("the denial should name %s: %s", want, d.Message)
		}
	}
	d, _ = MayGetSecret(ctx, allow, nil, "team-a", "hook-token")
	if d == nil || d.Reason != kollect.ReasonSecretForbidden || !strings.Contains(d.Message, AnnotationReaffirm) {
		t.Errorf("a sink without a requester: %v, want SecretForbidden saying how to re-affirm", d)
	}
	failing := &recordingAuthorizer{decision: authorizer.DecisionNoOpinion, err: errors.New("connection refused")}
	if d, err := MayGetSecret(ctx, failing, requester, "team-a", "hook-token"); d != nil || err == nil {
		t.Errorf("an authorizer that cannot answer: %v %v, want an error to retry", d, err)
	}

	for _, tc := range []struct {
		namespace, resource, where string
	}{
		{"team-a", "inventoryitems", `in namespace "team-a"`},
		{"", "clusterinventoryitems", "across the cluster"},
	} {
		deny.asked = nil
		d, err := MayListItems(ctx, deny, requester, tc.namespace)
		if err != nil || d == nil || d.Reason != kollect.ReasonItemsForbidden || !strings.Contains(d.Message, tc.resource+".kollect.dev "+tc.where) {
			t.Errorf("%s: %v %v, want ItemsForbidden naming %s %s", tc.resource, d, err, tc.resource, tc.where)
		}
		got := deny.asked[0]
		if got.GetVerb() != "list" || got.GetAPIGroup() != kollect.GroupName || got.GetResource() != tc.resource || got.GetNamespace() != tc.namespace || got.GetName() != "" {
			t.Errorf("asked %+v, want list %s in %q", got, tc.resource, tc.namespace)
		}
		if d, err := MayListItems(ctx, allow, requester, tc.namespace); d != nil || err != nil {
			t.Errorf("%s allowed: %v %v", tc.resource, d, err)
		}
	}
	if d, _ := MayListItems(ctx, allow, nil, "team-a"); d == nil || d.Reason != kollect.ReasonItemsForbidden {
		t.Errorf("no requester: %v, want ItemsForbidden", d)
	}
}

func TestRequesterExpired(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *v1alpha1.RequesterInfo {
		return &v1alpha1.RequesterInfo{Username: "jane", RecordedAt: &metav1.Time{Time: now.Add(-d)}}
	}
	for name, tc := range map[string]struct {
		requester *v1alpha1.RequesterInfo
		maxAge    time.Duration
		expired   bool
		mentions  []string
	}{
		"off":                     {requester: at(1000 * time.Hour), maxAge: 0},
		"off without a requester": {maxAge: 0},
		"recent":                  {requester: at(time.Hour), maxAge: 24 * time.Hour},
		"exactly max age":         {requester: at(24 * time.Hour), maxAge: 24 * time.Hour},
		"older":                   {requester: at(25 * time.Hour), maxAge: 24 * time.Hour, expired: true, mentions: []string{`"jane"`, "2026-04-30T11:00:00Z", "--requester-max-age=24h0m0s", AnnotationReaffirm}},
		"no time recorded":        {requester: &v1alpha1.RequesterInfo{Username: "jane"}, maxAge: time.Hour, expired: true, mentions: []string{"no requester time"}},
		"no requester":            {maxAge: time.Hour, expired: true, mentions: []string{AnnotationReaffirm}},
	} {
		d := RequesterExpired(tc.requester, tc.maxAge, now)
		if (d != nil) != tc.expired {
			t.Errorf("%s: %v, want expired %v", name, d, tc.expired)
			continue
		}
		if d == nil {
			continue
		}
		if d.Reason != kollect.ReasonRequesterExpired {
			t.Errorf("%s: reason %s", name, d.Reason)
		}
		for _, m := range tc.mentions {
			if !strings.Contains(d.Message, m) {
				t.Errorf("%s: the message should mention %s: %s", name, m, d.Message)
			}
		}
	}
}
