package netguard_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/dnstest"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

func TestClassify(t *testing.T) {
	for addr, want := range map[string]netguard.Class{
		// Loopback, every spelling.
		"127.0.0.1":        netguard.Loopback,
		"127.255.255.254":  netguard.Loopback,
		"::1":              netguard.Loopback,
		"::ffff:127.0.0.1": netguard.Loopback,
		"64:ff9b::7f00:1":  netguard.Loopback, // NAT64 of 127.0.0.1
		"2002:7f00:1::1":   netguard.Loopback, // 6to4 of 127.0.0.1
		// Teredo: the client address is the last 32 bits, inverted.
		"2001:0:4136:e378:8000:63bf:80ff:fffe": netguard.Loopback,
		// Unspecified and "this network".
		"0.0.0.0":        netguard.Unspecified,
		"0.1.2.3":        netguard.Unspecified,
		"::":             netguard.Unspecified,
		"::ffff:0.0.0.0": netguard.Unspecified,
		// Private, ULA, site-local, local-use NAT64.
		"10.0.0.1":         netguard.Private,
		"172.16.5.4":       netguard.Private,
		"192.168.1.1":      netguard.Private,
		"::ffff:10.1.2.3":  netguard.Private,
		"fc00::1":          netguard.Private,
		"fd12:3456::1":     netguard.Private,
		"fec0::1":          netguard.Private,
		"64:ff9b:1::a00:1": netguard.Private,
		"64:ff9b::a00:1":   netguard.Private, // NAT64 of 10.0.0.1
		// Link-local.
		"169.254.1.1": netguard.LinkLocal,
		"fe80::1":     netguard.LinkLocal,
		"fe80::1%lo":  netguard.LinkLocal,
		// Cloud metadata, also mapped and translated.
		"169.254.169.254":        netguard.Metadata,
		"::ffff:169.254.169.254": netguard.Metadata,
		"64:ff9b::a9fe:a9fe":     netguard.Metadata,
		"fd00:ec2::254":          netguard.Metadata,
		"100.100.100.200":        netguard.Metadata,
		"168.63.129.16":          netguard.Metadata,
		"192.0.0.192":            netguard.Metadata,
		// Shared address space (CGNAT).
		"100.64.0.1":      netguard.Shared,
		"100.127.255.254": netguard.Shared,
		// Multicast, broadcast, reserved.
		"224.0.0.1":       netguard.Multicast,
		"ff02::1":         netguard.Multicast,
		"255.255.255.255": netguard.Broadcast,
		"240.0.0.1":       netguard.Reserved,
		"198.18.0.1":      netguard.Reserved,
		"192.0.0.8":       netguard.Reserved,
		"::7f00:1":        netguard.Reserved, // IPv4-compatible, deprecated
		"100::1":          netguard.Reserved,
		// Public addresses, documentation ranges included (never routed,
		// and what examples use).
		"1.1.1.1":              "",
		"8.8.8.8":              "",
		"100.128.0.1":          "",
		"172.32.0.1":           "",
		"203.0.113.10":         "",
		"2001:db8::10":         "",
		"2606:4700:4700::1111": "",
		"::ffff:8.8.8.8":       "",
		"64:ff9b::808:808":     "",
		"2002:808:808::1":      "",
	} {
		if got := netguard.Classify(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Classify(%s) = %q, want %q", addr, got, want)
		}
	}
}

func TestClassifyName(t *testing.T) {
	for name, want := range map[string]netguard.Class{
		"localhost": netguard.Loopback, "LOCALHOST.": netguard.Loopback, "a.localhost": netguard.Loopback,
		"metadata": netguard.Metadata, "metadata.google.internal.": netguard.Metadata, "instance-data": netguard.Metadata,
		"example.com": "", "localhost.example.com": "", "metadata.example.com": "",
	} {
		if got := netguard.ClassifyName(name); got != want {
			t.Errorf("ClassifyName(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestPolicy(t *testing.T) {
	cidrs, err := netguard.ParseCIDRs([]string{"10.20.0.0/16", " 127.0.0.2", "fd00:1::/64", ""})
	if err != nil {
		t.Fatal(err)
	}
	p := netguard.Policy{AllowedCIDRs: cidrs}
	for addr, allowed := range map[string]bool{
		"10.20.3.4": true, "::ffff:10.20.3.4": true, "127.0.0.2": true, "fd00:1::5": true, "8.8.8.8": true,
		"10.21.0.1": false, "127.0.0.1": false, "fd00:2::5": false, "169.254.169.254": false,
		// A translated address is not the address it translates.
		"64:ff9b::7f00:2": false,
	} {
		err := p.Check("h", netip.MustParseAddr(addr))
		if (err == nil) != allowed {
			t.Errorf("Check(%s) = %v, want allowed %v", addr, err, allowed)
		}
		var refusal *netguard.Error
		if err != nil && (!errors.As(err, &refusal) || refusal.Addr.String() != addr) {
			t.Errorf("Check(%s) = %#v, want an *Error with the address", addr, err)
		}
	}
	if err := (netguard.Policy{AllowPrivate: true}).Check("h", netip.MustParseAddr("169.254.169.254")); err != nil {
		t.Errorf("AllowPrivate refused: %v", err)
	}

	// Names: localhost is its loopback addresses, metadata names pass only
	// with AllowPrivate.
	if err := p.CheckName("localhost"); err == nil {
		t.Error("CheckName(localhost) allowed")
	}
	loop := netguard.Policy{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	if err := loop.CheckName("localhost"); err != nil {
		t.Errorf("CheckName(localhost) with loopback allowed: %v", err)
	}
	if err := loop.CheckName("metadata.google.internal"); err == nil {
		t.Error("CheckName(metadata.google.internal) allowed")
	}
	if err := (netguard.Policy{AllowPrivate: true}).CheckName("metadata"); err != nil {
		t.Errorf("CheckName(metadata) with AllowPrivate: %v", err)
	}

	for _, bad := range []string{"10.0.0.1/8", "10.0.0.0/33", "example.com", "fe80::1%eth0"} {
		if _, err := netguard.ParseCIDRs([]string{bad}); err == nil {
			t.Errorf("ParseCIDRs(%q) succeeded", bad)
		}
	}
}

func TestErrorMessages(t *testing.T) {
	e := &netguard.Error{Host: "db.example.com", Addr: netip.MustParseAddr("10.0.0.1"), Class: netguard.Private}
	if got := e.Error(); !strings.HasPrefix(got, "db.example.com resolves to 10.0.0.1, a private address: ") ||
		!strings.Contains(got, "--allow-private-sink-endpoints") || !strings.Contains(got, "--allowed-sink-cidrs") {
		t.Errorf("Error() = %q", got)
	}
	if got := e.Summary(); strings.Contains(got, "10.0.0.1") || !strings.HasPrefix(got, "db.example.com resolves to a private address: ") {
		t.Errorf("Summary() = %q", got)
	}
	lit := &netguard.Error{Host: "0.0.0.0", Addr: netip.MustParseAddr("0.0.0.0"), Class: netguard.Unspecified}
	if got := lit.Error(); !strings.HasPrefix(got, "0.0.0.0 is an unspecified address: ") {
		t.Errorf("Error() = %q", got)
	}
	sock := &netguard.Error{Host: "/run/postgresql", Class: netguard.LocalSocket}
	if got := sock.Error(); got != "/run/postgresql is a local socket: sinks connect over TCP to network addresses only" {
		t.Errorf("Error() = %q", got)
	}
}

func newDialer(t *testing.T, cfg netguard.Config) *netguard.Dialer {
	t.Helper()
	d, err := netguard.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The dialer resolves once, refuses a name with any forbidden address,
// and connects only to checked IPs: a name that changes its answer between
// admission and the connection (rebinding) reaches nothing forbidden.
func TestDialer(t *testing.T) {
	ctx := ctxT(t)
	dns, err := dnstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dns.Close() }()
	loop, loopAccepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(loop)
	allowed, allowedAccepted := netguardtest.Listen(t, "tcp", "127.0.0.2:"+port)
	d := newDialer(t, netguard.Config{Policy: netguard.Policy{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}}, DNSServer: dns.Addr()})

	dns.Set("public.test", "127.0.0.2")
	dns.Set("private.test", "127.0.0.1")
	dns.Set("mixed.test", "127.0.0.2", "::1")
	dns.Sequence("rebind.test", []string{"127.0.0.2"}, []string{"127.0.0.1"})
	dns.Sequence("late.test") // unknown until the test sets it

	// What admission sees (LookupIP does not check).
	if ips, err := d.LookupIP(ctx, "rebind.test"); err != nil || len(ips) != 1 || !ips[0].Equal(net.IPv4(127, 0, 0, 2)) {
		t.Fatalf("LookupIP(rebind.test) = %v, %v", ips, err)
	}
	if _, err := d.LookupIP(ctx, "late.test"); err == nil {
		t.Fatal("late.test resolved")
	}
	dns.Set("late.test", "127.0.0.1")

	for _, tc := range []struct {
		host  string
		class netguard.Class
	}{
		{"private.test", netguard.Loopback},
		{"rebind.test", netguard.Loopback},
		{"late.test", netguard.Loopback},
		{"mixed.test", netguard.Loopback},
		{"localhost", netguard.Loopback},
		{"127.0.0.1", netguard.Loopback},
		{"::ffff:127.0.0.1", netguard.Loopback},
		{"0.0.0.0", netguard.Unspecified},
		{"::", netguard.Unspecified},
		{"", netguard.Unspecified},
		{"metadata.google.internal", netguard.Metadata},
	} {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(tc.host, port))
		var refusal *netguard.Error
		if !errors.As(err, &refusal) || refusal.Class != tc.class || refusal.Host != tc.host {
			t.Errorf("DialContext(%q) = %v, %v; want a %s refusal", tc.host, conn, err, tc.class)
		}
		if conn != nil {
			_ = conn.Close()
		}
	}
	if _, err := d.DialContext(ctx, "unix", "/run/postgresql/.s.PGSQL.5432"); !isClass(err, netguard.LocalSocket) {
		t.Errorf("unix socket: %v", err)
	}
	if _, err := d.DialContext(ctx, "udp", "public.test:53"); err == nil {
		t.Error("udp dial succeeded")
	}
	if n := loopAccepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	if n := allowedAccepted.Load(); n != 0 {
		t.Errorf("the allowed listener accepted %d connections from refused names (mixed.test)", n)
	}

	// The allowed address is reached, by name, literal, and through the
	// pgx lookup hook; the name is looked up once per dial.
	for _, host := range []string{"public.test", "127.0.0.2", "::ffff:127.0.0.2"} {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Fatalf("DialContext(%s): %v", host, err)
		}
		_ = conn.Close()
	}
	if got := dns.Queries("public.test"); got != 1 {
		t.Errorf("public.test was looked up %d times for one dial", got)
	}
	if addrs, err := d.LookupHost(ctx, "public.test"); err != nil || len(addrs) != 1 || addrs[0] != "127.0.0.2" {
		t.Errorf("LookupHost(public.test) = %v, %v", addrs, err)
	}
	if _, err := d.LookupHost(ctx, "private.test"); !isClass(err, netguard.Loopback) {
		t.Errorf("LookupHost(private.test) = %v", err)
	}
	waitFor(t, func() bool { return allowedAccepted.Load() == 3 })
	_ = allowed

	// An unknown name is a DNS error, not a refusal.
	var dnsErr *net.DNSError
	if _, err := d.DialContext(ctx, "tcp", "unknown.test:80"); !errors.As(err, &dnsErr) {
		t.Errorf("unknown name: %v, want a *net.DNSError", err)
	}
}

// AllowPrivate allows everything, and still dials what it resolved.
func TestAllowPrivate(t *testing.T) {
	ctx := ctxT(t)
	dns, err := dnstest.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dns.Close() }()
	loop, accepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(loop)
	d := newDialer(t, netguard.Config{Policy: netguard.Policy{AllowPrivate: true}, DNSServer: dns.Addr()})
	dns.Set("private.test", "127.0.0.1")
	for _, host := range []string{"private.test", "127.0.0.1", "localhost"} {
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err != nil {
			t.Fatalf("DialContext(%s): %v", host, err)
		}
		_ = conn.Close()
	}
	waitFor(t, func() bool { return accepted.Load() == 3 })
	if _, err := d.DialContext(ctx, "unix", "/tmp/x.sock"); !isClass(err, netguard.LocalSocket) {
		t.Errorf("unix socket with AllowPrivate: %v", err)
	}
}

// The HTTP transports dial through the dialer and take no proxy from the
// environment; the context transport refuses without a dialer.
func TestTransports(t *testing.T) {
	ctx := ctxT(t)
	var hits atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) })}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer func() { _ = srv.Close() }()
	t.Setenv("HTTP_PROXY", "http://"+l.Addr().String())
	t.Setenv("HTTPS_PROXY", "http://"+l.Addr().String())
	url := "http://" + l.Addr().String() + "/"

	get := func(c *http.Client, ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return err
	}
	strict := newDialer(t, netguard.Config{})
	if err := get(&http.Client{Transport: strict.Transport()}, ctx); !isClass(err, netguard.Loopback) {
		t.Errorf("Transport: %v", err)
	}
	ct := &http.Client{Transport: netguard.ContextTransport()}
	if err := get(ct, ctx); !errors.Is(err, netguard.ErrNoDialer) {
		t.Errorf("ContextTransport without a dialer: %v", err)
	}
	if err := get(ct, netguard.NewContext(ctx, strict)); !isClass(err, netguard.Loopback) {
		t.Errorf("ContextTransport with a strict dialer: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the server got %d requests", n)
	}
	lenient := newDialer(t, netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})
	if err := get(ct, netguard.NewContext(ctx, lenient)); err != nil || hits.Load() != 1 {
		t.Errorf("ContextTransport with a lenient dialer: %v, %d requests", err, hits.Load())
	}
}

func TestNewRejectsDNSServer(t *testing.T) {
	for _, bad := range []string{"dns.example.com:53", "10.0.0.1", "10.0.0.1:0", "[::1]"} {
		if _, err := netguard.New(netguard.Config{DNSServer: bad}); err == nil || !strings.Contains(err.Error(), "--sink-dns-server") {
			t.Errorf("New(DNSServer %q) = %v", bad, err)
		}
	}
}

func isClass(err error, class netguard.Class) bool {
	var refusal *netguard.Error
	return errors.As(err, &refusal) && refusal.Class == class
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
