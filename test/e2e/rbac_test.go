package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// identity is a ServiceAccount acting through kube-apiserver.
type identity struct {
	name       string
	kubeconfig string
	client     versioned.Interface
}

func serviceAccount(t *testing.T, ctx context.Context, ns, name string) identity {
	t.Helper()
	token, err := env.Cluster.ServiceAccountToken(ctx, ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Admin())
	cfg.BearerToken = token
	kubeconfig, err := env.Cluster.ServiceAccountKubeconfig(ctx, ns, name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return identity{name: ns + "/" + name, kubeconfig: kubeconfig, client: versioned.NewForConfigOrDie(cfg)}
}

// TestRBACThroughAggregator: without a binding every verb is refused; the
// built-in view role (which aggregates kollect-view) allows reading in one
// namespace only; edit allows writing there; kubectl auth can-i agrees with
// what actually happens in every case.
func TestRBACThroughAggregator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	const home, other = "rbac-home", "rbac-other"
	for _, ns := range []string{home, other} {
		env.Kubectl(t, ctx, "create", "namespace", ns)
		if _, err := env.KollectClient(t).KollectV1alpha1().Scopes(ns).Create(ctx, &v1alpha1.Scope{
			ObjectMeta: metav1.ObjectMeta{Name: "existing", Namespace: ns},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("seed scope: %v", err)
		}
	}
	nobody := serviceAccount(t, ctx, home, "nobody")
	viewer := serviceAccount(t, ctx, home, "viewer")
	editor := serviceAccount(t, ctx, home, "editor")
	env.Kubectl(t, ctx, "create", "rolebinding", "viewer", "-n", home, "--clusterrole=view", "--serviceaccount="+home+":viewer")
	env.Kubectl(t, ctx, "create", "rolebinding", "editor", "-n", home, "--clusterrole=edit", "--serviceaccount="+home+":editor")

	// The aggregated kollect rules reach view and edit through
	// kube-controller-manager; wait until they have.
	waitCanI(t, ctx, editor, "create", "inventories", home, true)
	waitCanI(t, ctx, viewer, "list", "inventories", home, true)

	type check struct {
		who     identity
		verb    string
		ns      string
		allowed bool
	}
	var checks []check
	for _, verb := range []string{"get", "list", "watch", "create", "update", "delete"} {
		checks = append(checks, check{nobody, verb, home, false})
	}
	checks = append(checks,
		check{viewer, "get", home, true}, check{viewer, "list", home, true}, check{viewer, "watch", home, true},
		check{viewer, "get", other, false}, check{viewer, "list", other, false},
		check{viewer, "create", home, false}, check{viewer, "update", home, false}, check{viewer, "delete", home, false},
		check{editor, "create", home, true}, check{editor, "update", home, true}, check{editor, "get", home, true},
		check{editor, "create", other, false}, check{editor, "update", other, false},
	)
	for i, c := range checks {
		t.Run(fmt.Sprintf("%s %s in %s", c.who.name, c.verb, c.ns), func(t *testing.T) {
			err := tryVerb(ctx, c.who.client, c.verb, c.ns, fmt.Sprintf("probe-%d", i))
			allowed := err == nil
			if err != nil && !apierrors.IsForbidden(err) {
				t.Fatalf("%s: unexpected error %v", c.verb, err)
			}
			if allowed != c.allowed {
				t.Errorf("%s %s in %s: allowed=%v (%v), want %v", c.who.name, c.verb, c.ns, allowed, err, c.allowed)
			}
			if canI(t, ctx, c.who, c.verb, "inventories", c.ns) != allowed {
				t.Errorf("kubectl auth can-i %s inventories -n %s disagrees with the request (allowed=%v)", c.verb, c.ns, allowed)
			}
		})
	}
}

// tryVerb performs verb on inventories in ns; name is unique per call so
// creates do not collide.
func tryVerb(ctx context.Context, c versioned.Interface, verb, ns, name string) error {
	invs := c.KollectV1alpha1().Inventories(ns)
	switch verb {
	case "get":
		_, err := c.KollectV1alpha1().Scopes(ns).Get(ctx, "existing", metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return err
		}
		_, err = invs.Get(ctx, "absent", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // allowed to look, and there is nothing
		}
		return err
	case "list":
		_, err := invs.List(ctx, metav1.ListOptions{})
		return err
	case "watch":
		w, err := invs.Watch(ctx, metav1.ListOptions{TimeoutSeconds: ptr(int64(1))})
		if err == nil {
			w.Stop()
		}
		return err
	case "create":
		_, err := invs.Create(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{})
		return err
	case "update":
		_, err := invs.Update(ctx, &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "absent-" + name, Namespace: ns}}, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			return nil // authorized: the update reached the registry
		}
		return err
	case "delete":
		err := invs.Delete(ctx, "absent", metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	return fmt.Errorf("unknown verb %s", verb)
}

func canI(t *testing.T, ctx context.Context, who identity, verb, resource, ns string) bool {
	t.Helper()
	out, _, err := env.Cluster.Kubectl(ctx, "--kubeconfig", who.kubeconfig, "auth", "can-i", verb, resource+".kollect.dev", "-n", ns)
	answer := strings.TrimSpace(out)
	if err != nil && answer != "no" {
		t.Fatalf("kubectl auth can-i: %v (%q)", err, answer)
	}
	return answer == "yes"
}

func waitCanI(t *testing.T, ctx context.Context, who identity, verb, resource, ns string, want bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return canI(t, ctx, who, verb, resource, ns) == want, nil
	})
	if err != nil {
		t.Fatalf("%s can-i %s %s in %s never became %v", who.name, verb, resource, ns, want)
	}
}

func ptr[T any](v T) *T { return &v }

func scope(name string) *v1alpha1.Scope {
	return &v1alpha1.Scope{ObjectMeta: metav1.ObjectMeta{Name: name}}
}
