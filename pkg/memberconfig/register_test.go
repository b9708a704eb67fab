package memberconfig

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/localcluster"
)

// TestRegisterMember runs hack/register-member.sh against two real
// kube-apiservers, a member and a hub (which only stores the Secret), then
// uses what it stored as the hub would: RESTConfig, Probe, and the
// ServiceAccount's grants in the member (what the role names, and nothing
// else). A second run with other resources replaces the role's rules.
func TestRegisterMember(t *testing.T) {
	m := memberCluster(t)
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	begin := time.Now()
	hub, err := localcluster.Start(ctx, localcluster.Options{Dir: t.TempDir(), ToolsBinDir: tools(t), FastEtcd: true, NoControllerManager: true, Log: t.Output()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	t.Logf("hub start to ready: %.1fs", time.Since(begin).Seconds())
	admin := kubernetes.NewForConfigOrDie(m.RESTConfig())
	hubClient := kubernetes.NewForConfigOrDie(hub.RESTConfig())

	cache := t.TempDir()
	register := func(args ...string) (string, string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "register-member.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECTL="+m.KubectlPath(), "KUBECACHEDIR="+cache)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		begin := time.Now()
		err := cmd.Run()
		t.Logf("register-member.sh %s: %v in %s\n%s", strings.Join(args, " "), err, time.Since(begin).Round(time.Millisecond), stderr.String())
		return stdout.String(), stderr.String(), err
	}
	clusters := []string{"--member-kubeconfig", m.AdminKubeconfig(), "--hub-kubeconfig", hub.AdminKubeconfig()}

	// Mistakes are named, and stop the script before it writes anything.
	for _, c := range []struct {
		args []string
		want string
	}{
		{clusters, "--name is required"},
		{[]string{"--name", "east", "--hub-kubeconfig", hub.AdminKubeconfig()}, "--member-kubeconfig is required"},
		{append([]string{"--name", "East"}, clusters...), "is not a DNS label"},
		{append([]string{"--name", "east.prod"}, clusters...), "is not a DNS label"},
		{append([]string{"--name", "east", "--resource", "*"}, clusters...), "no wildcards"},
		{append([]string{"--name", "east", "--resource", "apps/*"}, clusters...), "no wildcards"},
		{append([]string{"--name", "east", "--resource", "*/deployments"}, clusters...), "no wildcards"},
		{append([]string{"--name", "east", "--resource", "apps/deployments/scale"}, clusters...), "no subresources"},
		{append([]string{"--name", "east", "--member-kubeconfig", "/nonexistent"}, clusters[2:]...), "/nonexistent: no such readable file"},
		{append([]string{"--name", "east"}, clusters...), "the hub has no namespace kollect-system"},
	} {
		if _, stderr, err := register(c.args...); err == nil || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: %v, stderr does not say %q: %s", c.args, err, c.want, stderr)
		}
	}
	if _, err := admin.CoreV1().Namespaces().Get(ctx, "kollect-member", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a failed run wrote to the member: %v", err)
	}

	if _, _, err := hub.Kubectl(ctx, "create", "namespace", "kollect-system"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AppsV1().Deployments("default").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, err := register(append([]string{"--name", "east"}, clusters...)...)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr, "warning") {
		t.Errorf("warnings for the default resources: %s", stderr)
	}
	var mc v1alpha1.MemberCluster
	if err := yaml.UnmarshalStrict([]byte(stdout), &mc); err != nil {
		t.Fatalf("the printed MemberCluster: %v\n%s", err, stdout)
	}
	if mc.APIVersion != "kollect.dev/v1alpha1" || mc.Kind != "MemberCluster" || mc.Name != "east" ||
		mc.Spec.KubeconfigSecretRef != (v1alpha1.SecretKeyReference{Namespace: "kollect-system", Name: "east-kubeconfig", Key: "kubeconfig"}) {
		t.Errorf("printed %+v", mc)
	}

	role, err := admin.RbacV1().ClusterRoles().Get(ctx, "kollect-collector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	read := []string{"get", "list", "watch"}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: read},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: read},
	}
	if !rulesEqual(role.Rules, wantRules) {
		t.Errorf("ClusterRole rules %+v, want %+v", role.Rules, wantRules)
	}
	token, err := admin.CoreV1().Secrets("kollect-member").Get(ctx, "kollect-collector-token", metav1.GetOptions{})
	if err != nil || token.Type != corev1.SecretTypeServiceAccountToken {
		t.Fatalf("token Secret: %v %v", token.Type, err)
	}

	// The hub's Secret, as the hub would use it.
	memberConfig := func() []byte {
		t.Helper()
		s, err := hubClient.CoreV1().Secrets("kollect-system").Get(ctx, "east-kubeconfig", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Server-side apply: no copy of the data in an annotation that
		// metadata-only readers can see.
		if _, ok := s.Annotations[corev1.LastAppliedConfigAnnotation]; ok {
			t.Error("the hub's Secret has a last-applied-configuration annotation")
		}
		return s.Data["kubeconfig"]
	}
	data := memberConfig()
	if !bytes.Contains(data, token.Data["token"]) || bytes.Contains(data, []byte("tokenFile")) {
		t.Errorf("the kubeconfig does not hold the token inline")
	}
	cfg, err := RESTConfig(data, Options{Dialer: loopbackDialer(t)})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if v, err := Probe(pctx, cfg); err != nil || !kubeVersion.MatchString(v) {
		t.Fatalf("Probe: %q, %v", v, err)
	}
	sa := kubernetes.NewForConfigOrDie(cfg)
	deployments, err := sa.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	if err != nil || len(deployments.Items) != 1 {
		t.Errorf("list deployments as the collector: %v (%d)", err, len(deployments.Items))
	}
	if _, err := sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list namespaces as the collector: %v", err)
	}
	_, err = sa.CoreV1().Secrets("kollect-member").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) || ClassOf(err) != Forbidden {
		t.Errorf("list secrets as the collector: %v (%s), want 403 Forbidden", err, ClassOf(err))
	}
	checkAccess(ctx, t, sa, map[authorizationv1.ResourceAttributes]bool{
		{Verb: "watch", Group: "apps", Resource: "deployments"}:                        true,
		{Verb: "list", Resource: "namespaces"}:                                         true,
		{Verb: "list", Resource: "secrets"}:                                            false,
		{Verb: "get", Resource: "secrets", Namespace: "kube-system"}:                   false,
		{Verb: "create", Group: "apps", Resource: "deployments"}:                       false,
		{Verb: "list", Resource: "configmaps"}:                                         false,
		{Verb: "get", Group: "apps", Resource: "deployments", Subresource: "scale"}:    false,
		{Verb: "update", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"}: false,
	})

	// A cluster whose controller manager fills in no token (the hub runs
	// none): the wait ends with a message that says what is missing.
	_, stderr, err = register("--name", "west", "--member-kubeconfig", hub.AdminKubeconfig(), "--hub-kubeconfig", hub.AdminKubeconfig(), "--timeout", "2")
	if err == nil || !strings.Contains(stderr, "got no token within 2s") || !strings.Contains(stderr, "serviceaccount-token-controller") {
		t.Errorf("no token: %v: %s", err, stderr)
	}

	// Again, with other kinds: the rules are replaced, the kubeconfig
	// still works, and a kind the member does not serve is warned about.
	_, stderr, err = register(append([]string{"--name", "east", "--resource", "apps/deployments", "--resource", "configmaps", "--resource", "example.com/widgets"}, clusters...)...)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "warning: the member serves no 'widgets' in API group 'example.com'") {
		t.Errorf("no warning about widgets: %s", stderr)
	}
	if cfg, err = RESTConfig(memberConfig(), Options{Dialer: loopbackDialer(t)}); err != nil {
		t.Fatal(err)
	}
	sa = kubernetes.NewForConfigOrDie(cfg)
	checkAccess(ctx, t, sa, map[authorizationv1.ResourceAttributes]bool{
		{Verb: "list", Group: "apps", Resource: "deployments"}:     true,
		{Verb: "list", Resource: "configmaps"}:                     true,
		{Verb: "watch", Group: "example.com", Resource: "widgets"}: true,
		{Verb: "list", Resource: "namespaces"}:                     false,
		{Verb: "list", Resource: "secrets"}:                        false,
	})
}

// checkAccess asks the member, as the client's user, whether it may do
// each thing (SelfSubjectAccessReview) and compares with want.
func checkAccess(ctx context.Context, t *testing.T, cs kubernetes.Interface, want map[authorizationv1.ResourceAttributes]bool) {
	t.Helper()
	for attrs, allowed := range want {
		review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if review.Status.Allowed != allowed {
			t.Errorf("%s %s.%s (namespace %q): allowed %v, want %v", attrs.Verb, attrs.Resource, attrs.Group, attrs.Namespace, review.Status.Allowed, allowed)
		}
	}
}

func rulesEqual(got, want []rbacv1.PolicyRule) bool {
	return slices.EqualFunc(got, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.ResourceNames) == 0 && len(a.NonResourceURLs) == 0
	})
}
