package netguard

import (
	"fmt"
	"net/netip"
	"strings"
)

// Policy says which addresses sinks may reach.
type Policy struct {
	// AllowPrivate allows every address (--allow-private-sink-endpoints).
	AllowPrivate bool
	// AllowedCIDRs are reachable although their addresses are in a
	// forbidden class (--allowed-sink-cidrs): an internal Git server or
	// database a tenant is meant to use.
	AllowedCIDRs []netip.Prefix
}

// Check returns nil when ip may be reached, else an *Error naming host (as
// the endpoint named it), ip and its class.
func (p Policy) Check(host string, ip netip.Addr) error {
	if p.AllowPrivate {
		return nil
	}
	class := Classify(ip)
	if class == "" || p.allowedCIDR(ip) {
		return nil
	}
	return &Error{Host: host, Addr: ip.WithZone(""), Class: class}
}

// allowedCIDR reports whether ip, or the IPv4 address it maps, is in one of
// the allowed prefixes.
func (p Policy) allowedCIDR(ip netip.Addr) bool {
	ip = ip.WithZone("")
	for _, prefix := range p.AllowedCIDRs {
		if prefix.Contains(ip) || prefix.Contains(ip.Unmap()) {
			return true
		}
	}
	return false
}

// CheckName returns an *Error for a host name that stands for a forbidden
// address whatever DNS answers (ClassifyName): localhost names are checked
// as their loopback addresses, so an allowed loopback prefix admits them;
// metadata names only pass with AllowPrivate.
func (p Policy) CheckName(host string) error {
	switch ClassifyName(host) {
	case Loopback:
		for _, ip := range localhostAddrs {
			if err := p.Check(host, ip); err != nil {
				return err
			}
		}
	case Metadata:
		if !p.AllowPrivate {
			return &Error{Host: host, Class: Metadata}
		}
	}
	return nil
}

// localhostAddrs are what a localhost name stands for (RFC 6761 §6.3):
// the resolver is not asked, so no DNS answer can make it something else.
var localhostAddrs = []netip.Addr{netip.IPv6Loopback(), netip.AddrFrom4([4]byte{127, 0, 0, 1})}

// ParseCIDRs parses --allowed-sink-cidrs: prefixes such as 10.20.0.0/16 or
// fd00:1::/64, or single addresses.
func ParseCIDRs(values []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range values {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if prefix, err := netip.ParsePrefix(v); err == nil {
			if prefix != prefix.Masked() {
				return nil, fmt.Errorf("%q has host bits set; did you mean %s?", v, prefix.Masked())
			}
			out = append(out, prefix)
			continue
		}
		ip, err := netip.ParseAddr(v)
		if err != nil || ip.Zone() != "" {
			return nil, fmt.Errorf("%q is not a CIDR prefix such as 10.20.0.0/16 or an IP address", v)
		}
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	return out, nil
}

// Error is a connection the policy refuses. Its message names the flags
// that would allow it.
type Error struct {
	// Host is the host as the endpoint names it: a name, an IP address or,
	// for a local socket, a path.
	Host string
	// Addr is the forbidden address Host is or resolves to; invalid when the
	// name itself is refused (a metadata name) or for a local socket.
	Addr netip.Addr
	// Class is why it is refused.
	Class Class
}

func (e *Error) Error() string {
	if e.resolved() {
		return e.describe(fmt.Sprintf("%s resolves to %s, %s", e.Host, e.Addr, article(e.Class)))
	}
	return e.Summary()
}

// Summary is the message without the address a name resolved to: what
// probes and export status show. The sink's author named the host and
// needs no view of the server's DNS to fix the endpoint.
func (e *Error) Summary() string {
	switch {
	case e.Class == LocalSocket:
		return fmt.Sprintf("%s is a local socket: sinks connect over TCP to network addresses only", e.Host)
	case e.resolved():
		return e.describe(fmt.Sprintf("%s resolves to %s", e.Host, article(e.Class)))
	}
	return e.describe(fmt.Sprintf("%s is %s", e.Host, article(e.Class)))
}

// resolved reports whether Host is a name that resolved to Addr.
func (e *Error) resolved() bool {
	return e.Addr.IsValid() && e.Addr.String() != e.Host
}

func (e *Error) describe(what string) string {
	return what + " address: sinks may not reach loopback, private, link-local, shared, reserved or cloud metadata addresses" +
		" unless the server runs with --allow-private-sink-endpoints or --allowed-sink-cidrs"
}

func article(c Class) string {
	if c != "" && strings.ContainsRune("aeiou", rune(c[0])) {
		return "an " + string(c)
	}
	return "a " + string(c)
}
