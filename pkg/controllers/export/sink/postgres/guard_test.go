package postgres

import (
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

// loopbackDialer allows the test server's loopback address, as
// --allow-private-sink-endpoints does.
var loopbackDialer, _ = netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})

func dialerAllowing(t *testing.T, cidrs ...string) *netguard.Dialer {
	t.Helper()
	prefixes, err := netguard.ParseCIDRs(cidrs)
	if err != nil {
		t.Fatal(err)
	}
	d, err := netguard.New(netguard.Config{Policy: netguard.Policy{AllowedCIDRs: prefixes}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Without --allow-private-sink-endpoints no trick of the connection string
// reaches a loopback listener or a Unix socket, and the errors say why.
func TestConnectionStringTricks(t *testing.T) {
	loop, loopAccepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	_, loopPort, _ := net.SplitHostPort(loop)
	allowed, allowedAccepted := netguardtest.Listen(t, "tcp", "127.0.0.2:0")
	_, allowedPort, _ := net.SplitHostPort(allowed)
	dir := t.TempDir()
	_, socketAccepted := netguardtest.Listen(t, "unix", filepath.Join(dir, ".s.PGSQL.5432"))
	strict := dialerAllowing(t, "127.0.0.2/32")

	type want struct {
		outcome sink.Outcome
		text    string // in the error; the refusals also name the flag
	}
	refused := want{sink.OutcomeAddressForbidden, "--allow-private-sink-endpoints"}
	for name, tc := range map[string]struct {
		dsn  string
		want want
	}{
		"url host":             {"postgres://u@127.0.0.1:" + loopPort + "/test?sslmode=disable&connect_timeout=2", refused},
		"keyword host":         {"host=127.0.0.1 port=" + loopPort + " dbname=test user=u sslmode=disable connect_timeout=2", refused},
		"localhost":            {"host=localhost port=" + loopPort + " user=u sslmode=disable connect_timeout=2", refused},
		"ipv4-mapped host":     {"host=::ffff:127.0.0.1 port=" + loopPort + " user=u sslmode=disable connect_timeout=2", refused},
		"host query parameter": {"postgres://u@127.0.0.2:" + allowedPort + "/test?host=127.0.0.1&port=" + loopPort + "&sslmode=disable&connect_timeout=2", refused},
		"fallback host": {"host=127.0.0.2,127.0.0.1 port=" + allowedPort + "," + loopPort +
			" user=u sslmode=disable connect_timeout=2 target_session_attrs=read-write", refused},
		"prefer falls back": {"host=127.0.0.1 port=" + loopPort + " user=u sslmode=prefer connect_timeout=2", refused},
		"unix socket":       {"host=" + dir + " user=u sslmode=disable", want{sink.OutcomeAddressForbidden, "local socket"}},
		"unix socket url":   {"postgres:///test?host=" + dir + "&user=u", want{sink.OutcomeAddressForbidden, "local socket"}},
		"hostaddr":          {"host=db.example.com hostaddr=127.0.0.1 port=" + loopPort + " user=u", want{sink.OutcomeProtocol, "sets hostaddr"}},
		"passfile":          {"host=127.0.0.2 port=" + allowedPort + " user=u passfile=/etc/passwd", want{sink.OutcomeProtocol, "sets passfile"}},
		"servicefile":       {"host=127.0.0.2 servicefile=/etc/passwd service=x", want{sink.OutcomeProtocol, "sets service"}},
		"sslkey":            {"postgres://u@127.0.0.2:" + allowedPort + "/test?sslkey=/etc/shadow&sslcert=/etc/passwd", want{sink.OutcomeProtocol, "sets ssl"}},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := testContext(t)
			spec := &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres}
			s, err := New(ctx, spec, sink.Secret{"dsn": []byte(tc.dsn)}, strict)
			if err == nil {
				err = s.Probe(ctx)
				_ = s.Close()
			}
			c := sink.Classify(err)
			if err == nil || c.Outcome != tc.want.outcome || !strings.Contains(err.Error(), tc.want.text) {
				t.Errorf("got %v (%+v), want %s naming %q", err, c, tc.want.outcome, tc.want.text)
			}
		})
	}
	if n := loopAccepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	if n := socketAccepted.Load(); n != 0 {
		t.Errorf("the Unix socket accepted %d connections", n)
	}
	// The fallback case proves the allowed host was tried first.
	if allowedAccepted.Load() == 0 {
		t.Error("the allowed listener was never reached: the fallback case proves nothing")
	}
}

// With the test server's address allowed, the same dialer connects: the
// guard does not break what it allows.
func TestAllowedCIDRConnects(t *testing.T) {
	ctx := testContext(t)
	cfg := testDSN()
	s, err := New(ctx, &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres}, sink.Secret{"dsn": []byte(cfg)},
		dialerAllowing(t, "127.0.0.1/32", "::1/128"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe through an allowed prefix: %v", err)
	}
	if _, err := New(ctx, &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres}, sink.Secret{"dsn": []byte(cfg)}, nil); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("New without a dialer: %v, want a permanent error", err)
	}
}
