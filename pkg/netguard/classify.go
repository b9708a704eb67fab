// Package netguard decides and makes the outbound connections of sinks and
// their probes: every connection resolves the endpoint's host once,
// classifies every address the name resolves to, and dials only a checked
// IP, so a DNS answer that changes between the check and the dial
// (rebinding) cannot reach an address the policy forbids.
//
// Admission checks endpoints early with the same policy and resolver
// (validation.Options); the check at dial time is the authoritative one,
// because what a name resolves to can change after admission.
package netguard

import (
	"net/netip"
	"strings"
)

// Class names a kind of address sinks may not reach unless the server
// allows it (--allow-private-sink-endpoints, --allowed-sink-cidrs).
type Class string

// The classes of forbidden addresses.
const (
	Loopback    Class = "loopback"
	Private     Class = "private"
	LinkLocal   Class = "link-local"
	Metadata    Class = "cloud metadata"
	Unspecified Class = "unspecified"
	Shared      Class = "shared (CGNAT)"
	Multicast   Class = "multicast"
	Broadcast   Class = "broadcast"
	Reserved    Class = "reserved"
	// LocalSocket is a Unix domain socket: a path on the server's own
	// file system, never a sink endpoint.
	LocalSocket Class = "local socket"
)

var (
	// metadataAddresses answer cloud instance metadata (credentials, user
	// data) to anything running on the node.
	metadataAddresses = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack, DigitalOcean
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
		netip.MustParseAddr("168.63.129.16"),   // Azure WireServer, a public address served by the host
		netip.MustParseAddr("192.0.0.192"),     // Oracle Cloud
	}
	// metadataNames resolve to a metadata address inside a cloud; outside
	// one they may resolve to anything.
	metadataNames = []string{"metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal"}

	thisNetwork  = netip.MustParsePrefix("0.0.0.0/8")      // RFC 1122: "this host on this network"
	shared       = netip.MustParsePrefix("100.64.0.0/10")  // RFC 6598, carrier-grade NAT
	broadcast    = netip.MustParseAddr("255.255.255.255")  // limited broadcast
	nat64        = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052 well-known prefix: the IPv4 address is the last 32 bits
	nat64Local   = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215 local-use prefix: the operator's own translators
	ipv4Compat   = netip.MustParsePrefix("::/96")          // deprecated IPv4-compatible addresses
	sixToFour    = netip.MustParsePrefix("2002::/16")      // RFC 3056: the IPv4 address is bits 16-47
	teredo       = netip.MustParsePrefix("2001::/32")      // RFC 4380: the client's IPv4 address, inverted, is the last 32 bits
	siteLocal    = netip.MustParsePrefix("fec0::/10")      // deprecated site-local, private in practice
	reservedNets = []netip.Prefix{
		netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments (DS-Lite, NAT64 discovery)
		netip.MustParsePrefix("198.18.0.0/15"), // benchmarking, used inside some networks
		netip.MustParsePrefix("240.0.0.0/4"),   // reserved for future use
		netip.MustParsePrefix("100::/64"),      // discard-only
	}
)

// Classify returns the class of an address sinks may not reach by
// default, or "" for an address they may. IPv4 addresses embedded in IPv6
// (mapped, NAT64, 6to4, Teredo) are classified as the IPv4 address, since
// that is where a connection ends up.
func Classify(ip netip.Addr) Class {
	ip = ip.WithZone("")
	if !ip.IsValid() {
		return Unspecified
	}
	if ip.Is4In6() {
		return classify4(ip.Unmap())
	}
	if ip.Is4() {
		return classify4(ip)
	}
	b := ip.As16()
	switch {
	case ip.IsUnspecified():
		return Unspecified
	case ip.IsLoopback():
		return Loopback
	case nat64.Contains(ip):
		return classify4(netip.AddrFrom4([4]byte(b[12:16])))
	case nat64Local.Contains(ip):
		return Private
	case ipv4Compat.Contains(ip):
		return Reserved
	case sixToFour.Contains(ip):
		return classify4(netip.AddrFrom4([4]byte(b[2:6])))
	case teredo.Contains(ip):
		return classify4(netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
	}
	return classifyOther(ip)
}

func classify4(ip netip.Addr) Class {
	switch {
	case isMetadata(ip):
		return Metadata
	case thisNetwork.Contains(ip):
		return Unspecified
	case ip == broadcast:
		return Broadcast
	case shared.Contains(ip):
		return Shared
	}
	return classifyOther(ip)
}

func isMetadata(ip netip.Addr) bool {
	for _, m := range metadataAddresses {
		if ip == m {
			return true
		}
	}
	return false
}

// classifyOther holds the checks IPv4 and IPv6 share.
func classifyOther(ip netip.Addr) Class {
	switch {
	case isMetadata(ip):
		return Metadata
	case ip.IsLoopback():
		return Loopback
	case ip.IsLinkLocalUnicast():
		return LinkLocal
	case ip.IsPrivate() || siteLocal.Contains(ip):
		return Private
	case ip.IsMulticast():
		return Multicast
	}
	for _, p := range reservedNets {
		if p.Contains(ip) {
			return Reserved
		}
	}
	return ""
}

// ClassifyName returns the class of a host name that stands for a
// forbidden address whatever DNS answers: localhost names (RFC 6761) and
// the cloud metadata names. It returns "" for other names.
func ClassifyName(host string) Class {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return Loopback
	}
	for _, m := range metadataNames {
		if name == m {
			return Metadata
		}
	}
	return ""
}
