package memberconfig

import (
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/netguard/dnstest"
)

var classes = []string{KubeconfigInvalid, ExecNotAllowed, EndpointForbidden}

// FuzzRESTConfig: whatever the bytes, RESTConfig does not panic; it refuses
// with an *Error of a class it may return and a message without the
// credentials the input holds, or returns a configuration that reaches an
// https:// server through the dialer only, reads no file, skips no
// verification and runs no plugin unless allowed. Names resolve through a
// local DNS server that knows none, so no lookup leaves the machine.
func FuzzRESTConfig(f *testing.F) {
	f.Add(kubeconfig(f, nil), false)
	f.Add(kubeconfig(f, func(c *clientcmdapi.Config) {
		user(c).Token = ""
		user(c).Exec = &clientcmdapi.ExecConfig{Command: "aws", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode,
			Env: []clientcmdapi.ExecEnvVar{{Name: "AWS_SECRET_ACCESS_KEY", Value: "SECRET-env-value-0001"}}}
	}), true)
	for _, r := range refusals() {
		f.Add(r.kubeconfig(f), r.allowExec)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Config","current-context":"x","contexts":[{"name":"x","context":{"cluster":"c","user":"u"}}],`+
		`"clusters":[{"name":"c","cluster":{"server":"https://member.example"}}],"users":[{"name":"u","user":{"password":"SECRET-pw-0002","username":"a"}}]}`), false)
	dns, err := dnstest.Start()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = dns.Close() })
	d := defaultDialer(f, dns.Addr())

	f.Fuzz(func(t *testing.T, data []byte, allowExec bool) {
		cfg, err := RESTConfig(data, Options{Dialer: d, AllowExec: allowExec})
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("%T, not an *Error: %v", err, err)
			}
			if !slices.Contains(classes, e.Class) {
				t.Fatalf("class %q: %v", e.Class, err)
			}
			for _, s := range inputSecrets(data) {
				if strings.Contains(e.Message, s) {
					t.Fatalf("the message holds a credential of the input (%q): %s", s, e.Message)
				}
			}
			return
		}
		u, err := url.Parse(cfg.Host)
		switch {
		case err != nil || u.Scheme != "https" || u.Hostname() == "" || u.User != nil:
			t.Fatalf("host %q", cfg.Host)
		case cfg.Dial == nil || cfg.Proxy == nil:
			t.Fatal("no dial hook or no proxy function")
		case cfg.Insecure || cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != "" || cfg.BearerTokenFile != "":
			t.Fatalf("insecure or reads files: %+v", cfg.TLSClientConfig)
		case !allowExec && (cfg.ExecProvider != nil || cfg.AuthProvider != nil):
			t.Fatal("a plugin although not allowed")
		}
	})
}

// inputSecrets are the credentials of data's users that carry the marker
// SECRET and appear in no name or server the messages may quote: the seeds
// mark theirs, and what the fuzzer derives from them keeps the mark.
func inputSecrets(data []byte) []string {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		// The message of a kubeconfig that does not parse holds nothing of
		// it; look for the marked values in the text.
		var out []string
		for _, field := range strings.FieldsFunc(string(data), func(r rune) bool { return strings.ContainsRune(" \t\r\n\"'{}[],:", r) }) {
			if strings.Contains(field, "SECRET") {
				out = append(out, field)
			}
		}
		return out
	}
	var quotable []string
	for name, c := range cfg.Clusters {
		quotable = append(quotable, name, c.Server)
	}
	for name, kctx := range cfg.Contexts {
		quotable = append(quotable, name, kctx.Cluster, kctx.AuthInfo, kctx.Namespace)
	}
	var values []string
	for name, u := range cfg.AuthInfos {
		quotable = append(quotable, name)
		values = append(values, u.Token, u.Password, string(u.ClientKeyData))
		if u.Exec != nil {
			quotable = append(quotable, u.Exec.Command, u.Exec.APIVersion, string(u.Exec.InteractiveMode))
			for _, e := range u.Exec.Env {
				quotable = append(quotable, e.Name)
				values = append(values, e.Value)
			}
		}
		if u.AuthProvider != nil {
			quotable = append(quotable, u.AuthProvider.Name)
			for _, v := range u.AuthProvider.Config {
				values = append(values, v)
			}
		}
	}
	var out []string
	for _, v := range values {
		if strings.Contains(v, "SECRET") && !quoted(quotable, v) {
			out = append(out, v)
		}
	}
	return out
}

func quoted(quotable []string, v string) bool {
	for _, q := range quotable {
		if strings.Contains(q, v) {
			return true
		}
	}
	return false
}
