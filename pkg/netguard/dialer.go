package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

const (
	// DefaultTimeout bounds one connection attempt when the caller's
	// context has no earlier deadline.
	DefaultTimeout = 30 * time.Second
	// lookupTimeout bounds a resolution when the caller's context has no
	// deadline.
	lookupTimeout = 10 * time.Second
)

// Config is what the server's flags say about sink connections.
type Config struct {
	Policy
	// DNSServer, an ip:port, resolves sink host names instead of the
	// system's resolver (--sink-dns-server). Empty uses the system's.
	DNSServer string
	// Timeout bounds one connection attempt; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Dialer makes the connections of sinks and probes. It is safe for
// concurrent use; one serves the whole server.
type Dialer struct {
	policy   Policy
	resolver *net.Resolver
	dialer   net.Dialer
	timeout  time.Duration
}

// New returns the dialer of cfg.
func New(cfg Config) (*Dialer, error) {
	d := &Dialer{policy: cfg.Policy, resolver: net.DefaultResolver, timeout: cfg.Timeout}
	if d.timeout <= 0 {
		d.timeout = DefaultTimeout
	}
	if cfg.DNSServer != "" {
		server, err := netip.ParseAddrPort(cfg.DNSServer)
		if err != nil || server.Port() == 0 {
			return nil, fmt.Errorf("--sink-dns-server %q is not an ip:port such as 10.96.0.10:53", cfg.DNSServer)
		}
		var direct net.Dialer
		// Go's own resolver, asking only this server (UDP, TCP on
		// truncation); /etc/hosts still answers first, as for the system's.
		d.resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return direct.DialContext(ctx, network, server.String())
		}}
	}
	d.dialer = net.Dialer{
		Timeout:   d.timeout,
		KeepAlive: 30 * time.Second,
		// The last line of defence: whatever address a connection is about
		// to use, the policy sees it. DialContext only ever passes checked
		// IPs, so this refuses nothing unless a caller bypassed it.
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return &Error{Host: address, Class: Unspecified}
			}
			return d.policy.Check(ap.Addr().String(), ap.Addr())
		},
	}
	return d, nil
}

// Policy returns the dialer's policy.
func (d *Dialer) Policy() Policy { return d.policy }

// LookupIP resolves host with the dialer's resolver without checking the
// addresses: admission's hook (validation.Options.LookupIP), which checks
// them itself, so that admission and the dialer agree on what names mean.
func (d *Dialer) LookupIP(ctx context.Context, host string) ([]net.IP, error) {
	addrs, err := d.lookup(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = net.IP(a.AsSlice())
	}
	return ips, nil
}

// Resolve returns the addresses of host (a name or an IP address) once
// every one of them passed the policy. A name with any forbidden address is
// refused whole: a name that mixes internal and public addresses is either
// a mistake or an attempt to get through, and refusing it makes the
// outcome independent of which address a connection would try first.
func (d *Dialer) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if host == "" {
		// Go dials the local system for an empty host.
		return nil, &Error{Host: host, Class: Unspecified}
	}
	if err := d.policy.CheckName(host); err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	switch {
	case ClassifyName(host) == Loopback:
		addrs = localhostAddrs
	default:
		var err error
		if addrs, err = d.lookup(ctx, host); err != nil {
			return nil, err
		}
	}
	for _, a := range addrs {
		if err := d.policy.Check(host, a); err != nil {
			return nil, err
		}
	}
	return addrs, nil
}

// LookupHost is Resolve with the addresses as strings, the form pgx's
// LookupFunc returns.
func (d *Dialer) LookupHost(ctx context.Context, host string) ([]string, error) {
	addrs, err := d.Resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, nil
}

func (d *Dialer) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, lookupTimeout)
		defer cancel()
	}
	addrs, err := d.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

// DialContext connects to address (host:port) over TCP: it resolves host
// once, checks every address, and dials the checked IPs in order until one
// answers. It refuses Unix sockets and other networks.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	case "unix", "unixpacket", "unixgram":
		return nil, &Error{Host: address, Class: LocalSocket}
	default:
		return nil, fmt.Errorf("sinks connect over TCP only, not %q", network)
	}
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := d.port(ctx, network, portText)
	if err != nil {
		return nil, err
	}
	addrs, err := d.Resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		a = a.Unmap()
		if (network == "tcp4" && !a.Is4()) || (network == "tcp6" && a.Is4()) {
			continue
		}
		conn, err := d.dialer.DialContext(ctx, network, netip.AddrPortFrom(a, port).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, &net.DNSError{Err: "no " + network + " addresses", Name: host, IsNotFound: true}
	}
	// The first error is the one of the preferred address; the others
	// stay reachable through errors.Is and errors.As.
	return nil, errors.Join(errs...)
}

func (d *Dialer) port(ctx context.Context, network, text string) (uint16, error) {
	if n, err := strconv.ParseUint(text, 10, 16); err == nil {
		return uint16(n), nil
	}
	n, err := d.resolver.LookupPort(ctx, network, text)
	if err != nil {
		return 0, err
	}
	return uint16(n), nil //nolint:gosec // LookupPort returns 0-65535
}

// Dial is DialContext bounded by the dialer's timeout, for clients whose
// dial hook takes no context (nats.go's CustomDialer).
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
	defer cancel()
	return d.DialContext(ctx, network, address)
}

// Transport returns an HTTP transport that connects only through the
// dialer: no proxy from the environment (a proxy would make the connection
// the policy cannot see), otherwise http.DefaultTransport's settings.
func (d *Dialer) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = d.DialContext
	t.DialTLSContext = nil
	return t
}

type contextKey struct{}

// NewContext returns ctx carrying d, for clients installed process-wide
// that dial on behalf of many sinks (go-git's protocol registry).
func NewContext(ctx context.Context, d *Dialer) context.Context {
	return context.WithValue(ctx, contextKey{}, d)
}

// FromContext returns the Dialer NewContext put in ctx.
func FromContext(ctx context.Context) (*Dialer, bool) {
	d, ok := ctx.Value(contextKey{}).(*Dialer)
	return d, ok && d != nil
}

// ErrNoDialer is the refusal of a connection whose context carries no
// Dialer: a process-wide client fails closed rather than dialing unchecked.
var ErrNoDialer = errors.New("netguard: no sink dialer in the request context")

// ContextTransport returns an HTTP transport for process-wide clients: each
// connection dials through the Dialer in its request's context, and one
// without fails with ErrNoDialer. Per-sink TLS settings can go on clones of
// it (Transport.Clone keeps the dial hook).
func ContextTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialTLSContext = nil
	t.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		d, ok := FromContext(ctx)
		if !ok {
			return nil, ErrNoDialer
		}
		return d.DialContext(ctx, network, address)
	}
	return t
}
