package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// hostileToken is the credential in every hostile kubeconfig and inline
// spec: it must never show in a MemberCluster, an Event or the hub's log.
const hostileToken = "kollect-e2e-hostile-token-7f3a9c"

// testHostileMembers registers MemberClusters whose kubeconfigs the hub
// must refuse or cannot use, and MemberClusters carrying a credential in
// their spec: each gets a clear error or Reachable=False with the right
// errorClass and a lastError naming the cause; the credential shows
// nowhere; kollect-apiserver keeps serving, the same process.
func testHostileMembers(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	api := hub.Client.KollectV1alpha1()
	pid := hub.Kollect.Pid()
	north := f.members["north"].RESTConfig()
	// A real CA, but the hub's, not north's.
	wrongCA, err := os.ReadFile(hub.Cluster.ClusterCAFile())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	// The exec plugin would create this file, were it run.
	ran := filepath.Join(t.TempDir(), "exec-ran")

	northCluster := &clientcmdapi.Cluster{Server: north.Host, CertificateAuthorityData: north.CAData}
	token := &clientcmdapi.AuthInfo{Token: hostileToken}
	cases := []struct {
		name       string
		kubeconfig []byte // nil: no Secret
		class      string
		lastError  []string
	}{{
		name: "hostile-exec",
		kubeconfig: writeKubeconfig(t, northCluster, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
			APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh", Args: []string{"-c", "touch " + ran},
			Env: []clientcmdapi.ExecEnvVar{{Name: "TOKEN", Value: hostileToken}}, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}),
		class:     "ExecNotAllowed",
		lastError: []string{"exec credential plugin", "--allow-member-exec"},
	}, {
		name: "hostile-auth-provider",
		kubeconfig: writeKubeconfig(t, northCluster, &clientcmdapi.AuthInfo{AuthProvider: &clientcmdapi.AuthProviderConfig{
			Name: "oidc", Config: map[string]string{"id-token": hostileToken, "client-id": "kollect", "idp-issuer-url": "https://127.0.0.1:" + closed}}}),
		class:     "ExecNotAllowed",
		lastError: []string{`auth-provider plugin "oidc"`, "--allow-member-exec"},
	}, {
		// The hub allows 127.0.0.0/8 only (--allowed-sink-cidrs).
		name:       "hostile-private",
		kubeconfig: writeKubeconfig(t, &clientcmdapi.Cluster{Server: "https://10.0.0.1:6443", CertificateAuthorityData: north.CAData}, token),
		class:      "EndpointForbidden",
		lastError:  []string{"10.0.0.1 is a private address", "--allow-private-sink-endpoints"},
	}, {
		name:       "hostile-metadata",
		kubeconfig: writeKubeconfig(t, &clientcmdapi.Cluster{Server: "https://169.254.169.254", CertificateAuthorityData: north.CAData}, token),
		class:      "EndpointForbidden",
		lastError:  []string{"169.254.169.254 is a cloud metadata address"},
	}, {
		name:       "hostile-unreachable",
		kubeconfig: writeKubeconfig(t, &clientcmdapi.Cluster{Server: "https://127.0.0.1:" + closed, CertificateAuthorityData: north.CAData}, token),
		class:      "Unreachable",
		lastError:  []string{"https://127.0.0.1:" + closed, "connection refused"},
	}, {
		name:       "hostile-tls",
		kubeconfig: writeKubeconfig(t, &clientcmdapi.Cluster{Server: north.Host, CertificateAuthorityData: wrongCA}, token),
		class:      "TLSError",
		lastError:  []string{north.Host, "not signed by the kubeconfig's certificate-authority-data"},
	}, {
		name:       "hostile-token",
		kubeconfig: writeKubeconfig(t, northCluster, token),
		class:      "Unauthorized",
		lastError:  []string{north.Host, "401"},
	}, {
		name:       "hostile-token-file",
		kubeconfig: writeKubeconfig(t, northCluster, &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
		class:      "KubeconfigInvalid",
		lastError:  []string{"tokenFile, a file path"},
	}, {
		name:       "hostile-insecure",
		kubeconfig: writeKubeconfig(t, &clientcmdapi.Cluster{Server: north.Host, InsecureSkipTLSVerify: true}, token),
		class:      "KubeconfigInvalid",
		lastError:  []string{"insecure-skip-tls-verify"},
	}, {
		name:      "hostile-no-secret",
		class:     "SecretNotFound",
		lastError: []string{"fleet/hostile-no-secret-kubeconfig not found"},
	}}
	for _, c := range cases {
		if c.kubeconfig != nil {
			if _, err := hub.Kube.CoreV1().Secrets("fleet").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: c.name + "-kubeconfig"},
				Data: map[string][]byte{"kubeconfig": c.kubeconfig}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := api.MemberClusters().Create(ctx, &v1alpha1.MemberCluster{
			ObjectMeta: metav1.ObjectMeta{Name: c.name, Labels: map[string]string{"hostile": "true"}},
			Spec:       v1alpha1.MemberClusterSpec{KubeconfigSecretRef: v1alpha1.SecretKeyReference{Namespace: "fleet", Name: c.name + "-kubeconfig"}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_, _, _ = hub.Cluster.Kubectl(context.Background(), "delete", "memberclusters", "-l", "hostile=true", "--wait=false")
	})
	for _, c := range cases {
		m := waitMemberStatus(ctx, t, hub, c.name, "errorClass "+c.class, func(m *v1alpha1.MemberCluster) bool {
			return m.Status.Collection != nil && m.Status.Collection.ErrorClass == c.class
		})
		obs := m.Status.Collection
		t.Logf("%s: %s: %s", c.name, obs.ErrorClass, obs.LastError)
		for _, want := range c.lastError {
			if !strings.Contains(obs.LastError, want) {
				t.Errorf("%s: lastError %q lacks %q", c.name, obs.LastError, want)
			}
		}
		if obs.Reachable {
			t.Errorf("%s: reported reachable", c.name)
		}
		for _, typ := range []string{kollect.ConditionReachable, kollect.ConditionReady} {
			if cond := meta.FindStatusCondition(m.Status.Conditions, typ); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != c.class {
				t.Errorf("%s: %s %+v, want False with reason %s", c.name, typ, cond, c.class)
			}
		}
	}
	if _, err := os.Stat(ran); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the exec plugin ran on the hub: %v", err)
	}
	// What kubectl shows: each member's class in its REACHABLE column.
	table := kubectl(ctx, t, hub, "get", "memberclusters", "-l", "hostile=true", "--no-headers")
	t.Logf("kubectl get memberclusters -l hostile=true:\n%s", table)
	for _, c := range cases {
		if !slices.ContainsFunc(strings.Split(table, "\n"), func(row string) bool {
			fields := strings.Fields(row)
			return len(fields) > 2 && fields[0] == c.name && fields[1] == c.class && fields[2] == c.class
		}) {
			t.Errorf("kubectl get memberclusters: no row %s with REACHABLE and READY %s", c.name, c.class)
		}
	}
	// A member whose Secret is fixed recovers, its error cleared: the
	// hostile ones left the hub's fleet controller working.
	if _, err := hub.Kube.CoreV1().Secrets("fleet").Update(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hostile-tls-kubeconfig"},
		Data: map[string][]byte{"kubeconfig": inlineKubeconfig(t, f.members["north"].RESTConfig())}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitMemberStatus(ctx, t, hub, "hostile-tls", "Reachable=True without an error", func(m *v1alpha1.MemberCluster) bool {
		c := meta.FindStatusCondition(m.Status.Conditions, kollect.ConditionReachable)
		return c != nil && c.Status == metav1.ConditionTrue && m.Status.Collection.ErrorClass == "" && m.Status.Collection.LastError == ""
	})

	testInlineCredentials(ctx, t, f)

	// The credential is in no MemberCluster, Event or log line of the hub.
	for what, out := range map[string]string{
		"kubectl get memberclusters -o yaml": kubectl(ctx, t, hub, "get", "memberclusters", "-o", "yaml"),
		"kubectl get events -A -o yaml":      kubectl(ctx, t, hub, "get", "events", "-A", "-o", "yaml"),
		"kollect-apiserver's log":            readFile(t, hub.Kollect.LogFile()),
	} {
		if strings.Contains(out, hostileToken) {
			t.Errorf("%s holds the token", what)
		}
	}

	// The hub served all along: the same process, ready.
	if got := hub.Kollect.Pid(); got != pid || !hub.Kollect.Running() {
		t.Errorf("kollect-apiserver: pid %d (running %v), was %d", got, hub.Kollect.Running(), pid)
	}
	client, err := rest.HTTPClientFor(hub.Cluster.KollectRESTConfig(hub.Kollect))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hub.Kollect.URL()+"/readyz", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("kollect-apiserver /readyz: %s", resp.Status)
	}

	// Unusable members can be deleted: their finalizer goes.
	kubectl(ctx, t, hub, "delete", "memberclusters", "-l", "hostile=true", "--wait=false")
	for _, c := range cases {
		waitGone(ctx, t, hub, c.name)
	}
	waitGone(ctx, t, hub, "inline-token-default")
}

// testInlineCredentials: a MemberCluster's spec has no field for a
// credential. A create carrying one (spec.token, or a whole kubeconfig in
// spec.kubeconfig) is refused by kubectl's strict field validation and by
// a strict raw POST, naming the field; a raw POST without fieldValidation
// (the server's default, Warn) is accepted with a warning naming the field,
// and the credential is not stored.
func testInlineCredentials(ctx context.Context, t *testing.T, f *fleet) {
	hub := f.hub
	api := hub.Client.KollectV1alpha1()
	kubeconfig := string(writeKubeconfig(t, &clientcmdapi.Cluster{Server: "https://127.0.0.1:6443"}, &clientcmdapi.AuthInfo{Token: hostileToken}))
	object := func(name, field string, value any) map[string]any {
		return map[string]any{"apiVersion": "kollect.dev/v1alpha1", "kind": "MemberCluster",
			"metadata": map[string]any{"name": name, "labels": map[string]string{"hostile": "true"}},
			"spec": map[string]any{field: value,
				"kubeconfigSecretRef": map[string]any{"namespace": "fleet", "name": name + "-kubeconfig"}}}
	}
	for _, c := range []struct {
		name, field string
		value       any
		args        []string
	}{
		{"inline-token-apply", "token", hostileToken, []string{"apply", "--validate=strict", "-f", "-"}},
		{"inline-kubeconfig-create", "kubeconfig", kubeconfig, []string{"create", "-f", "-"}},
	} {
		body, err := json.Marshal(object(c.name, c.field, c.value))
		if err != nil {
			t.Fatal(err)
		}
		out, err := kubectlStdin(ctx, hub, string(body), c.args...)
		t.Logf("kubectl %s with spec.%s: %v: %s", strings.Join(c.args, " "), c.field, err, strings.TrimSpace(out))
		if want := fmt.Sprintf(`unknown field "spec.%s"`, c.field); err == nil || !strings.Contains(out, want) {
			t.Errorf("kubectl %s with spec.%s: %v, want an error naming %s:\n%s", strings.Join(c.args, " "), c.field, err, want, out)
		}
		if _, err := api.MemberClusters().Get(ctx, c.name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("kubectl %s with spec.%s stored %s: %v", strings.Join(c.args, " "), c.field, c.name, err)
		}
	}

	// Raw POSTs, strict and with the server's default.
	post := func(name, query string) (rest.Result, []byte) {
		body, err := json.Marshal(object(name, "token", hostileToken))
		if err != nil {
			t.Fatal(err)
		}
		req := api.RESTClient().Post().AbsPath("/apis/kollect.dev/v1alpha1/memberclusters").SetHeader("Content-Type", "application/json").Body(body)
		if query != "" {
			req = req.Param("fieldValidation", query)
		}
		res := req.Do(ctx)
		raw, _ := res.Raw()
		return res, raw
	}
	res, raw := post("inline-token-strict", "Strict")
	if err := res.Error(); !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `unknown field "spec.token"`) {
		t.Errorf("a strict POST with spec.token: %v, want 400 naming spec.token", err)
	}
	if _, err := api.MemberClusters().Get(ctx, "inline-token-strict", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a strict POST with spec.token stored it: %v", err)
	}
	res, raw = post("inline-token-default", "")
	if err := res.Error(); err != nil {
		t.Fatalf("a POST with spec.token and no fieldValidation: %v, want it accepted without the field", err)
	}
	var warned bool
	for _, w := range res.Warnings() {
		warned = warned || strings.Contains(w.Text, `unknown field "spec.token"`)
	}
	if !warned {
		t.Errorf("a POST with spec.token and no fieldValidation: warnings %+v, want one naming spec.token", res.Warnings())
	}
	if strings.Contains(string(raw), hostileToken) {
		t.Errorf("the created MemberCluster holds the token:\n%s", raw)
	}
	if out := kubectl(ctx, t, hub, "get", "membercluster", "inline-token-default", "-o", "yaml"); strings.Contains(out, hostileToken) {
		t.Errorf("the stored MemberCluster holds the token:\n%s", out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
