package export

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// tokenReceiver is a webhook endpoint that records the bearer token of
// every request it gets, probes included, and accepts them all.
type tokenReceiver struct {
	srv *httptest.Server

	mu     sync.Mutex
	tokens []string
}

func startTokenReceiver(t *testing.T) *tokenReceiver {
	t.Helper()
	r := &tokenReceiver{}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.tokens = append(r.tokens, strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
		r.mu.Unlock()
		if req.Method == http.MethodOptions {
			w.Header().Set("WebHook-Allowed-Origin", "*")
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// seen returns how many requests arrived and how many carried token.
func (r *tokenReceiver) seen(token string) (all, with int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range r.tokens {
		if t == token {
			with++
		}
	}
	return len(r.tokens), with
}

// TestSecretUse is acceptance point 3 of issue 12, through the real
// kube-apiserver and its RBAC: a user who may create sinks but not get a
// Secret cannot create a sink using it (403 naming the Secret and the
// verb); granted `get`, the create succeeds within 2 s; revoked, the sink
// turns Ready=False SecretForbidden, the Inventory exporting to it says
// SecretForbidden, and the Secret is no longer used: after it is rotated,
// its new token never reaches the endpoint — until the grant returns.
func TestSecretUse(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	ns := "secret-use-" + randomSuffix()
	namespace(ctx, t, ns)
	receiver := startTokenReceiver(t)
	oldToken, newToken := "tok-1-"+randomSuffix(), "tok-2-"+randomSuffix()
	secret(ctx, t, ns, "hook-token", map[string]string{"token": oldToken})
	collectDeployments(ctx, t, ns, 2)

	// author may manage sinks and inventories and read the items, but not
	// the Secret.
	author := "system:serviceaccount:" + ns + ":author"
	token, err := cluster.ServiceAccountToken(ctx, ns, "author", time.Hour)
	must(t, err, "the author's token")
	cfg := rest.AnonymousClientConfig(cluster.RESTConfig())
	cfg.BearerToken = token
	as := versioned.NewForConfigOrDie(cfg).KollectV1alpha1()
	role(ctx, t, ns, "author", []rbacv1.PolicyRule{
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"eventsinks", "inventories"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"eventsinks"}, Verbs: []string{"use"}},
		{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"inventoryitems"}, Verbs: []string{"list"}},
	})
	role(ctx, t, ns, "read-hook-token", []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"hook-token"}, Verbs: []string{"get"}},
	})
	bind(ctx, t, ns, "author", "author")
	waitAllowed(ctx, t, author, ns, "create", "eventsinks", v1alpha1.GroupName, "", true)
	waitAllowed(ctx, t, author, ns, "get", "secrets", "", "hook-token", false)

	hook := &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: receiver.srv.URL + "/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-token"},
			TLS:       &v1alpha1.TLSConfig{CABundle: caBundle(receiver.srv)},
			Webhook:   &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 5 * time.Second}, MaxAttempts: 1}},
	}
	_, err = as.EventSinks(ns).Create(ctx, hook, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("a sink using a Secret its author may not get: %v, want 403", err)
	}
	for _, want := range []string{"spec.secretRef.name", `user "` + author + `"`, `Secret "hook-token"`, fmt.Sprintf("namespace %q", ns), `the verb "get"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal should name %s: %v", want, err)
		}
	}
	t.Logf("refused: %v", err)
	if all, _ := receiver.seen(""); all != 0 {
		t.Fatalf("the endpoint got %d requests from a refused sink", all)
	}

	// Granted: accepted within 2 s.
	bind(ctx, t, ns, "read-hook-token", "author")
	granted := time.Now()
	var created *v1alpha1.EventSink
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Second, true, func(ctx context.Context) (bool, error) {
		created, err = as.EventSinks(ns).Create(ctx, hook, metav1.CreateOptions{})
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	})
	must(t, err, "creating the sink within 2s of the grant of get on the Secret")
	t.Logf("accepted %s after the RoleBinding was created", time.Since(granted).Round(10*time.Millisecond))
	if r := created.Status.Requester; r == nil || r.Username != author || r.RecordedAt == nil {
		t.Errorf("status.requester %+v, want %s with recordedAt", r, author)
	}
	_, err = as.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "changes"},
		Spec:       v1alpha1.InventorySpec{EventSinkRefs: []v1alpha1.SinkReference{{Name: "hook"}}},
	}, metav1.CreateOptions{})
	must(t, err, "the author's Inventory")
	eventually(ctx, t, "events carrying the Secret's token", func(ctx context.Context) (bool, string) {
		all, with := receiver.seen(oldToken)
		return with > 0 && with == all, fmt.Sprintf("%d requests, %d with the token", all, with)
	})
	entryOf := func(ctx context.Context) (*v1alpha1.Inventory, *v1alpha1.SinkExportStatus) {
		inv, err := kollect.KollectV1alpha1().Inventories(ns).Get(ctx, "changes", metav1.GetOptions{})
		if err != nil || len(inv.Status.SinkExports) == 0 {
			return inv, nil
		}
		return inv, &inv.Status.SinkExports[0]
	}
	eventually(ctx, t, "the first export", func(ctx context.Context) (bool, string) {
		_, e := entryOf(ctx)
		return e != nil && e.Outcome == v1alpha1.OutcomeExported, fmt.Sprintf("%+v", e)
	})

	// Revoked: the sink turns SecretForbidden, so does the Inventory's entry.
	must(t, kube.RbacV1().RoleBindings(ns).Delete(ctx, "read-hook-token", metav1.DeleteOptions{}), "revoking get on the Secret")
	revoked := time.Now()
	eventually(ctx, t, "the sink Ready=False SecretForbidden", func(ctx context.Context) (bool, string) {
		s, err := kollect.KollectV1alpha1().EventSinks(ns).Get(ctx, "hook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == v1alpha1.ReasonSecretForbidden &&
			strings.Contains(ready.Message, author), fmt.Sprintf("%+v", ready)
	})
	t.Logf("sink SecretForbidden %s after the RoleBinding was deleted (watchdog %s)", time.Since(revoked).Round(100*time.Millisecond), watchdog)
	// An item change makes the exporter run at once; it must refuse.
	setImage(ctx, t, ns, "app-00", "registry.example/app:2")
	eventually(ctx, t, "the Inventory's entry SecretForbidden", func(ctx context.Context) (bool, string) {
		inv, e := entryOf(ctx)
		if inv == nil {
			return false, "no inventory"
		}
		degraded := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionDegraded)
		return e != nil && e.Reason == v1alpha1.ReasonSecretForbidden &&
			degraded != nil && degraded.Status == metav1.ConditionTrue && degraded.Reason == v1alpha1.ReasonSecretForbidden, fmt.Sprintf("%+v %+v", e, degraded)
	})
	t.Logf("entry SecretForbidden %s after the RoleBinding was deleted", time.Since(revoked).Round(100*time.Millisecond))
	before, _ := receiver.seen("")

	// Rotate the token, and give the exporter and the sink check every
	// reason to use it: item changes, several watchdog periods.
	s, err := kube.CoreV1().Secrets(ns).Get(ctx, "hook-token", metav1.GetOptions{})
	must(t, err, "reading the Secret")
	s.StringData = map[string]string{"token": newToken}
	_, err = kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{})
	must(t, err, "rotating the token")
	setImage(ctx, t, ns, "app-01", "registry.example/app:3")
	time.Sleep(4 * watchdog)
	setImage(ctx, t, ns, "app-00", "registry.example/app:4")
	time.Sleep(2 * watchdog)
	if all, with := receiver.seen(newToken); with != 0 || all != before {
		t.Fatalf("after the revocation the endpoint got %d more requests, %d with the rotated token; want none", all-before, with)
	}
	if _, e := entryOf(ctx); e == nil || e.Reason != v1alpha1.ReasonSecretForbidden {
		t.Fatalf("the entry is no longer SecretForbidden: %+v", e)
	}

	// The grant returns: the sink is used again, with the rotated token.
	bind(ctx, t, ns, "read-hook-token", "author")
	eventually(ctx, t, "the rotated token used after the grant returned", func(ctx context.Context) (bool, string) {
		_, with := receiver.seen(newToken)
		_, e := entryOf(ctx)
		return with > 0 && e != nil && e.Outcome == v1alpha1.OutcomeExported, fmt.Sprintf("%d requests with the new token; entry %+v", with, e)
	})
	eventually(ctx, t, "the sink Ready again", func(ctx context.Context) (bool, string) {
		s, err := kollect.KollectV1alpha1().EventSinks(ns).Get(ctx, "hook", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", ready)
	})
}

// role creates a Role in ns.
func role(ctx context.Context, t *testing.T, ns, name string, rules []rbacv1.PolicyRule) {
	t.Helper()
	_, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	must(t, err, "Role "+name)
}

// bind binds Role name to the ServiceAccount sa of ns, with a RoleBinding
// of the same name.
func bind(ctx context.Context, t *testing.T, ns, name, sa string) {
	t.Helper()
	_, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err, "RoleBinding "+name)
}

// waitAllowed waits until kube-apiserver's RBAC answers want for user.
func waitAllowed(ctx context.Context, t *testing.T, user, ns, verb, resource, group, name string, want bool) {
	t.Helper()
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"}
	eventually(ctx, t, fmt.Sprintf("%s may %s %s: %v", user, verb, resource, want), func(ctx context.Context) (bool, string) {
		r, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource, Name: name},
		}}, metav1.CreateOptions{})
		if err != nil {
			return false, err.Error()
		}
		return r.Status.Allowed == want, fmt.Sprintf("allowed=%v", r.Status.Allowed)
	})
}
