package memberconfig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/dnstest"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

// mustCA returns the PEM of a new self-signed CA certificate.
func mustCA() []byte {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "memberconfig-test-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// secrets are the credentials the test kubeconfigs may hold.
var secrets = []string{testToken, testPassword, testKey}

const testKey = "key-SECRET-5d4c3b2a1908f7e6d5c4"

// checkNoSecrets fails when msg holds a credential of the test kubeconfigs.
func checkNoSecrets(t *testing.T, msg string) {
	t.Helper()
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Errorf("the message holds a credential (%s...): %s", s[:6], msg)
		}
	}
}

type refusal struct {
	name string
	// data, when set, is the kubeconfig; else kubeconfig(edit).
	data      string
	edit      func(*clientcmdapi.Config)
	allowExec bool
	class     string
	// want are substrings of the message: the field or entry at fault and
	// what to do about it.
	want []string
}

func user(c *clientcmdapi.Config) *clientcmdapi.AuthInfo   { return c.AuthInfos["u"] }
func cluster(c *clientcmdapi.Config) *clientcmdapi.Cluster { return c.Clusters["c"] }

// refusals are the kubeconfigs RESTConfig refuses, each for one reason;
// FuzzRESTConfig starts from them too.
func refusals() []refusal {
	exec := &clientcmdapi.ExecConfig{Command: "aws", Args: []string{"eks", "get-token"}, APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	return []refusal{
		{name: "empty", data: "apiVersion: v1\nkind: Config\n", class: KubeconfigInvalid, want: []string{"no current-context"}},
		{name: "no current-context", edit: func(c *clientcmdapi.Config) { c.CurrentContext = "" }, class: KubeconfigInvalid, want: []string{"no current-context"}},
		{name: "current-context missing", edit: func(c *clientcmdapi.Config) { c.CurrentContext = "prod" }, class: KubeconfigInvalid, want: []string{`current-context "prod"`, "contexts"}},
		{name: "context without cluster", edit: func(c *clientcmdapi.Config) { c.Contexts["ctx"].Cluster = "" }, class: KubeconfigInvalid, want: []string{`context "ctx" names no cluster`}},
		{name: "cluster missing", edit: func(c *clientcmdapi.Config) { c.Contexts["ctx"].Cluster = "east" }, class: KubeconfigInvalid, want: []string{`cluster "east"`, "clusters"}},
		{name: "context without user", edit: func(c *clientcmdapi.Config) { c.Contexts["ctx"].AuthInfo = "" }, class: KubeconfigInvalid, want: []string{`context "ctx" names no user`}},
		{name: "user missing", edit: func(c *clientcmdapi.Config) { c.Contexts["ctx"].AuthInfo = "admin" }, class: KubeconfigInvalid, want: []string{`user "admin"`, "users"}},
		{name: "exec", edit: func(c *clientcmdapi.Config) { user(c).Token, user(c).Exec = "", exec }, class: ExecNotAllowed, want: []string{`user "u"`, "exec", "--allow-member-exec"}},
		{name: "auth-provider", edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "oidc", Config: map[string]string{"refresh-token": testToken}}
		}, class: ExecNotAllowed, want: []string{`user "u"`, `auth-provider plugin "oidc"`, "--allow-member-exec"}},
		{name: "certificate-authority path", edit: func(c *clientcmdapi.Config) {
			cluster(c).CertificateAuthorityData, cluster(c).CertificateAuthority = nil, "/etc/kubernetes/pki/ca.crt"
		},
			class: KubeconfigInvalid, want: []string{`cluster "c"`, "sets certificate-authority,", "certificate-authority-data"}},
		{name: "client-certificate path", edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).ClientCertificate, user(c).ClientKeyData = "", "/etc/kubernetes/pki/admin.crt", []byte(testKey)
		}, class: KubeconfigInvalid, want: []string{`user "u"`, "sets client-certificate,", "client-certificate-data"}},
		{name: "client-key path", edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).ClientCertificateData, user(c).ClientKey = "", testCAPEM, "/etc/kubernetes/pki/admin.key"
		}, class: KubeconfigInvalid, want: []string{`user "u"`, "sets client-key,", "client-key-data"}},
		{name: "tokenFile", edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).TokenFile = "", "/var/run/secrets/kubernetes.io/serviceaccount/token"
		},
			class: KubeconfigInvalid, want: []string{`user "u"`, "sets tokenFile,", "inline in token"}},
		{name: "insecure-skip-tls-verify", edit: func(c *clientcmdapi.Config) {
			cluster(c).CertificateAuthorityData, cluster(c).InsecureSkipTLSVerify = nil, true
		},
			class: KubeconfigInvalid, want: []string{`cluster "c"`, "insecure-skip-tls-verify", "certificate-authority-data"}},
		{name: "proxy-url", edit: func(c *clientcmdapi.Config) { cluster(c).ProxyURL = "http://proxy.example:3128" }, class: KubeconfigInvalid, want: []string{`cluster "c"`, "proxy-url"}},
		{name: "no server", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "" }, class: KubeconfigInvalid, want: []string{`cluster "c" has no server`}},
		{name: "http server", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "http://203.0.113.10:8080" }, class: KubeconfigInvalid, want: []string{`cluster "c"`, `"http://203.0.113.10:8080" is not an https:// URL`}},
		{name: "server without host", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https:///api" }, class: KubeconfigInvalid, want: []string{`cluster "c"`, "has no host"}},
		{name: "server not a URL", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://[::1" }, class: KubeconfigInvalid, want: []string{`cluster "c"`, "not a URL"}},
		{name: "server with credentials", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://admin:" + testPassword + "@203.0.113.10" },
			class: KubeconfigInvalid, want: []string{`cluster "c"`, "user information"}},
		{name: "server with query", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://203.0.113.10/?access_token=" + testToken },
			class: KubeconfigInvalid, want: []string{`cluster "c"`, "query"}},
		{name: "yaml map as key", data: "{current-context: " + testToken + "}: x\nusers: []\n", class: KubeconfigInvalid, want: []string{"does not parse"}},
		{name: "yaml syntax", data: "users:\n- name: u\n  user:\n    token: " + testToken + "\n\t bad: [\n", class: KubeconfigInvalid, want: []string{"does not parse", "(line "}},
		{name: "wrong type", data: "users:\n- name: u\n  user:\n    token: [" + testToken + "]\n", class: KubeconfigInvalid, want: []string{"wrong type"}},
		{name: "not a kubeconfig", data: "apiVersion: v1\nkind: Secret\nmetadata: {name: " + testToken + "}\n", class: KubeconfigInvalid, want: []string{"not a kubeconfig", "kind Config"}},
		{name: "certificate without key", edit: func(c *clientcmdapi.Config) { user(c).Token, user(c).ClientCertificateData = "", testCAPEM },
			class: KubeconfigInvalid, want: []string{"not usable", "client-key-data"}},
		{name: "two credentials", edit: func(c *clientcmdapi.Config) { user(c).Username, user(c).Password = "admin", testPassword },
			class: KubeconfigInvalid, want: []string{"not usable", "more than one authentication method"}},
		{name: "CA data not PEM", edit: func(c *clientcmdapi.Config) { cluster(c).CertificateAuthorityData = []byte(testKey) },
			class: KubeconfigInvalid, want: []string{`context "ctx"`, "does not load"}},
		{name: "key does not match", edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).ClientCertificateData, user(c).ClientKeyData = "", testCAPEM, []byte("-----BEGIN EC PRIVATE KEY-----\n"+testKey+"\n-----END EC PRIVATE KEY-----\n")
		}, class: KubeconfigInvalid, want: []string{`context "ctx"`, "does not load"}},
		{name: "exec allowed but incomplete", allowExec: true, edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).Exec = "", &clientcmdapi.ExecConfig{Command: "aws"}
		},
			class: KubeconfigInvalid, want: []string{"not usable", "apiVersion must be specified"}},
		{name: "auth-provider allowed but not built in", allowExec: true, edit: func(c *clientcmdapi.Config) {
			user(c).Token, user(c).AuthProvider = "", &clientcmdapi.AuthProviderConfig{Name: "gcp"}
		}, class: KubeconfigInvalid, want: []string{`context "ctx"`, `"gcp"`}},
		{name: "loopback server", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://127.0.0.1:6443" },
			class: EndpointForbidden, want: []string{"127.0.0.1 is a loopback address", "--allow-private-sink-endpoints", "--allowed-sink-cidrs"}},
		{name: "metadata server", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://169.254.169.254" },
			class: EndpointForbidden, want: []string{"169.254.169.254 is a cloud metadata address"}},
		{name: "localhost", edit: func(c *clientcmdapi.Config) { cluster(c).Server = "https://localhost:6443" },
			class: EndpointForbidden, want: []string{"localhost resolves to a loopback address"}},
	}
}

func (r refusal) kubeconfig(t testing.TB) []byte {
	if r.data != "" {
		return []byte(r.data)
	}
	return kubeconfig(t, r.edit)
}

// TestRESTConfigRefuses: each refusal has its class and a message that
// names the field or entry at fault, and no message holds a credential,
// with or without more credentials in the user entry.
func TestRESTConfigRefuses(t *testing.T) {
	d := defaultDialer(t, "")
	for _, r := range refusals() {
		t.Run(r.name, func(t *testing.T) {
			cfg, err := RESTConfig(r.kubeconfig(t), Options{Dialer: d, AllowExec: r.allowExec})
			if err == nil {
				t.Fatalf("accepted: %+v", cfg)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T, not an *Error: %v", err, err)
			}
			if e.Class != r.class || ClassOf(err) != r.class {
				t.Errorf("class %s (ClassOf %s), want %s: %v", e.Class, ClassOf(err), r.class, err)
			}
			for _, w := range r.want {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message does not say %q: %s", w, e.Message)
				}
			}
			checkNoSecrets(t, e.Message)
			t.Log(e.Message)
		})
	}
	t.Run("with every credential", func(t *testing.T) {
		for _, r := range refusals() {
			if r.data != "" {
				continue
			}
			data := kubeconfig(t, func(c *clientcmdapi.Config) {
				r.edit(c)
				if u := c.AuthInfos["u"]; u != nil {
					u.Username, u.Password, u.ClientKeyData = "admin", testPassword, []byte(testKey)
				}
			})
			_, err := RESTConfig(data, Options{Dialer: d, AllowExec: r.allowExec})
			if err == nil {
				t.Fatalf("%s: accepted", r.name)
			}
			checkNoSecrets(t, err.Error())
		}
	})
	t.Run("no bytes", func(t *testing.T) {
		if _, err := RESTConfig(nil, Options{Dialer: d}); ClassOf(err) != KubeconfigInvalid || !strings.Contains(err.Error(), "no current-context") {
			t.Errorf("%v", err)
		}
	})
	t.Run("no dialer", func(t *testing.T) {
		if _, err := RESTConfig(kubeconfig(t, nil), Options{}); err == nil {
			t.Fatal("a configuration without a dialer was returned")
		}
	})
}

// TestRESTConfig: what a usable kubeconfig gives, with the options applied,
// the dialer as the only way out and no proxy; an exec user with
// --allow-member-exec.
func TestRESTConfig(t *testing.T) {
	d := defaultDialer(t, "")
	data := kubeconfig(t, func(c *clientcmdapi.Config) {
		cluster(c).TLSServerName = "api.member.example"
		cluster(c).Server = "https://203.0.113.10:6443/prefix"
		// Entries the current context does not use are not looked at.
		c.Clusters["other"] = &clientcmdapi.Cluster{Server: "http://10.0.0.1", CertificateAuthority: "/etc/ca.crt", InsecureSkipTLSVerify: true}
		c.AuthInfos["other"] = &clientcmdapi.AuthInfo{TokenFile: "/etc/token", Exec: &clientcmdapi.ExecConfig{Command: "sh"}}
		c.Contexts["other"] = &clientcmdapi.Context{Cluster: "other", AuthInfo: "other"}
	})
	cfg, err := RESTConfig(data, Options{Dialer: d, UserAgent: "kollect-hub/test", QPS: 20, Burst: 40, Timeout: 7 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://203.0.113.10:6443/prefix" || cfg.BearerToken != testToken || string(cfg.CAData) != string(testCAPEM) || cfg.ServerName != "api.member.example" {
		t.Errorf("host %q, token set %v, CA set %v, server name %q", cfg.Host, cfg.BearerToken == testToken, len(cfg.CAData) > 0, cfg.ServerName)
	}
	if cfg.UserAgent != "kollect-hub/test" || cfg.QPS != 20 || cfg.Burst != 40 || cfg.Timeout != 7*time.Second {
		t.Errorf("options not applied: %q %v %v %v", cfg.UserAgent, cfg.QPS, cfg.Burst, cfg.Timeout)
	}
	if cfg.Dial == nil || cfg.Proxy == nil {
		t.Fatal("no dial hook or no proxy function")
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.member.example/version", nil)
	if u, err := cfg.Proxy(req); u != nil || err != nil {
		t.Errorf("proxy %v, %v", u, err)
	}
	// The dial hook is the dialer's: it refuses what the policy forbids.
	l, conns := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	var refused *netguard.Error
	if _, err := cfg.Dial(t.Context(), "tcp", l); !errors.As(err, &refused) || conns.Load() != 0 {
		t.Errorf("dial to %s: %v, %d connections", l, err, conns.Load())
	}
	if cfg.Insecure || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil {
		t.Errorf("unexpected settings: %+v", cfg)
	}

	exec := kubeconfig(t, func(c *clientcmdapi.Config) {
		user(c).Token = ""
		user(c).Exec = &clientcmdapi.ExecConfig{Command: "kubectl-oidc_login", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	})
	cfg, err = RESTConfig(exec, Options{Dialer: d, AllowExec: true})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ExecProvider == nil || cfg.ExecProvider.Command != "kubectl-oidc_login" {
		t.Errorf("exec provider %+v", cfg.ExecProvider)
	}
}

// TestEndpointForbidden: a server the policy forbids is refused by
// RESTConfig before any connection, whether it is an address or a name
// that resolves to one; and a name that passes the early check but
// resolves to a forbidden address when the probe dials (rebinding) is
// refused there, still without a connection. A name that does not resolve
// is left to the connection.
func TestEndpointForbidden(t *testing.T) {
	dns, err := dnstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dns.Close() })
	d := defaultDialer(t, dns.Addr())
	addr, conns := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(addr)
	server := func(host string) []byte {
		return kubeconfig(t, func(c *clientcmdapi.Config) { cluster(c).Server = "https://" + net.JoinHostPort(host, port) })
	}

	dns.Set("internal.member.test", "10.20.30.40")
	for host, want := range map[string]string{
		"127.0.0.1":            "127.0.0.1 is a loopback address",
		"::1":                  "::1 is a loopback address",
		"localhost":            "localhost resolves to a loopback address",
		"internal.member.test": "internal.member.test resolves to a private address",
	} {
		_, err := RESTConfig(server(host), Options{Dialer: d})
		if ClassOf(err) != EndpointForbidden || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v (%s), want EndpointForbidden saying %q", host, err, ClassOf(err), want)
		}
		if err != nil && strings.Contains(err.Error(), "10.20.30.40") {
			t.Errorf("%s: the message shows what the name resolved to: %v", host, err)
		}
	}

	dns.Sequence("rebind.member.test", []string{"203.0.113.10"}, []string{"127.0.0.1"})
	cfg, err := RESTConfig(server("rebind.member.test"), Options{Dialer: d})
	if err != nil {
		t.Fatalf("the first answer is a public address: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = Probe(ctx, cfg)
	if ClassOf(err) != EndpointForbidden || !strings.Contains(err.Error(), "rebind.member.test resolves to a loopback address") {
		t.Errorf("probe after rebinding: %v (%s)", err, ClassOf(err))
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("%d connections reached the listener", n)
	}

	if _, err := RESTConfig(server("unknown.member.test"), Options{Dialer: d}); err != nil {
		t.Errorf("a name that does not resolve yet: %v", err)
	}
}

// TestClassOf: the classes of errors as the libraries return them.
func TestClassOf(t *testing.T) {
	gr := schema.GroupResource{Resource: "secrets"}
	for _, c := range []struct {
		err  error
		want string
	}{
		{nil, ""},
		{fmt.Errorf("reading: %w", &Error{Class: SecretNotFound, Message: "no Secret"}), SecretNotFound},
		{fmt.Errorf("dial: %w", &netguard.Error{Host: "10.0.0.1", Addr: netip.MustParseAddr("10.0.0.1"), Class: netguard.Private}), EndpointForbidden},
		{apierrors.NewUnauthorized("no"), Unauthorized},
		{apierrors.NewForbidden(gr, "", errors.New("no")), Forbidden},
		{&net.DNSError{Err: "no such host", Name: "member.example", IsNotFound: true}, Unreachable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, Unreachable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.EHOSTUNREACH}, Unreachable},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, Unreachable},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), Unreachable},
		{fmt.Errorf("tls handshake: %w", io.EOF), Unreachable},
		{x509.UnknownAuthorityError{}, TLSError},
		{&tls.CertificateVerificationError{Err: x509.HostnameError{}}, TLSError},
		{tls.RecordHeaderError{}, TLSError},
		{apierrors.NewInternalError(errors.New("boom")), Unknown},
		{errors.New("something else"), Unknown},
	} {
		if got := ClassOf(c.err); got != c.want {
			t.Errorf("ClassOf(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
