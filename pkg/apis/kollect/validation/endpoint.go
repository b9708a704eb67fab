package validation

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/netguard"
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
	if err := o.forbiddenAddress(host); err != nil {
		return field.ErrorList{field.Forbidden(fldPath, err.Error())}
	}
	return nil
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

// forbiddenAddress returns the refusal (a *netguard.Error) of the first
// address host is or resolves to that sinks may not reach, or nil.
//
// A host that does not resolve here is accepted: it may resolve later, and
// the exporters' dialer checks every address it connects to (netguard), so
// this early check only spares the author a sink that cannot work.
func (o Options) forbiddenAddress(host string) error {
	policy := netguard.Policy{AllowedCIDRs: o.AllowedSinkCIDRs}
	if err := policy.CheckName(host); err != nil {
		return err
	}
	if netguard.ClassifyName(host) == netguard.Loopback {
		// Checked as its loopback addresses above, whatever DNS says.
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return policy.Check(host, ip)
	}
	for _, ip := range o.resolve(host) {
		if err := policy.Check(host, ip); err != nil {
			return err
		}
	}
	return nil
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
