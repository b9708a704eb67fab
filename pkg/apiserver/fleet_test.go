package apiserver_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	typed "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
	tenancyrules "kollect.dev/kollect/pkg/tenancy"
)

func member(name, secretNamespace, secretName string, labels map[string]string) *v1alpha1.MemberCluster {
	return &v1alpha1.MemberCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: secretNamespace, Name: secretName}},
	}
}

// TestMemberClusterAdmission: registering a member needs `get` on its
// kubeconfig Secret (403 naming the Secret, the field and the verb), and
// records who registered it; the Secret's namespace must be one the
// ClusterScopes allow (422 on spec.kubeconfigSecretRef.namespace), checked
// again only when it changes; every invalid field is named.
func TestMemberClusterAdmission(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "alice", verb: "get", resource: "secrets", namespace: "kollect-system"},
		{user: "alice", verb: "get", resource: "secrets", namespace: "team-a"},
		{user: "carol", verb: "get", resource: "secrets", namespace: "kollect-system", name: "east-kubeconfig"},
	})
	ctx := tenancyContext(t)
	members := func(who string) typed.MemberClusterInterface {
		return srv.ClientFor(who).KollectV1alpha1().MemberClusters()
	}

	_, err := members("bob").Create(ctx, member("east", "kollect-system", "east-kubeconfig", nil), metav1.CreateOptions{})
	expectForbidden(t, err, `memberclusters.kollect.dev "east"`, `user "bob"`, "spec.kubeconfigSecretRef.name",
		`Secret "east-kubeconfig" in namespace "kollect-system"`, `the verb "get"`, "kubeconfig")
	east := member("east", "kollect-system", "east-kubeconfig", map[string]string{"region": "eu"})
	east.Status.Requester = &v1alpha1.RequesterInfo{Username: "mallory"}
	created, err := members("alice").Create(ctx, east, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("alice may get the Secret: %v", err)
	}
	expectRequester(t, "create", created.Status.Requester, "alice")
	if created.Spec.KubeconfigSecretRef.Key != "kubeconfig" {
		t.Errorf("key %q, want the default kubeconfig", created.Spec.KubeconfigSecretRef.Key)
	}
	if len(created.Finalizers) != 0 {
		t.Errorf("finalizers %v: the collector adds its own", created.Finalizers)
	}
	expectCondition(t, created.Status.Conditions, v1alpha1.ConditionReachable, metav1.ConditionUnknown, v1alpha1.ReasonPending)
	expectCondition(t, created.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPending)

	// bob relabels (no Secret involved) but may not point it at another key.
	created.Labels["tier"] = "gold"
	got, err := members("bob").Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("bob relabels: %v", err)
	}
	expectRequester(t, "relabel", got.Status.Requester, "alice")
	_, err = members("bob").Patch(ctx, "east", types.MergePatchType, []byte(`{"spec":{"kubeconfigSecretRef":{"key":"admin.conf"}}}`), metav1.PatchOptions{})
	expectForbidden(t, err, `user "bob"`, `Secret "east-kubeconfig"`, "spec.kubeconfigSecretRef.name")
	// carol, who may get it, re-affirms and becomes the requester.
	got, err = members("carol").Patch(ctx, "east", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+tenancyrules.AnnotationReaffirm+`":"1"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("carol re-affirms: %v", err)
	}
	expectRequester(t, "re-affirmed", got.Status.Requester, "carol")

	// Invalid objects name their fields.
	for _, tc := range []struct {
		obj   *v1alpha1.MemberCluster
		field string
	}{
		{member("east.eu", "kollect-system", "k", nil), "metadata.name"},
		{member("west", "", "k", nil), "spec.kubeconfigSecretRef.namespace"},
		{member("west", "kollect-system", "K_", nil), "spec.kubeconfigSecretRef.name"},
		{func() *v1alpha1.MemberCluster {
			m := member("west", "kollect-system", "k", nil)
			m.Spec.KubeconfigSecretRef.Key = "../kubeconfig"
			return m
		}(), "spec.kubeconfigSecretRef.key"},
	} {
		_, err := members("alice").Create(ctx, tc.obj, metav1.CreateOptions{})
		expectInvalid(t, err, tc.field)
	}

	// A member whose Secret is in team-a, then a ClusterScope allowing
	// only kollect-system: the member stays editable, a new one is refused.
	if _, err := members("alice").Create(ctx, member("west", "team-a", "west-kubeconfig", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Client.KollectV1alpha1().ClusterScopes().Create(ctx, &v1alpha1.ClusterScope{
		ObjectMeta: metav1.ObjectMeta{Name: "platform"}, Spec: v1alpha1.ClusterScopeSpec{ReferenceNamespaces: []string{"kollect-system"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = members("alice").Create(ctx, member("north", "team-a", "north-kubeconfig", nil), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.kubeconfigSecretRef.namespace", `namespace "team-a" is not in the referenceNamespaces of ClusterScope "platform"`)
	if _, err := members("alice").Patch(ctx, "west", types.MergePatchType, []byte(`{"spec":{"suspend":true,"kubeconfigSecretRef":{"name":"west-v2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("an update keeping the Secret's namespace is ratcheted: %v", err)
	}
	_, err = members("alice").Patch(ctx, "east", types.MergePatchType, []byte(`{"spec":{"kubeconfigSecretRef":{"namespace":"team-a"}}}`), metav1.PatchOptions{})
	expectInvalid(t, err, "spec.kubeconfigSecretRef.namespace", "referenceNamespaces")

	// Field selectors on the Secret.
	l, err := members("alice").List(ctx, metav1.ListOptions{FieldSelector: "spec.kubeconfigSecretRef.namespace=team-a"})
	if err != nil || len(l.Items) != 1 || l.Items[0].Name != "west" {
		t.Errorf("list by the Secret's namespace: %v, %+v", err, l)
	}
}

// TestMemberClusterStatusDerived: Reachable and Ready come from the owning
// replica's report, in the answer of the write that reports it; the
// table shows them with the owner, version and item count.
func TestMemberClusterStatusDerived(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	members := srv.Client.KollectV1alpha1().MemberClusters()
	m, err := members.Create(ctx, member("east", "kollect-system", "east-kubeconfig", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	synced := metav1.NewTime(time.Now().Truncate(time.Second))
	m.Status.Collection = &v1alpha1.MemberObservation{ObservedGeneration: 1, Owner: "kollect-apiserver-1", Reachable: true,
		ServerVersion: "v1.36.3", ItemCount: 42, LastSyncTime: &synced}
	if m, err = members.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReachable, metav1.ConditionTrue, v1alpha1.ReasonReachable)
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonCollecting)

	table := func() []any {
		return clusterTable(ctx, t, srv, "memberclusters", "", "Name,Reachable,Ready,Owner,Version,Items,Age")[0]
	}
	if got := fmt.Sprint(table()); got != "[east True True kollect-apiserver-1 v1.36.3 42]" {
		t.Errorf("row %s", got)
	}

	since := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	m.Status.Collection.Reachable, m.Status.Collection.UnreachableSince = false, &since
	m.Status.Collection.ErrorClass, m.Status.Collection.LastError = "TLSError", "x509: certificate signed by unknown authority"
	if m, err = members.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReachable, metav1.ConditionFalse, "TLSError")
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, "TLSError")
	for _, c := range m.Status.Conditions {
		if c.Type == v1alpha1.ConditionReachable && (!strings.Contains(c.Message, "x509") || !strings.Contains(c.Message, "since 2026-11-29T10:00:00Z")) {
			t.Errorf("Reachable message %q lacks the error or since when", c.Message)
		}
	}
	if got := fmt.Sprint(table()[1:3]); got != "[TLSError TLSError]" {
		t.Errorf("row %s", got)
	}

	// Without a class the reason is Unreachable; suspending says so.
	m.Status.Collection.ErrorClass = ""
	if m, err = members.UpdateStatus(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReachable, metav1.ConditionFalse, v1alpha1.ReasonUnreachable)
	m.Spec.Suspend = true
	if m, err = members.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCondition(t, m.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSuspended)

	// A report the validation refuses names its fields.
	m.Status.Collection.Reachable = true
	m.Status.Collection.ItemCount = -1
	_, err = members.UpdateStatus(ctx, m, metav1.UpdateOptions{})
	expectInvalid(t, err, "status.collection.unreachableSince", "reachable")
	expectInvalid(t, err, "status.collection.itemCount")
}

// TestClusterSelectorNeedsUse: a ClusterTarget's clusterSelector needs
// `use` on every MemberCluster it selects, for the requesting user: a 403
// names each member the user cannot use, and only those. An update is
// checked again when the selector changes, not when a member is labelled
// into it later.
func TestClusterSelectorNeedsUse(t *testing.T) {
	srv := startTenancyServer(t, rules{
		{user: "system:apiserver", verb: "get", resource: "secrets"},
		{user: "alice", verb: "use", resource: "profiles"},
		{user: "alice", verb: "list"},
		{user: "alice", verb: "use", resource: "memberclusters", name: "east"},
		{user: "bob", verb: "use", resource: "profiles"},
		{user: "bob", verb: "list"},
		{user: "platform", verb: "use"},
		{user: "platform", verb: "list"},
	})
	ctx := tenancyContext(t)
	api := srv.Client.KollectV1alpha1()
	if _, err := api.Profiles("kollect-system").Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}", Selectable: true}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*v1alpha1.MemberCluster{
		member("east", "kollect-system", "east", map[string]string{"region": "eu"}),
		member("west", "kollect-system", "west", map[string]string{"region": "us"}),
	} {
		if _, err := api.MemberClusters().Create(ctx, m, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ct := func(selector *metav1.LabelSelector) *v1alpha1.ClusterTarget {
		return &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.ClusterTargetSpec{
			ProfileRef: v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployments"}, ClusterSelector: selector}}
	}
	targets := func(who string) typed.ClusterTargetInterface {
		return srv.ClientFor(who).KollectV1alpha1().ClusterTargets()
	}
	eu := &metav1.LabelSelector{MatchLabels: map[string]string{"region": "eu"}}

	_, err := targets("bob").Create(ctx, ct(eu), metav1.CreateOptions{})
	expectForbidden(t, err, `user "bob"`, `cannot use membercluster "east"`, "spec.clusterSelector", `the verb "use" on memberclusters.kollect.dev "east"`)
	_, err = targets("alice").Create(ctx, ct(&metav1.LabelSelector{}), metav1.CreateOptions{})
	expectForbidden(t, err, `cannot use membercluster "west"`)
	if strings.Contains(err.Error(), `"east"`) {
		t.Errorf("alice may use east; only west should be named: %v", err)
	}
	created, err := targets("alice").Create(ctx, ct(eu), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("alice may use east, the only member in region eu: %v", err)
	}
	expectRequester(t, "create", created.Status.Requester, "alice")
	// Without a selector no member is involved: bob may.
	hostOnly := ct(nil)
	hostOnly.Name = "host"
	if _, err := targets("bob").Create(ctx, hostOnly, metav1.CreateOptions{}); err != nil {
		t.Errorf("a ClusterTarget of the host alone: %v", err)
	}

	// west joins region eu later: unrelated updates still pass.
	if _, err := api.MemberClusters().Patch(ctx, "west", types.MergePatchType, []byte(`{"metadata":{"labels":{"region":"eu"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	created.Spec.Suspend = true
	if created, err = targets("alice").Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("suspending, selector unchanged: %v", err)
	}
	// A change of the selector is checked against what it selects now.
	created.Spec.ClusterSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "region", Operator: metav1.LabelSelectorOpExists}}}
	_, err = targets("alice").Update(ctx, created, metav1.UpdateOptions{})
	expectForbidden(t, err, `user "alice"`, `cannot use membercluster "west"`)
	got, err := targets("platform").Update(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("platform may use every member: %v", err)
	}
	expectRequester(t, "selector change", got.Status.Requester, "platform")

	// An invalid selector names its field.
	_, err = targets("platform").Create(ctx, ct(&metav1.LabelSelector{MatchLabels: map[string]string{"region": "-eu-"}}), metav1.CreateOptions{})
	expectInvalid(t, err, "spec.clusterSelector.matchLabels")
}

// TestClusterTargetMembersStatus: a ClusterTarget's conditions take the
// members' reports into account, naming the member that is degraded.
func TestClusterTargetMembersStatus(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	targets := srv.Client.KollectV1alpha1().ClusterTargets()
	ct, err := targets.Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.ClusterTargetSpec{
		ProfileRef:      v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployments"},
		ClusterSelector: &metav1.LabelSelector{},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectCondition(t, ct.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonPending)
	since := metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC))
	ct.Status.Clusters = []v1alpha1.ClusterCollection{
		{Name: "east", Collection: v1alpha1.CollectionObservation{ObservedGeneration: 1, ItemCount: 7}},
		{Name: "west", Collection: v1alpha1.CollectionObservation{ObservedGeneration: 1, LastError: "dial tcp: i/o timeout"}, UnreachableSince: &since},
	}
	if ct, err = targets.UpdateStatus(ctx, ct, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCondition(t, ct.Status.Conditions, v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonCollected)
	expectCondition(t, ct.Status.Conditions, v1alpha1.ConditionDegraded, metav1.ConditionTrue, v1alpha1.ReasonUnreachable)
	for _, c := range ct.Status.Conditions {
		if c.Type == v1alpha1.ConditionDegraded && !strings.Contains(c.Message, `member "west"`) {
			t.Errorf("Degraded message %q does not name the member", c.Message)
		}
	}
	ct.Status.Clusters = append(ct.Status.Clusters, v1alpha1.ClusterCollection{Name: "east"})
	_, err = targets.UpdateStatus(ctx, ct, metav1.UpdateOptions{})
	expectInvalid(t, err, "status.clusters[2].name")
}

// TestClusterTargetMembersSorted: each member's collector applies its own
// entry of status.clusters under its own field manager; whatever order
// the reports come in, the entries are sorted by name, as the API says.
func TestClusterTargetMembersSorted(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	targets := srv.Client.KollectV1alpha1().ClusterTargets()
	if _, err := targets.Create(ctx, &v1alpha1.ClusterTarget{ObjectMeta: metav1.ObjectMeta{Name: "fleet"}, Spec: v1alpha1.ClusterTargetSpec{
		ProfileRef:      v1alpha1.NamespacedObjectReference{Namespace: "kollect-system", Name: "deployments"},
		ClusterSelector: &metav1.LabelSelector{},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, member := range []string{"west", "north", "east"} {
		ct, err := targets.ApplyStatus(ctx, applyv1alpha1.ClusterTarget("fleet").WithStatus(applyv1alpha1.ClusterTargetStatus().WithClusters(
			applyv1alpha1.ClusterCollection().WithName(member).WithCollection(applyv1alpha1.CollectionObservation().WithObservedGeneration(1).WithItemCount(1)))),
			metav1.ApplyOptions{FieldManager: "kollect-collector-" + member, Force: true})
		if err != nil {
			t.Fatal(err)
		}
		names = names[:0]
		for _, c := range ct.Status.Clusters {
			names = append(names, c.Name)
		}
	}
	if want := []string{"east", "north", "west"}; !slices.Equal(names, want) {
		t.Errorf("status.clusters %v, want %v", names, want)
	}
}

// TestMemberClustersInTenantMode: MemberClusters are a cluster kind: with
// --tenant-mode they cannot be created or updated, their status only by
// the server's own controllers.
func TestMemberClustersInTenantMode(t *testing.T) {
	ctx := tenancyContext(t)
	before := testserver.Start(t, testserver.Options{})
	if _, err := before.Client.KollectV1alpha1().MemberClusters().Create(ctx, member("old", "kollect-system", "k", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.Options{TenantMode: true, EtcdEndpoint: before.EtcdEndpoint})
	api := srv.Client.KollectV1alpha1().MemberClusters()
	_, err := api.Create(ctx, member("new", "kollect-system", "k", nil), metav1.CreateOptions{})
	expectForbidden(t, err, tenancy.TenantModeMessage)
	_, err = api.Patch(ctx, "old", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{})
	expectForbidden(t, err, tenancy.TenantModeMessage)
	if err := api.Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete in tenant mode: %v", err)
	}
	if _, err := api.Get(ctx, "old", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after delete: %v", err)
	}
}

// TestSelectableAttributesBounded: a Profile has at most 8 selectable
// attributes, and none in Resource mode; each refusal names the field.
func TestSelectableAttributesBounded(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx := tenancyContext(t)
	profiles := srv.Client.KollectV1alpha1().Profiles("team-a")
	p := &v1alpha1.Profile{ObjectMeta: metav1.ObjectMeta{Name: "deployments"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}}}
	for i := range 9 {
		p.Spec.Attributes = append(p.Spec.Attributes, v1alpha1.Attribute{Name: fmt.Sprintf("a%d", i), Path: "{.metadata.name}", Selectable: true})
	}
	_, err := profiles.Create(ctx, p, metav1.CreateOptions{})
	expectInvalid(t, err, "spec.attributes[8].selectable", "at most 8 attributes of a Profile may be selectable")
	p.Spec.Attributes = p.Spec.Attributes[:8]
	created, err := profiles.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("8 selectable attributes: %v", err)
	}
	created.Spec.Export.Mode = v1alpha1.ExportModeResource
	_, err = profiles.Update(ctx, created, metav1.UpdateOptions{})
	expectInvalid(t, err, "spec.attributes[0].selectable", "Attributes mode")
}
