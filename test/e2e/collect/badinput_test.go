package collect

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// TestBadInput is acceptance point 6: CEL that does not compile or exceeds
// the cost budget is rejected at admission with the field path; a required
// attribute failing at runtime writes no item, counts the failure in status
// and emits one Warning Event; a Profile for Secrets without the opt-in is
// rejected.
func TestBadInput(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	const ns = "collect-bad"
	createNamespace(ctx, t, ns, nil)
	profiles := kollect.KollectV1alpha1().Profiles(ns)

	for _, tc := range []struct {
		name    string
		profile *v1alpha1.Profile
		field   string
		detail  string
	}{
		{"CEL that does not compile", deploymentProfileWith(ns, "syntax", nil, v1alpha1.Attribute{Name: "r", Path: "cel:object.spec.replicas +"}),
			"spec.attributes[0].path", "Syntax error"},
		{"CEL over the cost budget", deploymentProfileWith(ns, "expensive", nil, v1alpha1.Attribute{Name: "r",
			Path: "cel:object.spec.template.spec.containers.map(a, object.spec.template.spec.containers.map(b, object.spec.template.spec.containers.map(c, a.name + b.name + c.name)))"}),
			"spec.attributes[0].path", "too expensive"},
		{"Secrets without the opt-in", &v1alpha1.Profile{
			ObjectMeta: metav1.ObjectMeta{Name: "secrets", Namespace: ns},
			Spec: v1alpha1.ProfileSpec{
				TargetGVK:  v1alpha1.GroupVersionKind{Version: "v1", Kind: "Secret"},
				Attributes: []v1alpha1.Attribute{{Name: "type", Path: "{.type}"}},
			},
		}, "metadata.annotations[kollect.dev/collect-secrets]", "explicit opt-in"},
	} {
		_, err := profiles.Create(ctx, tc.profile, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: %v, want 422 Invalid", tc.name, err)
			continue
		}
		var causes []string
		found := false
		for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
			causes = append(causes, c.Field+": "+c.Message)
			found = found || (c.Field == tc.field && strings.Contains(c.Message, tc.detail))
		}
		if !found {
			t.Errorf("%s: causes %q, want %s with %q", tc.name, causes, tc.field, tc.detail)
		}
	}

	// A required attribute that matches nothing at runtime.
	createProfile(ctx, t, deploymentProfileWith(ns, "owners", nil,
		v1alpha1.Attribute{Name: "name", Path: "{.metadata.name}"},
		v1alpha1.Attribute{Name: "owner", Path: "{.metadata.annotations.owner}"}))
	createTarget(ctx, t, ns, "owned", "owners", nil)
	create := func(name, owner string) {
		t.Helper()
		d := deploymentObject(ns, name, "registry.example/app:1", 1, nil)
		if owner != "" {
			d.Annotations = map[string]string{"owner": owner}
		}
		if _, err := kube.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("good-1", "alice")
	create("bad-1", "")

	expectStatus := func(what string, items, failed int64, degraded metav1.ConditionStatus, reason string) {
		t.Helper()
		eventually(ctx, t, what, func(ctx context.Context) (bool, string) {
			got, _, err := targetItems(ctx, ns, "owned")
			if err != nil || int64(len(got)) != items {
				return false, fmt.Sprintf("%d items, %v", len(got), err)
			}
			tgt, err := kollect.KollectV1alpha1().Targets(ns).Get(ctx, "owned", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			c, d := tgt.Status.Collection, condition(tgt.Status.Conditions, "Degraded")
			if c == nil || c.ItemCount != items || c.FailedCount != failed || d == nil || d.Status != degraded || d.Reason != reason {
				return false, fmt.Sprintf("status %+v", tgt.Status)
			}
			if failed > 0 && !strings.Contains(c.LastError, `required attribute "owner"`) {
				return false, "lastError " + c.LastError
			}
			return true, ""
		})
	}
	expectStatus("one item, one failure", 1, 1, metav1.ConditionTrue, "ExtractionFailed")
	eventually(ctx, t, "one Warning Event", func(ctx context.Context) (bool, string) {
		n, err := warnings(ctx, ns, "owned", "ExtractionFailed")
		return n == 1, fmt.Sprintf("%d events, %v", n, err)
	})
	// A second failure is counted, but is no new transition: no new Event.
	create("bad-2", "")
	expectStatus("two failures", 1, 2, metav1.ConditionTrue, "ExtractionFailed")
	time.Sleep(3 * time.Second)
	if n, err := warnings(ctx, ns, "owned", "ExtractionFailed"); n != 1 || err != nil {
		t.Errorf("%d Warning Events after the second failure (%v), want still 1", n, err)
	}
	// Fixing the objects recovers.
	for _, name := range []string{"bad-1", "bad-2"} {
		updateDeployment(ctx, t, ns, name, func(d *appsv1.Deployment) { d.Annotations = map[string]string{"owner": "bob"} })
	}
	expectStatus("recovered", 3, 0, metav1.ConditionFalse, "AsExpected")
}

func deploymentProfileWith(ns, name string, annotations map[string]string, attrs ...v1alpha1.Attribute) *v1alpha1.Profile {
	p := deploymentProfile(ns, name)
	p.Annotations = annotations
	p.Spec.Attributes = attrs
	return p
}

// warnings counts the Warning Events (events.k8s.io/v1) about a Target with a reason.
func warnings(ctx context.Context, ns, target, reason string) (int, error) {
	list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		r := e.Regarding
		if e.Type == "Warning" && e.Reason == reason && r.Kind == "Target" && r.APIVersion == "kollect.dev/v1alpha1" && r.Name == target {
			n++
		}
	}
	return n, nil
}
