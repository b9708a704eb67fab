package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

const secretRefAttackNS = "secretref-attack"

// TestSecretRefChangeNeedsGet (issue 12, acceptance point 3, from the adversarial review):
// a user with every verb on eventsinks (and their status) and `get` on the
// Secret s1 only creates a sink with secretRef s1, then tries to point it
// at s2 by every write path: JSON patch, merge patch, strategic merge
// patch, server-side apply under another field manager, PUT, removing and
// re-adding the reference, and the same through /status. Each must be
// refused with 403 (or, through /status, the spec change ignored), and the
// stored secretRef must stay s1.
func TestSecretRefChangeNeedsGet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := secretRefAttackNS
	env.Kubectl(t, ctx, "create", "namespace", ns)
	kube := env.Kube(t)
	for _, name := range []string{"s1", "s2"} {
		_, err := kube.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name},
			StringData: map[string]string{"token": "secret-of-" + name}}, metav1.CreateOptions{})
		must(t, err, "Secret "+name)
	}
	author := serviceAccount(t, ctx, ns, "author")
	authorUser := "system:serviceaccount:" + ns + ":author"
	applyManifest(t, ctx, fmt.Sprintf(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: sinks-all, namespace: %[1]s}
rules:
- apiGroups: [kollect.dev]
  resources: [eventsinks, eventsinks/status]
  verbs: ["*"]
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [s1]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: author-sinks-all, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: sinks-all}
subjects:
- {kind: ServiceAccount, name: author, namespace: %[1]s}
`, ns))
	allowed := func(ctx context.Context, name string) bool {
		r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{User: authorUser,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Resource: "secrets", Name: name}},
		}, metav1.CreateOptions{})
		must(t, err, "SubjectAccessReview")
		return r.Status.Allowed
	}
	waitCanI(t, ctx, author, "patch", "eventsinks", ns, true)
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return allowed(ctx, "s1"), nil
	}), "get on s1 granted")
	if allowed(ctx, "s2") {
		t.Fatal("the author may get s2: the test proves nothing")
	}

	sinks := author.client.KollectV1alpha1().EventSinks(ns)
	admin := env.KollectClient(t).KollectV1alpha1().EventSinks(ns)
	hook := &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "https://hooks.secretref-attack.invalid/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "s1"}},
	}
	// The grant of get on s1 reaches the server's authorizer within 2 s.
	must(t, wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := sinks.Create(ctx, hook, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			t.Logf("create with s1 still refused: %v", err)
			return false, nil
		}
		return err == nil, err
	}), "creating the sink with secretRef s1")
	// Sanity: creating one with s2 is refused.
	other := hook.DeepCopy()
	other.Name, other.Spec.SecretRef.Name = "other", "s2"
	if _, err := sinks.Create(ctx, other, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("creating a sink with secretRef s2: %v, want 403", err)
	}

	stored := func(what string) {
		t.Helper()
		got, err := admin.Get(ctx, "hook", metav1.GetOptions{})
		must(t, err, "reading the sink")
		if got.Spec.SecretRef == nil || got.Spec.SecretRef.Name != "s1" {
			t.Errorf("%s: stored secretRef %+v, want s1", what, got.Spec.SecretRef)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		switch {
		case apierrors.IsForbidden(err):
			if !strings.Contains(err.Error(), `Secret "s2"`) || !strings.Contains(err.Error(), `"get"`) {
				t.Errorf("%s: the 403 should name Secret s2 and the verb get: %v", what, err)
			}
			t.Logf("%s: 403 %v", what, err)
		case err == nil:
			t.Errorf("%s: accepted, want 403", what)
		default:
			t.Errorf("%s: %v, want 403", what, err)
		}
		stored(what)
	}
	// ignored: a /status write may succeed, but no spec change may stick.
	ignored := func(what string, err error) {
		t.Helper()
		if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) && !apierrors.IsConflict(err) {
			t.Errorf("%s: %v, want success (spec ignored) or a refusal", what, err)
		}
		t.Logf("%s: %v", what, err)
		stored(what)
	}

	applyS2, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "EventSink",
		"metadata": map[string]any{"name": "hook"}, "spec": map[string]any{"secretRef": map[string]any{"name": "s2"}}})
	must(t, err, "apply body")
	applyFullS2, err := json.Marshal(map[string]any{"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "EventSink",
		"metadata": map[string]any{"name": "hook"}, "spec": map[string]any{"type": "webhook",
			"endpoint": hook.Spec.Endpoint, "secretRef": map[string]any{"name": "s2"}}})
	must(t, err, "apply body")
	jsonReplace := []byte(`[{"op":"replace","path":"/spec/secretRef/name","value":"s2"}]`)
	jsonRemoveAdd := []byte(`[{"op":"remove","path":"/spec/secretRef"},{"op":"add","path":"/spec/secretRef","value":{"name":"s2"}}]`)
	merge := []byte(`{"spec":{"secretRef":{"name":"s2"}}}`)
	force := true

	for _, sub := range []string{"", "status"} {
		var subs []string
		check := refused
		where := ""
		if sub != "" {
			subs, check, where = []string{sub}, ignored, " on /status"
		}
		_, err = sinks.Patch(ctx, "hook", types.JSONPatchType, jsonReplace, metav1.PatchOptions{}, subs...)
		check("JSON patch replace"+where, err)
		_, err = sinks.Patch(ctx, "hook", types.JSONPatchType, jsonRemoveAdd, metav1.PatchOptions{}, subs...)
		check("JSON patch remove+add"+where, err)
		_, err = sinks.Patch(ctx, "hook", types.MergePatchType, merge, metav1.PatchOptions{}, subs...)
		check("merge patch"+where, err)
		_, err = sinks.Patch(ctx, "hook", types.StrategicMergePatchType, merge, metav1.PatchOptions{}, subs...)
		if apierrors.IsUnsupportedMediaType(err) {
			t.Logf("strategic merge patch%s: not supported (415): %v", where, err)
			stored("strategic merge patch" + where)
		} else {
			check("strategic merge patch"+where, err)
		}
		_, err = sinks.Patch(ctx, "hook", types.ApplyPatchType, applyS2, metav1.PatchOptions{FieldManager: "attacker", Force: &force}, subs...)
		check("apply (other manager, force, secretRef only)"+where, err)
		_, err = sinks.Patch(ctx, "hook", types.ApplyPatchType, applyFullS2, metav1.PatchOptions{FieldManager: "attacker2", Force: &force}, subs...)
		check("apply (other manager, force, full spec)"+where, err)
		_, err = sinks.Patch(ctx, "hook", types.ApplyPatchType, applyS2, metav1.PatchOptions{FieldManager: "attacker3"}, subs...)
		if apierrors.IsConflict(err) {
			t.Logf("apply without force%s: conflict: %v", where, err)
			stored("apply without force" + where)
		} else {
			check("apply (other manager, no force)"+where, err)
		}
		cur, err := sinks.Get(ctx, "hook", metav1.GetOptions{})
		must(t, err, "reading the sink as the author")
		cur.Spec.SecretRef = &v1alpha1.LocalObjectReference{Name: "s2"}
		if sub == "" {
			_, err = sinks.Update(ctx, cur, metav1.UpdateOptions{})
		} else {
			_, err = sinks.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		}
		check("PUT"+where, err)
	}

	// Two steps: drop the reference (needs nothing), then add s2.
	_, err = sinks.Patch(ctx, "hook", types.JSONPatchType, []byte(`[{"op":"remove","path":"/spec/secretRef"}]`), metav1.PatchOptions{})
	must(t, err, "removing the secretRef")
	_, err = sinks.Patch(ctx, "hook", types.MergePatchType, merge, metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("adding secretRef s2 after removing s1: %v, want 403", err)
	}
	got, err := admin.Get(ctx, "hook", metav1.GetOptions{})
	must(t, err, "reading the sink")
	if got.Spec.SecretRef != nil {
		t.Errorf("after the refused re-add: secretRef %+v, want none", got.Spec.SecretRef)
	}
	// Delete and re-create with s2.
	must(t, sinks.Delete(ctx, "hook", metav1.DeleteOptions{}), "deleting the sink")
	again := hook.DeepCopy()
	again.Spec.SecretRef.Name = "s2"
	if _, err := sinks.Create(ctx, again, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("re-creating with s2: %v, want 403", err)
	}
	_, err = sinks.Patch(ctx, "hook", types.ApplyPatchType, applyFullS2, metav1.PatchOptions{FieldManager: "attacker4", Force: &force})
	if !apierrors.IsForbidden(err) {
		t.Errorf("creating with s2 by apply: %v, want 403", err)
	}
	if _, err := admin.Get(ctx, "hook", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after the refused re-creates: %v, want not found", err)
	}
}
