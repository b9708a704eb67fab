package tenancy

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// TestReferencesChanged: which updates are checked against, and recorded
// as, the updating user.
func TestReferencesChanged(t *testing.T) {
	sel := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": v}}
	}
	inv := &kollect.Inventory{Spec: kollect.InventorySpec{TargetSelector: sel("web"),
		SnapshotSinkRefs: []kollect.SinkReference{{Name: "git"}, {Name: "files"}}}}
	reaffirm := func(m *metav1.ObjectMeta, v string) { m.Annotations = map[string]string{tenancy.AnnotationReaffirm: v} }
	for name, tc := range map[string]struct {
		change func(*kollect.Inventory)
		want   bool
	}{
		"labels":  {func(i *kollect.Inventory) { i.Labels = map[string]string{"a": "b"} }, false},
		"suspend": {func(i *kollect.Inventory) { i.Spec.Suspend = true }, false},
		"sink order": {func(i *kollect.Inventory) {
			i.Spec.SnapshotSinkRefs[0], i.Spec.SnapshotSinkRefs[1] = i.Spec.SnapshotSinkRefs[1], i.Spec.SnapshotSinkRefs[0]
		}, false},
		"a sink's interval": {func(i *kollect.Inventory) {
			i.Spec.SnapshotSinkRefs[0].ExportMinInterval = &metav1.Duration{Duration: time.Hour}
		}, false},
		"targetSelector":      {func(i *kollect.Inventory) { i.Spec.TargetSelector = sel("db") }, true},
		"targetSelector gone": {func(i *kollect.Inventory) { i.Spec.TargetSelector = nil }, true},
		"another sink":        {func(i *kollect.Inventory) { i.Spec.EventSinkRefs = []kollect.SinkReference{{Name: "bus"}} }, true},
		"reaffirmed":          {func(i *kollect.Inventory) { reaffirm(&i.ObjectMeta, "1") }, true},
	} {
		obj := inv.DeepCopy()
		tc.change(obj)
		if got := InventoryReferencesChanged(obj, inv); got != tc.want {
			t.Errorf("Inventory, %s: %v, want %v", name, got, tc.want)
		}
	}

	cinv := &kollect.ClusterInventory{Spec: kollect.ClusterInventorySpec{TargetRefs: []kollect.LocalObjectReference{{Name: "a"}, {Name: "b"}}}}
	for name, tc := range map[string]struct {
		change func(*kollect.ClusterInventory)
		want   bool
	}{
		"target order": {func(i *kollect.ClusterInventory) {
			i.Spec.TargetRefs = []kollect.LocalObjectReference{{Name: "b"}, {Name: "a"}}
		}, false},
		"another target": {func(i *kollect.ClusterInventory) {
			i.Spec.TargetRefs = append(i.Spec.TargetRefs, kollect.LocalObjectReference{Name: "c"})
		}, true},
		"targetSelector": {func(i *kollect.ClusterInventory) { i.Spec.TargetSelector = sel("web") }, true},
		"sinkNamespace":  {func(i *kollect.ClusterInventory) { i.Spec.SinkNamespace = "elsewhere" }, false}, // no sinks to resolve
		"reaffirmed":     {func(i *kollect.ClusterInventory) { reaffirm(&i.ObjectMeta, "x") }, true},
	} {
		obj := cinv.DeepCopy()
		tc.change(obj)
		if got := ClusterInventoryReferencesChanged(obj, cinv); got != tc.want {
			t.Errorf("ClusterInventory, %s: %v, want %v", name, got, tc.want)
		}
	}

	target := &kollect.Target{Spec: kollect.TargetSpec{ProfileRef: kollect.LocalObjectReference{Name: "p"}}}
	reaffirmed := target.DeepCopy()
	reaffirm(&reaffirmed.ObjectMeta, "2026-05-01")
	if !TargetReferencesChanged(reaffirmed, target) || TargetReferencesChanged(reaffirmed, reaffirmed.DeepCopy()) {
		t.Error("a Target is re-affirmed exactly when the annotation's value changes")
	}

	withSecret := &kollect.EventSink{Spec: kollect.EventSinkSpec{Type: kollect.EventSinkWebhook, Endpoint: "https://hooks.example.com/a",
		SecretRef: &kollect.LocalObjectReference{Name: "token"}}}
	without := &kollect.EventSink{Spec: kollect.EventSinkSpec{Type: kollect.EventSinkWebhook, Endpoint: "https://hooks.example.com/a"}}
	for name, tc := range map[string]struct {
		old    *kollect.EventSink
		change func(*kollect.EventSink)
		want   bool
	}{
		"labels":                           {withSecret, func(s *kollect.EventSink) { s.Labels = map[string]string{"a": "b"} }, false},
		"endpoint, with a Secret":          {withSecret, func(s *kollect.EventSink) { s.Spec.Endpoint = "https://attacker.example.com/" }, true},
		"TLS, with a Secret":               {withSecret, func(s *kollect.EventSink) { s.Spec.TLS = &kollect.TLSConfig{InsecureSkipVerify: true} }, true},
		"another Secret":                   {withSecret, func(s *kollect.EventSink) { s.Spec.SecretRef = &kollect.LocalObjectReference{Name: "other"} }, true},
		"Secret removed":                   {withSecret, func(s *kollect.EventSink) { s.Spec.SecretRef = nil }, true},
		"Secret added":                     {without, func(s *kollect.EventSink) { s.Spec.SecretRef = &kollect.LocalObjectReference{Name: "token"} }, true},
		"endpoint, without a Secret":       {without, func(s *kollect.EventSink) { s.Spec.Endpoint = "https://other.example.com/" }, false},
		"reaffirmed, without a Secret":     {without, func(s *kollect.EventSink) { reaffirm(&s.ObjectMeta, "now") }, true},
		"interval, with a Secret":          {withSecret, func(s *kollect.EventSink) { s.Spec.ExportMinInterval = &metav1.Duration{Duration: time.Hour} }, true},
		"deletionPolicy, without a Secret": {without, func(s *kollect.EventSink) { s.Spec.DeletionPolicy = kollect.DeletionPolicyDelete }, false},
	} {
		obj := tc.old.DeepCopy()
		tc.change(obj)
		if got := SinkReferencesChanged(obj, tc.old); got != tc.want {
			t.Errorf("EventSink, %s: %v, want %v", name, got, tc.want)
		}
	}
}

// answers is an authorizer that allows what a predicate says, and records
// what it was asked.
type answers struct {
	allow func(authorizer.Attributes) bool
	asked []authorizer.Attributes
}

func (a *answers) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, attrs)
	if a.allow(attrs) {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

func asUser(name string) context.Context {
	return genericapirequest.WithUser(context.Background(), &user.DefaultInfo{Name: name})
}

// TestSinkSecretAdmission: a sink's Secret needs `get` for the user who
// sets it, on create and when SinkReferencesChanged, and nothing is asked
// otherwise.
func TestSinkSecretAdmission(t *testing.T) {
	authz := &answers{allow: func(a authorizer.Attributes) bool {
		return a.GetUser().GetName() == "jane" && a.GetVerb() == "get" && a.GetResource() == "secrets" && a.GetName() == "token"
	}}
	c := New(Config{Authorizer: authz})
	admission := Sinks(c, "eventsinks", "EventSink", func(o *kollect.EventSink) *metav1.Duration { return o.Spec.ExportMinInterval })
	sink := &kollect.EventSink{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: "team-a"},
		Spec: kollect.EventSinkSpec{Type: kollect.EventSinkWebhook, Endpoint: "https://hooks.example.com/",
			SecretRef: &kollect.LocalObjectReference{Name: "token"}}}

	err := admission.AdmitCreate(asUser("mallory"), sink)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("mallory, who may not get the Secret: %v, want 403", err)
	}
	for _, want := range []string{"spec.secretRef.name", `user "mallory"`, `Secret "token"`, `namespace "team-a"`, `the verb "get"`, `eventsinks.kollect.dev "hook"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the 403 should name %s: %v", want, err)
		}
	}
	if err := admission.AdmitCreate(asUser("jane"), sink); err != nil {
		t.Fatalf("jane may get the Secret: %v", err)
	}

	asked := len(authz.asked)
	relabelled := sink.DeepCopy()
	relabelled.Labels = map[string]string{"team": "a"}
	if err := admission.AdmitUpdate(asUser("mallory"), relabelled, sink); err != nil || len(authz.asked) != asked {
		t.Errorf("an update leaving the spec alone: %v, %d questions asked, want none", err, len(authz.asked)-asked)
	}
	moved := sink.DeepCopy()
	moved.Spec.Endpoint = "https://attacker.example.com/"
	if err := admission.AdmitUpdate(asUser("mallory"), moved, sink); !apierrors.IsForbidden(err) {
		t.Errorf("mallory sending jane's Secret elsewhere: %v, want 403", err)
	}
	other := sink.DeepCopy()
	other.Spec.SecretRef.Name = "other"
	if err := admission.AdmitUpdate(asUser("jane"), other, sink); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `Secret "other"`) {
		t.Errorf("jane pointing at a Secret she may not get: %v, want 403 naming it", err)
	}
	none := sink.DeepCopy()
	none.Spec.SecretRef = nil
	if err := admission.AdmitCreate(asUser("mallory"), none); err != nil {
		t.Errorf("a sink without a Secret: %v", err)
	}
}

// TestInventoryItemsAdmission: an inventory needs `list` on the items it
// exports, on create and on reference changes (the target selection
// included), alongside `use` on its sinks.
func TestInventoryItemsAdmission(t *testing.T) {
	mayList := map[string]bool{"jane": true}
	authz := &answers{allow: func(a authorizer.Attributes) bool {
		switch a.GetVerb() {
		case tenancy.VerbUse:
			return true
		case "list":
			return mayList[a.GetUser().GetName()] && a.GetAPIGroup() == kollect.GroupName &&
				((a.GetResource() == "inventoryitems" && a.GetNamespace() == "team-a") || (a.GetResource() == "clusterinventoryitems" && a.GetNamespace() == ""))
		}
		return false
	}}
	c := New(Config{Authorizer: authz})
	inv := &kollect.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "exports", Namespace: "team-a"},
		Spec: kollect.InventorySpec{SnapshotSinkRefs: []kollect.SinkReference{{Name: "git"}}}}

	err := c.Inventories().AdmitCreate(asUser("bob"), inv)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("bob, who may not list the items: %v, want 403", err)
	}
	for _, want := range []string{"spec:", `user "bob"`, `the verb "list"`, `inventoryitems.kollect.dev in namespace "team-a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the 403 should name %s: %v", want, err)
		}
	}
	if err := c.Inventories().AdmitCreate(asUser("jane"), inv); err != nil {
		t.Fatalf("jane: %v", err)
	}
	suspended := inv.DeepCopy()
	suspended.Spec.Suspend = true
	if err := c.Inventories().AdmitUpdate(asUser("bob"), suspended, inv); err != nil {
		t.Errorf("bob suspending: %v, want no check", err)
	}
	reselected := inv.DeepCopy()
	reselected.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	if err := c.Inventories().AdmitUpdate(asUser("bob"), reselected, inv); !apierrors.IsForbidden(err) {
		t.Errorf("bob changing the selection: %v, want 403", err)
	}

	cinv := &kollect.ClusterInventory{ObjectMeta: metav1.ObjectMeta{Name: "rollup"}}
	err = c.ClusterInventories().AdmitCreate(asUser("bob"), cinv)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "clusterinventoryitems.kollect.dev across the cluster") {
		t.Errorf("bob creating a ClusterInventory: %v, want 403 naming clusterinventoryitems across the cluster", err)
	}
	if err := c.ClusterInventories().AdmitCreate(asUser("jane"), cinv); err != nil {
		t.Errorf("jane creating a ClusterInventory: %v", err)
	}
}
