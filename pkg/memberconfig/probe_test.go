package memberconfig

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/dnstest"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

var kubeVersion = regexp.MustCompile(`^v1\.36\.\d+$`)

// editKubeconfig returns data with edit applied to its current context's
// cluster and user.
func editKubeconfig(t *testing.T, data []byte, edit func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo)) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	kctx := cfg.Contexts[cfg.CurrentContext]
	edit(cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo])
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// probe runs RESTConfig with d and Probe bounded by timeout.
func probe(t *testing.T, data []byte, d *netguard.Dialer, timeout time.Duration) (string, error) {
	t.Helper()
	cfg, err := RESTConfig(data, Options{Dialer: d})
	if err != nil {
		t.Fatalf("RESTConfig: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	begin := time.Now()
	v, err := Probe(ctx, cfg)
	t.Logf("Probe: %q, %v (%s) in %s", v, err, ClassOf(err), time.Since(begin).Round(time.Millisecond))
	return v, err
}

// wantClass fails unless err has class and its message says each of want
// and holds no credential.
func wantClass(t *testing.T, err error, class string, want ...string) {
	t.Helper()
	if ClassOf(err) != class {
		t.Fatalf("%v: class %q, want %q", err, ClassOf(err), class)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message does not say %q: %v", w, err)
		}
	}
	checkNoSecrets(t, err.Error())
}

// holdListener accepts connections and never answers, until the test ends.
func holdListener(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() { <-done; _ = c.Close() }()
		}
	}()
	return l.Addr().String()
}

// TestProbe probes a real kube-apiserver, with its admin kubeconfig and
// with kubeconfigs that fail in each way Probe classifies, and servers that
// are not Kubernetes.
func TestProbe(t *testing.T) {
	c := memberCluster(t)
	admin, err := os.ReadFile(c.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	d := loopbackDialer(t)
	server := func(addr string) func(*clientcmdapi.Cluster, *clientcmdapi.AuthInfo) {
		return func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = "https://" + addr }
	}

	t.Run("admin", func(t *testing.T) {
		v, err := probe(t, admin, d, 10*time.Second)
		if err != nil || !kubeVersion.MatchString(v) {
			t.Fatalf("version %q, %v; want v1.36.x", v, err)
		}
	})
	t.Run("ServiceAccount token", func(t *testing.T) {
		path, err := c.ServiceAccountKubeconfig(t.Context(), "probe", "reader", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := probe(t, data, d, 10*time.Second); err != nil || !kubeVersion.MatchString(v) {
			t.Fatalf("version %q, %v; want v1.36.x", v, err)
		}
	})
	t.Run("closed port", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		_ = l.Close()
		_, err = probe(t, editKubeconfig(t, admin, server(addr)), d, 10*time.Second)
		wantClass(t, err, Unreachable, "https://"+addr, "connection refused")
	})
	t.Run("no answer", func(t *testing.T) {
		_, err := probe(t, editKubeconfig(t, admin, server(holdListener(t))), d, time.Second)
		wantClass(t, err, Unreachable, "timed out")
	})
	t.Run("wrong CA", func(t *testing.T) {
		_, err := probe(t, editKubeconfig(t, admin, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.CertificateAuthorityData = mustCA() }), d, 10*time.Second)
		wantClass(t, err, TLSError, "certificate-authority-data")
	})
	t.Run("wrong server name", func(t *testing.T) {
		_, err := probe(t, editKubeconfig(t, admin, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.TLSServerName = "api.member.example" }), d, 10*time.Second)
		wantClass(t, err, TLSError, "host name")
	})
	t.Run("bad token", func(t *testing.T) {
		_, err := probe(t, editKubeconfig(t, admin, func(_ *clientcmdapi.Cluster, u *clientcmdapi.AuthInfo) {
			*u = clientcmdapi.AuthInfo{Token: testToken}
		}), d, 10*time.Second)
		wantClass(t, err, Unauthorized, "401")
	})
	t.Run("not TLS", func(t *testing.T) {
		ts := httptest.NewServer(http.NotFoundHandler())
		t.Cleanup(ts.Close)
		_, err := probe(t, editKubeconfig(t, admin, server(ts.Listener.Addr().String())), d, 10*time.Second)
		wantClass(t, err, TLSError, "does not speak TLS")
	})
	// What a server that is not Kubernetes answers stays out of the
	// message: a member's status must not become a way to read it.
	const body = "internal-detail-4f2a"
	for status, want := range map[int]string{http.StatusInternalServerError: "answered HTTP 500", http.StatusOK: "without a Kubernetes version"} {
		t.Run("not Kubernetes "+http.StatusText(status), func(t *testing.T) {
			ts := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(status)
				_, _ = w.Write([]byte("<html>" + body + "</html>"))
			}))
			t.Cleanup(ts.Close)
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
			_, err := probe(t, editKubeconfig(t, admin, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
				c.Server, c.CertificateAuthorityData = ts.URL, ca
			}), d, 10*time.Second)
			wantClass(t, err, Unknown, want)
			if strings.Contains(err.Error(), body) {
				t.Errorf("the message quotes the answer: %v", err)
			}
		})
	}
	t.Run("forbidden before any connection", func(t *testing.T) {
		// The real member's own address, with the default policy.
		u := c.RESTConfig().Host
		data := editKubeconfig(t, admin, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) { c.Server = u })
		_, err := RESTConfig(data, Options{Dialer: defaultDialer(t, "")})
		wantClass(t, err, EndpointForbidden, "127.0.0.1 is a loopback address")
	})
}

// TestNoProxyFromEnvironment: a member is reached directly even when the
// hub's environment names a proxy, which client-go would otherwise use (and
// the dialer would then check the proxy's address instead of the
// member's). It runs in a child process: net/http reads the proxy
// variables once per process.
func TestNoProxyFromEnvironment(t *testing.T) {
	if path := os.Getenv("MEMBERCONFIG_HELPER_KUBECONFIG"); path != "" {
		probeBehindProxy(t, path) // the child process
		return
	}
	c := memberCluster(t)
	dns, err := dnstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	// Not a loopback name or address: net/http never proxies those.
	dns.Set("member.test", "127.0.0.1")
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(c.RESTConfig().Host, "https://"))
	admin, err := os.ReadFile(c.AdminKubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	data := editKubeconfig(t, admin, func(c *clientcmdapi.Cluster, _ *clientcmdapi.AuthInfo) {
		c.Server, c.TLSServerName = "https://member.test:"+port, "localhost"
	})
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	proxy, conns := netguardtest.Listen(t, "tcp", "127.0.0.1:0")

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestNoProxyFromEnvironment$", "-test.v")
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); !strings.EqualFold(name, "no_proxy") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HTTPS_PROXY=http://"+proxy, "https_proxy=http://"+proxy,
		"MEMBERCONFIG_HELPER_KUBECONFIG="+path, "MEMBERCONFIG_HELPER_DNS="+dns.Addr())
	out, err := cmd.CombinedOutput()
	t.Logf("helper:\n%s", out)
	if err != nil {
		t.Fatal(err)
	}
	// One connection: the helper's control request, made without the
	// Proxy function RESTConfig sets.
	if n := conns.Load(); n != 1 {
		t.Errorf("%d connections reached the proxy, want 1 (the control request)", n)
	}
}

// probeBehindProxy is TestNoProxyFromEnvironment in its child process,
// whose environment names the proxy.
func probeBehindProxy(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := netguard.New(netguard.Config{DNSServer: os.Getenv("MEMBERCONFIG_HELPER_DNS"), Policy: netguard.Policy{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if v, err := probe(t, data, d, 10*time.Second); err != nil || !kubeVersion.MatchString(v) {
		t.Fatalf("version %q, %v; want v1.36.x", v, err)
	}
	// The control: the same configuration without its Proxy function goes
	// to the environment's proxy, which closes the connection.
	cfg, err := RESTConfig(data, Options{Dialer: d})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Proxy = nil
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if v, err := Probe(ctx, cfg); err == nil {
		t.Fatalf("the control request got %q: the proxy was not used", v)
	}
}
