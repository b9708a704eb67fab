package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// allow is one rule of the test authorizer: a user may do verb on
// resource (any resource when empty) in namespace ("" is cluster-wide; a
// cluster-wide rule covers every namespace, like a ClusterRoleBinding),
// restricted to name when set.
type allow struct {
	user, verb, resource, namespace, name string
}

// rules is a small real authorizer over a static rule list. The registry
// asks it exactly what it asks the delegated authorizer in a real server;
// the end-to-end suite proves the same checks against kube-apiserver's RBAC.
type rules []allow

func (rs rules) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	for _, r := range rs {
		if r.user == a.GetUser().GetName() && r.verb == a.GetVerb() &&
			(r.resource == "" || r.resource == a.GetResource()) &&
			(r.namespace == "" || r.namespace == a.GetNamespace()) &&
			(r.name == "" || r.name == a.GetName()) {
			return authorizer.DecisionAllow, "", nil
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// person is a test user reached with the bearer token equal to its name.
func person(name string, groups ...string) user.Info {
	return &user.DefaultInfo{Name: name, UID: "uid-" + name, Groups: append(groups, user.AllAuthenticated),
		Extra: map[string][]string{"example.dev/team": {name + "-team"}}}
}

// hostKinds is what the host cluster's discovery would answer for the
// kinds these tests collect.
func hostKinds() meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	m.Add(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, meta.RESTScopeNamespace)
	return m
}

// startTenancyServer runs a server with the users alice, bob, carol,
// platform and the rules given.
func startTenancyServer(t *testing.T, rs rules) *testserver.Server {
	t.Helper()
	users := map[string]user.Info{}
	for _, u := range []user.Info{person("alice", "team-a"), person("bob"), person("carol"), person("platform", "platform-team")} {
		users[u.GetName()] = u
	}
	return testserver.Start(t, testserver.Options{Users: users, Authorizer: rs, RESTMapper: hostKinds()})
}

func expectForbidden(t *testing.T, err error, want ...string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want 403 Forbidden", err)
	}
	t.Logf("403: %v", err)
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the 403 should mention %q: %v", w, err)
		}
	}
}

// expectInvalid wants a 422 with a cause on field whose message has every
// one of want.
func expectInvalid(t *testing.T, err error, field string, want ...string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	t.Logf("422: %v", err)
	var causes []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		causes = append(causes, c.Field+": "+c.Message)
		if c.Field != field {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(c.Message, w)
		}
		if ok {
			return
		}
	}
	t.Errorf("no cause on %s mentioning %q; causes: %q", field, want, causes)
}

func expectRequester(t *testing.T, what string, got *v1alpha1.RequesterInfo, name string) {
	t.Helper()
	if got == nil || got.Username != name || got.UID != "uid-"+name ||
		!slices.Contains(got.Groups, user.AllAuthenticated) || !slices.Equal(got.Extra["example.dev/team"], []string{name + "-team"}) {
		t.Errorf("%s: requester %+v, want %s with its uid, groups and extra", what, got, name)
	}
}

func tenancyContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestUseVerbOnReferences: referencing a sink or a profile needs `use` on
// it, asked for the requesting user; a denial is a 403 naming the
// namespace, kind, name and verb.
func TestUseVerbOnReferences(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "use", namespace: "team-a"},
		{user: "alice", verb: "list", namespace: "team-a"},
		{user: "platform", verb: "use", resource: "snapshotsinks", namespace: "kollect-system"},
		{user: "platform", verb: "list"},
		{user: "carol", verb: "use", resource: "snapshotsinks", namespace: "team-a", name: "audit"},
	})
	ctx := tenancyContext(t)
	alice, bob, carol, platform := srv.ClientFor("alice").KollectV1alpha1(), srv.ClientFor("bob").KollectV1alpha1(),
		srv.ClientFor("carol").KollectV1alpha1(), srv.ClientFor("platform").KollectV1alpha1()

	inv := &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "exports", Namespace: "team-a"},
		Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}}},
	}
	_, err := bob.Inventories("team-a").Create(ctx, inv, metav1.CreateOptions{})
	expectForbidden(t, err, `user "bob"`, `use`, `SnapshotSink "audit"`, `namespace "team-a"`, "spec.snapshotSinkRefs[0]")
	if _, err := alice.Inventories("team-a").Create(ctx, inv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice holds use in team-a: %v", err)
	}
	// Only the sink named in carol's rule: audit passes, portal does not.
	two := inv.DeepCopy()
	two.Name = "two"
	two.Spec.DatabaseSinkRefs = []v1alpha1.SinkReference{{Name: "portal"}}
	_, err = carol.Inventories("team-a").Create(ctx, two, metav1.CreateOptions{})
	expectForbidden(t, err, `DatabaseSink "portal"`, "spec.databaseSinkRefs[0]")
	if strings.Contains(err.Error(), `"audit"`) {
		t.Errorf("audit is allowed to carol and should not be reported: %v", err)
	}

	// A Target needs use on its Profile.
	if _, err := srv.Client.KollectV1alpha1().Profiles("team-a").Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tgt := &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "deployments"}}}
	_, err = bob.Targets("team-a").Create(ctx, tgt, metav1.CreateOptions{})
	expectForbidden(t, err, `user "bob"`, `use`, `Profile "deployments"`, `namespace "team-a"`)
	if _, err := alice.Targets("team-a").Create(ctx, tgt, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice: %v", err)
	}

	// ClusterInventory refs resolve in sinkNamespace unless they name one.
	cinv := &v1alpha1.ClusterInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "rollup"},
		Spec: v1alpha1.ClusterInventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{
			{Name: "git-backup"}, {Name: "team-git", Namespace: "team-b"},
		}},
	}
	_, err = platform.ClusterInventories().Create(ctx, cinv, metav1.CreateOptions{})
	expectForbidden(t, err, `SnapshotSink "team-git"`, `namespace "team-b"`, `"use"`, "spec.snapshotSinkRefs[1]")
	if strings.Contains(err.Error(), "git-backup") {
		t.Errorf("git-backup in kollect-system (the default sinkNamespace) is allowed: %v", err)
	}
	cinv.Spec.SnapshotSinkRefs = cinv.Spec.SnapshotSinkRefs[:1]
	if _, err := platform.ClusterInventories().Create(ctx, cinv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("platform: %v", err)
	}
}

// TestRequesterRecorded: status.requester is the user whose request
// created the object or last changed its references, whatever clients send
// on create, update or /status.
func TestRequesterRecorded(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "use", namespace: "team-a"},
		{user: "alice", verb: "list", resource: "inventoryitems", namespace: "team-a"},
		{user: "carol", verb: "use", namespace: "team-a"},
		{user: "carol", verb: "list", resource: "inventoryitems", namespace: "team-a"},
	})
	ctx := tenancyContext(t)
	mallory := &v1alpha1.RequesterInfo{Username: "mallory", Groups: []string{"system:masters"}}
	invs := func(who string) interface {
		Create(context.Context, *v1alpha1.Inventory, metav1.CreateOptions) (*v1alpha1.Inventory, error)
		Update(context.Context, *v1alpha1.Inventory, metav1.UpdateOptions) (*v1alpha1.Inventory, error)
		UpdateStatus(context.Context, *v1alpha1.Inventory, metav1.UpdateOptions) (*v1alpha1.Inventory, error)
		Patch(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (*v1alpha1.Inventory, error)
	} {
		return srv.ClientFor(who).KollectV1alpha1().Inventories("team-a")
	}

	created, err := invs("alice").Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "exports", Namespace: "team-a"},
		Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}}},
		Status:     v1alpha1.InventoryStatus{Requester: mallory},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectRequester(t, "create", created.Status.Requester, "alice")

	// An update that does not touch the references keeps the requester
	// (and needs no `use`: bob has none), even with a forged one.
	upd := created.DeepCopy()
	upd.Spec.Suspend = true
	upd.Status.Requester = mallory
	got, err := invs("bob").Update(ctx, upd, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("bob suspends: %v", err)
	}
	expectRequester(t, "update without reference changes", got.Status.Requester, "alice")

	// /status never takes it from the request either.
	got.Status.Requester = mallory
	got.Status.ItemCount = 3
	got, err = invs("bob").UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	expectRequester(t, "status update", got.Status.Requester, "alice")
	got, err = invs("bob").Patch(ctx, "exports", types.MergePatchType,
		[]byte(`{"status":{"requester":{"username":"mallory","groups":["system:masters"]}}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("status patch: %v", err)
	}
	expectRequester(t, "status patch", got.Status.Requester, "alice")
	got, err = invs("bob").Patch(ctx, "exports", types.ApplyPatchType,
		[]byte(`{"apiVersion":"kollect.dev/v1alpha1","kind":"Inventory","metadata":{"name":"exports"},"status":{"requester":{"username":"mallory"}}}`),
		metav1.PatchOptions{FieldManager: "mallory", Force: ptr(true)}, "status")
	if err != nil {
		t.Fatalf("status apply: %v", err)
	}
	expectRequester(t, "status apply", got.Status.Requester, "alice")
	for _, mf := range got.ManagedFields {
		if mf.Manager == "mallory" && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), "requester") {
			t.Errorf("the status apply claims status.requester: %s", mf.FieldsV1.Raw)
		}
	}

	// Changing the references is checked against, and recorded as, the
	// user who does it: bob may not, carol may.
	got.Spec.EventSinkRefs = []v1alpha1.SinkReference{{Name: "changes"}}
	_, err = invs("bob").Update(ctx, got, metav1.UpdateOptions{})
	expectForbidden(t, err, `EventSink "changes"`, `user "bob"`)
	got.Status.Requester = mallory
	got, err = invs("carol").Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("carol adds a sink: %v", err)
	}
	expectRequester(t, "update changing the references", got.Status.Requester, "carol")
	// An interval is not a reference.
	got.Spec.SnapshotSinkRefs = []v1alpha1.SinkReference{{Name: "audit", ExportMinInterval: &metav1.Duration{Duration: time.Hour}}}
	got, err = invs("bob").Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("bob changes an interval: %v", err)
	}
	expectRequester(t, "interval change", got.Status.Requester, "carol")
}

// TestListCheckOfTargets: a Target needs the user to be allowed to list
// what its Profile collects in its namespace, a ClusterTarget across the
// cluster; the Secrets opt-in annotation does not change that.
func TestListCheckOfTargets(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "use", namespace: "team-a"},
		{user: "alice", verb: "list", resource: "deployments", namespace: "team-a"},
		{user: "bob", verb: "use", namespace: "team-a"},
		{user: "bob", verb: "list", resource: "secrets", namespace: "team-a"},
		{user: "platform", verb: "use"},
		{user: "platform", verb: "list", resource: "deployments", namespace: "team-a"},
		{user: "carol", verb: "use"},
		{user: "carol", verb: "list", resource: "deployments"},
	})
	ctx := tenancyContext(t)
	admin := srv.Client.KollectV1alpha1()
	for _, p := range []*v1alpha1.Profile{
		{ObjectMeta: metav1.ObjectMeta{Name: "secrets", Annotations: map[string]string{v1alpha1.AnnotationCollectSecrets: "true"}},
			Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"},
				Attributes: []v1alpha1.Attribute{{Name: "type", Path: "{.type}"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
			Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
				Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "widgets"},
			Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "example.dev", Version: "v1", Kind: "Widget"},
				Attributes: []v1alpha1.Attribute{{Name: "size", Path: "{.spec.size}"}}}},
	} {
		if _, err := admin.Profiles("team-a").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	target := func(name, profile string) *v1alpha1.Target {
		return &v1alpha1.Target{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: profile}}}
	}
	alice, bob := srv.ClientFor("alice").KollectV1alpha1(), srv.ClientFor("bob").KollectV1alpha1()

	_, err := alice.Targets("team-a").Create(ctx, target("secrets", "secrets"), metav1.CreateOptions{})
	expectForbidden(t, err, `user "alice"`, `list secrets in namespace "team-a"`, "Profile team-a/secrets")
	if _, err := bob.Targets("team-a").Create(ctx, target("secrets", "secrets"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("bob may list secrets in team-a: %v", err)
	}
	if _, err := alice.Targets("team-a").Create(ctx, target("web", "deployments"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice may list deployments: %v", err)
	}
	// Switching the profile is checked again.
	web, err := alice.Targets("team-a").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.ProfileRef.Name = "secrets"
	_, err = alice.Targets("team-a").Update(ctx, web, metav1.UpdateOptions{})
	expectForbidden(t, err, "list secrets")

	// The Profile must exist for the kind to be checked.
	_, err = alice.Targets("team-a").Create(ctx, target("ghost", "missing"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.profileRef.name", "must exist")
	// A kind the cluster does not serve cannot be checked: accepted, with
	// a warning (the collector reports KindNotFound until it is served).
	cfg := srv.ConfigFor("alice")
	warnings := &warningRecorder{}
	cfg.WarningHandler = warnings
	if _, err := versioned.NewForConfigOrDie(cfg).KollectV1alpha1().Targets("team-a").Create(ctx, target("widgets", "widgets"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a kind the cluster does not serve: %v", err)
	}
	if len(warnings.texts) != 1 || !strings.Contains(warnings.texts[0], "does not serve") {
		t.Errorf("warnings %q, want one saying the kind is not served", warnings.texts)
	}

	// ClusterTargets need list across the cluster.
	ct := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "deployments"}, Spec: v1alpha1.ClusterTargetSpec{
		ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "team-a", Name: "deployments"}}}
	_, err = srv.ClientFor("platform").KollectV1alpha1().ClusterTargets().Create(ctx, ct, metav1.CreateOptions{})
	expectForbidden(t, err, `user "platform"`, "list deployments.apps across the cluster")
	if _, err := srv.ClientFor("carol").KollectV1alpha1().ClusterTargets().Create(ctx, ct, metav1.CreateOptions{}); err != nil {
		t.Fatalf("carol may list deployments everywhere: %v", err)
	}
}

// TestClusterTargetProfileNamespaceRequired: cluster kinds have no
// namespace to default a profile reference to.
func TestClusterTargetProfileNamespaceRequired(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	_, err := srv.Client.KollectV1alpha1().ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "no-namespace"},
		Spec:       v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Name: "deployments"}},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.profileRef.namespace")
}

// TestScopeLimits: the Scopes of a namespace bound intervals, sinks and
// kinds; several Scopes intersect their allowlists and the highest floor
// wins; an object that predates a limit can still be updated in other ways.
func TestScopeLimits(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{FileSinkRoot: t.TempDir()}) // the "audit" file sink
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	const ns = "team-a"
	invs := api.Inventories(ns)

	old, err := invs.Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "before-the-scopes"},
		Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: 30 * time.Second},
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "scratch"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []*v1alpha1.Scope{
		{ObjectMeta: metav1.ObjectMeta{Name: "limits"}, Spec: v1alpha1.ScopeSpec{
			MinExportInterval: &metav1.Duration{Duration: time.Minute},
			AllowedGVKs:       []v1alpha1.GroupKind{{Group: "apps", Kind: "*"}, {Kind: "ConfigMap"}},
			SnapshotSinkRefs:  []string{"audit", "backup"},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "strict"}, Spec: v1alpha1.ScopeSpec{
			MinExportInterval: &metav1.Duration{Duration: 5 * time.Minute},
			AllowedGVKs:       []v1alpha1.GroupKind{{Group: "apps", Kind: "Deployment"}, {Kind: "ConfigMap"}},
			SnapshotSinkRefs:  []string{"audit"},
		}},
	} {
		if _, err := api.Scopes(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The highest floor applies, named with its Scope, on the inventory,
	// its references and sinks.
	_, err = invs.Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "fast"},
		Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: 2 * time.Minute},
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit", ExportMinInterval: &metav1.Duration{}}}},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.exportMinInterval", "2m0s is below the floor of 5m0s", `Scope "strict"`)
	expectInvalid(t, err, "spec.snapshotSinkRefs[0].exportMinInterval", "0s is below the floor of 5m0s", `Scope "strict"`)
	_, err = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "audit"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///tmp/audit",
			ExportMinInterval: &metav1.Duration{Duration: time.Minute}},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.exportMinInterval", "1m0s is below the floor of 5m0s", `Scope "strict"`)

	// Sink allowlists intersect: backup is allowed by one Scope only.
	_, err = invs.Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"},
		Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}, {Name: "backup"}}},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.snapshotSinkRefs[1].name", `SnapshotSink "backup"`, "snapshotSinkRefs allowlist", `Scope "strict"`)
	if _, err := invs.Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "fine"},
		Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: 10 * time.Minute},
			SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "audit"}},
			DatabaseSinkRefs: []v1alpha1.SinkReference{{Name: "any-database"}}}, // no database allowlist
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("within the limits: %v", err)
	}

	// Kinds: StatefulSet is allowed by "limits" (apps/*) but not "strict".
	_, err = api.Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "statefulsets"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "StatefulSet"},
			Attributes: []v1alpha1.Attribute{{Name: "replicas", Path: "{.spec.replicas}"}}},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.targetGVK", "apps/StatefulSet", `Scope "strict"`)
	if strings.Contains(err.Error(), `Scope \"limits\"`) || strings.Contains(err.Error(), `Scope "limits"`) {
		t.Errorf("limits allows apps/*: %v", err)
	}

	// Ratcheting: the inventory from before the Scopes keeps its interval
	// and sink through unrelated updates, but cannot move to a new
	// offending value.
	old.Labels = map[string]string{"touched": "yes"}
	old.Spec.Suspend = true
	if old, err = invs.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("an unrelated update of an object that predates the Scopes: %v", err)
	}
	old.Spec.ExportMinInterval = &metav1.Duration{Duration: 10 * time.Second}
	_, err = invs.Update(ctx, old, metav1.UpdateOptions{})
	expectInvalid(t, err, "spec.exportMinInterval", "10s is below the floor of 5m0s")
}

// TestClusterScopeLimits: ClusterScopes bound the namespaces cluster kinds
// reference and collect from, their sinks and intervals.
func TestClusterScopeLimits(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{
		ObjectMeta: metav1.ObjectMeta{Name: "platform"},
		Spec: v1alpha1.ClusterScopeSpec{
			MinExportInterval:   &metav1.Duration{Duration: time.Minute},
			ReferenceNamespaces: []string{"kollect-system", "team-a"},
			AllowedNamespaces:   []string{"team-a", "team-b"},
			SnapshotSinkRefs:    []string{"kollect-system/git-backup", "team-a/team-git"},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ct := func(profileNS string, include ...string) *v1alpha1.ClusterTarget {
		return &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "ct"}, Spec: v1alpha1.ClusterTargetSpec{
			ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: profileNS, Name: "deployments"}, IncludeNamespaces: include}}
	}
	_, err := api.ClusterTargets().Create(ctx, ct("team-c", "team-a"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.profileRef.namespace", `namespace "team-c" is not in the referenceNamespaces of ClusterScope "platform"`)
	_, err = api.ClusterTargets().Create(ctx, ct("team-a", "team-a", "team-z"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.includeNamespaces[1]", `namespace "team-z" is not in the allowedNamespaces`)
	_, err = api.ClusterTargets().Create(ctx, ct("team-a"), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.includeNamespaces", "must list the namespaces")
	if _, err := api.ClusterTargets().Create(ctx, ct("kollect-system", "team-a", "team-b"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("within the ClusterScope: %v", err)
	}

	_, err = api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{
		ObjectMeta: metav1.ObjectMeta{Name: "rollup"},
		Spec: v1alpha1.ClusterInventorySpec{
			ExportMinInterval: &metav1.Duration{Duration: 30 * time.Second},
			SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "git-backup"}, {Name: "team-git", Namespace: "team-b"}},
		},
	}, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.exportMinInterval", "below the floor of 1m0s", `ClusterScope "platform"`)
	expectInvalid(t, err, "spec.snapshotSinkRefs[1].namespace", `namespace "team-b" is not in the referenceNamespaces`)
	expectInvalid(t, err, "spec.snapshotSinkRefs[1].name", `"team-b/team-git" is not in the snapshotSinkRefs allowlist`)
}

// TestTenantMode: with --tenant-mode the cluster kinds cannot be created
// or updated (403, saying why); objects from before can still be deleted,
// finalizers included.
func TestTenantMode(t *testing.T) {
	ctx := tenancyContext(t)
	before := testserver.Start(t, testserver.Options{})
	api := before.Client.KollectV1alpha1()
	ctObj := &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "old", Finalizers: []string{"example.dev/hold"}},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "p"}}}
	if _, err := api.ClusterTargets().Create(ctx, ctObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "old"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	srv := testserver.Start(t, testserver.Options{TenantMode: true, EtcdEndpoint: before.EtcdEndpoint})
	api = srv.Client.KollectV1alpha1()
	const why = "the server runs with --tenant-mode: cluster-scoped Kollect kinds cannot be created or updated; delete is allowed"
	_, err := api.ClusterTargets().Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "new"},
		Spec: v1alpha1.ClusterTargetSpec{ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "p"}}}, metav1.CreateOptions{})
	expectForbidden(t, err, why)
	_, err = api.ClusterInventories().Create(ctx, &v1alpha1.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
	expectForbidden(t, err, why)
	_, err = api.ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "new"}}, metav1.CreateOptions{})
	expectForbidden(t, err, why)

	for resource, patch := range map[string]func() error{
		"clustertargets": func() error {
			_, err := api.ClusterTargets().Patch(ctx, "old", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{})
			return err
		},
		"clusterinventories": func() error {
			_, err := api.ClusterInventories().Patch(ctx, "old", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
			return err
		},
		"clusterscopes": func() error {
			_, err := api.ClusterScopes().Patch(ctx, "old", types.MergePatchType, []byte(`{"spec":{"minExportInterval":"1m"}}`), metav1.PatchOptions{})
			return err
		},
	} {
		t.Run("update "+resource, func(t *testing.T) { expectForbidden(t, patch(), why) })
	}

	// Delete works, and the finalizer can be removed to let it complete.
	if err := api.ClusterTargets().Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, err := api.ClusterTargets().Patch(ctx, "old", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing the finalizer of a deleted object: %v", err)
	}
	if _, err := api.ClusterTargets().Get(ctx, "old", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after removing the finalizer: %v, want not found", err)
	}
	for name, del := range map[string]func() error{
		"clusterinventories": func() error { return api.ClusterInventories().Delete(ctx, "old", metav1.DeleteOptions{}) },
		"clusterscopes":      func() error { return api.ClusterScopes().Delete(ctx, "old", metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	// Namespaced kinds are untouched by tenant mode.
	if _, err := api.Inventories("team-a").Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "ok"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("an Inventory in tenant mode: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

type warningRecorder struct{ texts []string }

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.texts = append(w.texts, text)
}

// TestScopeAppliesToTheNextRequest: the limits are read from the watch
// cache, yet a Scope created, tightened, loosened or deleted applies to
// the very next request through the same server, every time.
func TestScopeAppliesToTheNextRequest(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	inventory := func(name string, interval time.Duration) *v1alpha1.Inventory {
		return &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.InventorySpec{ExportMinInterval: &metav1.Duration{Duration: interval}}}
	}
	floor := func(d time.Duration) v1alpha1.ScopeSpec {
		return v1alpha1.ScopeSpec{MinExportInterval: &metav1.Duration{Duration: d}}
	}
	for round := range 30 {
		ns := fmt.Sprintf("ryw-%02d", round)
		invs, scopes := api.Inventories(ns), api.Scopes(ns)
		// Writes to another resource move etcd's revision in between.
		if _, err := invs.Create(ctx, inventory("first", time.Second), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		scope, err := scopes.Create(ctx, &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: "floor"}, Spec: floor(time.Hour)}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = invs.Create(ctx, inventory("after-create", time.Minute), metav1.CreateOptions{})
		expectInvalid(t, err, "spec.exportMinInterval", "1m0s is below the floor of 1h0m0s")

		scope.Spec = floor(time.Second)
		if scope, err = scopes.Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := invs.Create(ctx, inventory("after-loosening", time.Minute), metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d, right after the floor was lowered: %v", round, err)
		}

		scope.Spec = floor(2 * time.Hour)
		if _, err = scopes.Update(ctx, scope, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err = invs.Create(ctx, inventory("after-tightening", time.Hour), metav1.CreateOptions{})
		expectInvalid(t, err, "spec.exportMinInterval", "1h0m0s is below the floor of 2h0m0s")

		if err := scopes.Delete(ctx, "floor", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := invs.Create(ctx, inventory("after-delete", time.Second), metav1.CreateOptions{}); err != nil {
			t.Fatalf("round %d, right after the Scope was deleted: %v", round, err)
		}
	}
}
