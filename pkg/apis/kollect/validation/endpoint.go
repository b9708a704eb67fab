package validation

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// lookupTimeout bounds the resolution of an endpoint's host at admission.
const lookupTimeout = 2 * time.Second

// endpointRule says which URLs a sink type accepts as its endpoint.
type endpointRule struct {
	// schemes accepted, such as "https".
	schemes []string
	// example shown in errors, such as "https://git.example.com/repo.git".
	example string
	// requirePort for transports without a default port.
	requirePort bool
}

// parseEndpoint parses a required endpoint URL and checks its scheme and
// that it carries no password. It returns nil when the URL is unusable.
func parseEndpoint(endpoint string, rule endpointRule, fldPath *field.Path) (*url.URL, field.ErrorList) {
	if endpoint == "" {
		return nil, field.ErrorList{field.Required(fldPath, "a URL such as "+rule.example)}
	}
	u, err := url.Parse(endpoint)
	if err != nil || !hasScheme(u, rule.schemes) {
		return nil, field.ErrorList{field.Invalid(fldPath, redact(endpoint, u), "must be a URL such as "+rule.example+" with scheme "+schemeList(rule.schemes))}
	}
	if _, hasPassword := u.User.Password(); hasPassword || (u.Scheme == "http" && u.User != nil) {
		return nil, field.ErrorList{field.Forbidden(fldPath, "must not contain credentials: put credentials in the Secret named by spec.secretRef")}
	}
	return u, nil
}

func hasScheme(u *url.URL, schemes []string) bool {
	for _, s := range schemes {
		if u.Scheme == s {
			return true
		}
	}
	return false
}

// schemeList prints "https://, ssh:// or file://".
func schemeList(schemes []string) string {
	quoted := make([]string, len(schemes))
	for i, s := range schemes {
		quoted[i] = s + "://"
	}
	last := len(quoted) - 1
	if last == 0 {
		return quoted[0]
	}
	return strings.Join(quoted[:last], ", ") + " or " + quoted[last]
}

// redact hides a password from an endpoint echoed in an error.
func redact(endpoint string, u *url.URL) string {
	if u == nil || u.User == nil {
		return endpoint
	}
	return u.Redacted()
}

// validateFileURL checks a file:///absolute/path URL: no host, an absolute
// path without ".." segments.
func validateFileURL(u *url.URL, fldPath *field.Path) field.ErrorList {
	const msg = "must be file:///absolute/path, with no host, query or '..'"
	switch {
	case u.Host != "" || u.User != nil || u.Opaque != "" || u.RawQuery != "" || u.Fragment != "":
		return field.ErrorList{field.Invalid(fldPath, u.String(), msg)}
	case !strings.HasPrefix(u.Path, "/"):
		return field.ErrorList{field.Invalid(fldPath, u.String(), msg)}
	case hasDotDot(u.Path):
		return field.ErrorList{field.Invalid(fldPath, u.String(), msg)}
	}
	return nil
}

// hasDotDot reports whether a slash-separated path has a ".." segment.
func hasDotDot(p string) bool {
	for _, segment := range strings.Split(p, "/") {
		if segment == ".." {
			return true
		}
	}
	return false
}

// validateNetworkURL checks the host and port of a network endpoint, and
// that its address is allowed.
func (o Options) validateNetworkURL(u *url.URL, rule endpointRule, fldPath *field.Path) field.ErrorList {
	if errs := validatePort(u.Port(), rule.requirePort, u, fldPath); len(errs) > 0 {
		return errs
	}
	return o.validateHost(u.Hostname(), fldPath)
}

func validatePort(port string, required bool, u *url.URL, fldPath *field.Path) field.ErrorList {
	if port == "" {
		if required {
			return field.ErrorList{field.Invalid(fldPath, u.Redacted(), "must name a port, as in "+u.Scheme+"://host:4222")}
		}
		return nil
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return field.ErrorList{field.Invalid(fldPath, u.Redacted(), "must have a port between 1 and 65535")}
	}
	return nil
}

// validateHost checks that host is a DNS name or an IP address, and that it
// neither is nor resolves to an address sinks may not reach.
func (o Options) validateHost(host string, fldPath *field.Path) field.ErrorList {
	if !isHostName(host) {
		return field.ErrorList{field.Invalid(fldPath, host, "must name a host: a DNS name or an IP address in standard notation")}
	}
	if o.AllowPrivateSinkEndpoints {
		return nil
	}
	if class, addr := o.forbiddenAddress(host); class != "" {
		return field.ErrorList{field.Forbidden(fldPath, forbiddenAddressMessage(host, class, addr))}
	}
	return nil
}

func forbiddenAddressMessage(host, class, addr string) string {
	target := host
	if addr != host {
		target = fmt.Sprintf("%s (%s)", host, addr)
	}
	return fmt.Sprintf("%s is a %s address: sink endpoints may not reach loopback, private, link-local, shared or cloud metadata addresses unless the server runs with --allow-private-sink-endpoints", target, class)
}

// isHostName accepts IP addresses and DNS names, but not the numeric forms
// some resolvers read as IPv4 addresses (such as "2130706433" or "127.1"):
// no top-level domain is numeric.
func isHostName(host string) bool {
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if len(utilvalidation.IsDNS1123Subdomain(name)) > 0 {
		return false
	}
	tld := name[strings.LastIndex(name, ".")+1:]
	_, numeric := strconv.ParseUint(tld, 0, 64)
	return numeric != nil
}

// forbiddenAddress returns the class and the address of the first address
// host is or resolves to that sinks may not reach, or "" when there is none.
//
// A host that does not resolve here is accepted: admission has no DNS view
// of the exporters' network, so the exporters check the addresses they dial
// again at connection time.
func (o Options) forbiddenAddress(host string) (class, addr string) {
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	switch {
	case name == "localhost" || strings.HasSuffix(name, ".localhost"):
		return "loopback", host
	case name == "metadata" || name == "metadata.google.internal":
		return "cloud metadata", host
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		return ClassifyAddress(ip), ip.String()
	}
	for _, ip := range o.resolve(name) {
		if class := ClassifyAddress(ip); class != "" {
			return class, ip.String()
		}
	}
	return "", ""
}

func (o Options) resolve(host string) []netip.Addr {
	lookup := o.LookupIP
	if lookup == nil {
		lookup = defaultLookupIP
	}
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	ips, err := lookup(ctx, host)
	if err != nil {
		return nil
	}
	addrs := make([]netip.Addr, 0, len(ips))
	for _, ip := range ips {
		if addr, ok := netip.AddrFromSlice(ip); ok {
			addrs = append(addrs, addr.Unmap())
		}
	}
	return addrs
}

func defaultLookupIP(ctx context.Context, host string) ([]net.IP, error) {
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = a.IP
	}
	return ips, nil
}

var (
	metadataAddresses = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack
		netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	}
	sharedAddressSpace = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598, carrier-grade NAT
	thisNetwork        = netip.MustParsePrefix("0.0.0.0/8")     // RFC 1122
	nat64              = netip.MustParsePrefix("64:ff9b::/96")  // RFC 6052
)

// ClassifyAddress names the class of an address sink endpoints may not reach
// unless private endpoints are allowed: "cloud metadata", "unspecified",
// "loopback", "link-local", "private" or "shared (CGNAT)". It returns "" for
// other addresses. IPv4 addresses embedded in IPv6 (mapped or NAT64) are
// classified as the IPv4 address. Exporters use it to check the addresses
// they dial.
func ClassifyAddress(ip netip.Addr) string {
	ip = embeddedIPv4(ip.WithZone(""))
	for _, m := range metadataAddresses {
		if ip == m {
			return "cloud metadata"
		}
	}
	switch {
	case ip.IsUnspecified() || thisNetwork.Contains(ip):
		return "unspecified"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsPrivate():
		return "private"
	case sharedAddressSpace.Contains(ip):
		return "shared (CGNAT)"
	}
	return ""
}

// embeddedIPv4 returns the IPv4 address an IPv4-mapped or NAT64 IPv6
// address stands for, and other addresses unchanged.
func embeddedIPv4(ip netip.Addr) netip.Addr {
	if nat64.Contains(ip) {
		b := ip.As16()
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	return ip.Unmap()
}
