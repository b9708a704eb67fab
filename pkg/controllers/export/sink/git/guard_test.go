package git

import (
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

func strictDialer(t *testing.T, allowed ...string) *netguard.Dialer {
	t.Helper()
	cidrs, err := netguard.ParseCIDRs(allowed)
	if err != nil {
		t.Fatal(err)
	}
	d, err := netguard.New(netguard.Config{Policy: netguard.Policy{AllowedCIDRs: cidrs}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func wantRefused(t *testing.T, what string, err error, class netguard.Class) {
	t.Helper()
	c := sink.Classify(err)
	if c == nil || c.Outcome != sink.OutcomeAddressForbidden || c.Refusal.Class != class {
		t.Errorf("%s: %v classified %+v, want AddressForbidden (%s)", what, err, c, class)
	}
}

// Without --allow-private-sink-endpoints neither https:// nor ssh://
// reaches a loopback listener, by probe or by write.
func TestLoopbackRefused(t *testing.T) {
	ctx := testContext(t)
	addr, accepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	key, hostKey := newClientKey(t)
	strict := strictDialer(t)
	for _, spec := range []*v1alpha1.SnapshotSinkSpec{
		{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://" + addr + "/repo.git"},
		{Type: v1alpha1.SnapshotSinkGit, Endpoint: "http://" + addr + "/repo.git"},
		{Type: v1alpha1.SnapshotSinkGit, Endpoint: "ssh://git@" + addr + "/repo.git"},
		{Type: v1alpha1.SnapshotSinkGit, Endpoint: "https://[::ffff:127.0.0.1]:" + port(addr) + "/repo.git"},
		{Type: v1alpha1.SnapshotSinkGit, Endpoint: "ssh://git@localhost:" + port(addr) + "/repo.git"},
	} {
		secret := sink.Secret{"token": []byte(rightToken)}
		if strings.HasPrefix(spec.Endpoint, "ssh") {
			secret = sink.Secret{"ssh-privatekey": key, "known_hosts": knownHostsLine(addr, hostKey)}
		}
		s, err := New(spec, secret, t.TempDir(), strict)
		if err != nil {
			t.Fatalf("%s: New: %v", spec.Endpoint, err)
		}
		wantRefused(t, spec.Endpoint+" probe", s.Probe(ctx), netguard.Loopback)
		_, err = s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")))
		wantRefused(t, spec.Endpoint+" write", err, netguard.Loopback)
		_ = s.Close()
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	if _, err := New(&v1alpha1.SnapshotSinkSpec{Endpoint: "https://" + addr + "/repo.git"}, nil, t.TempDir(), nil); err == nil {
		t.Error("New of a network endpoint without a dialer succeeded")
	}
}

// A redirect from an allowed server is a new connection through the same
// dialer: one to a forbidden address is refused before it is made.
func TestRedirectIsChecked(t *testing.T) {
	ctx := testContext(t)
	target, accepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	var redirects atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		redirects.Add(1)
		http.Redirect(w, r, "http://"+target+r.URL.RequestURI(), http.StatusFound)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	s, err := New(&v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: "http://" + l.Addr().String() + "/repo.git"},
		nil, t.TempDir(), strictDialer(t, "127.0.0.2/32"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	wantRefused(t, "probe", s.Probe(ctx), netguard.Loopback)
	if redirects.Load() == 0 {
		t.Error("the allowed server was not reached: the test proves nothing")
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the redirect target accepted %d connections", n)
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}
