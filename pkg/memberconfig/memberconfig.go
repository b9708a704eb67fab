// Package memberconfig turns a member cluster's kubeconfig, as a
// MemberCluster's Secret holds it, into a client configuration the hub can
// use safely, and probes a member with it.
//
// A kubeconfig is written by whoever registers the member, not by the hub's
// operator, so RESTConfig accepts only what keeps the hub's own resources
// out of reach: credentials inline (never a path on the hub's disk), no
// exec or auth-provider plugin (a command run on the hub) unless the server
// allows them (--allow-member-exec), TLS always verified, no proxy, an
// https:// server; and every connection goes through the server's
// netguard.Dialer, so a member obeys the sink endpoint policy
// (--allow-private-sink-endpoints, --allowed-sink-cidrs).
package memberconfig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/netguard"
)

// resolveTimeout bounds RESTConfig's early check of the server's host when
// Options.Timeout does not.
const resolveTimeout = 10 * time.Second

// Options say how RESTConfig builds a member's client configuration.
type Options struct {
	// Dialer makes every connection to the member (required): the server's
	// sink dialer, so that members follow the sink endpoint policy.
	Dialer *netguard.Dialer
	// AllowExec accepts exec and auth-provider user entries
	// (--allow-member-exec): their commands run on the hub.
	AllowExec bool
	// UserAgent, QPS, Burst and Timeout go to the rest.Config as they are;
	// zero leaves client-go's defaults.
	UserAgent string
	QPS       float32
	Burst     int
	Timeout   time.Duration
}

// RESTConfig returns the client configuration of kubeconfig's current
// context, or an *Error: KubeconfigInvalid, ExecNotAllowed, or
// EndpointForbidden when the server's host is or resolves to an address
// the dialer's policy forbids (checked here, before any connection, and
// again by the dialer on every connection, since DNS answers change). A
// name that does not resolve now is not an error here: the connection
// reports it, as Unreachable.
func RESTConfig(kubeconfig []byte, opts Options) (*rest.Config, error) {
	if opts.Dialer == nil {
		return nil, errors.New("memberconfig: Options.Dialer is required")
	}
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, parseError(err)
	}
	sel, err := current(raw)
	if err != nil {
		return nil, err
	}
	server, err := checkCluster(sel.clusterName, sel.cluster)
	if err != nil {
		return nil, err
	}
	if err := checkUser(sel.userName, sel.user, opts.AllowExec); err != nil {
		return nil, err
	}
	// Only the entries in use: the others are never read, and the checks
	// above covered these.
	pruned := clientcmdapi.NewConfig()
	pruned.CurrentContext = sel.contextName
	pruned.Contexts[sel.contextName] = sel.context
	pruned.Clusters[sel.clusterName] = sel.cluster
	pruned.AuthInfos[sel.userName] = sel.user
	cfg, err := clientcmd.NewNonInteractiveClientConfig(*pruned, sel.contextName, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		// client-go's validation names entries and fields, never values.
		return nil, &Error{Class: KubeconfigInvalid, Message: "the kubeconfig is not usable: " + err.Error(), err: err}
	}
	// A CA, certificate, key or plugin that does not load is the kubeconfig's
	// fault; finding out now keeps it from passing for a TLS failure later.
	if _, err := rest.TLSConfigFor(cfg); err != nil {
		return nil, &Error{Class: KubeconfigInvalid, Message: fmt.Sprintf("context %q: the client configuration does not load: %v", sel.contextName, err), err: err}
	}
	cfg.Dial = opts.Dialer.DialContext
	// Without a Proxy, client-go's transport takes one from HTTPS_PROXY:
	// the dialer would then check the proxy's address, not the member's.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	cfg.UserAgent, cfg.QPS, cfg.Burst, cfg.Timeout = opts.UserAgent, opts.QPS, opts.Burst, opts.Timeout

	timeout := resolveTimeout
	if opts.Timeout > 0 {
		timeout = min(timeout, opts.Timeout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var refusal *netguard.Error
	if _, err := opts.Dialer.Resolve(ctx, server.Hostname()); errors.As(err, &refusal) {
		return nil, &Error{Class: EndpointForbidden, Message: forbiddenMessage(refusal), err: err}
	}
	return cfg, nil
}

// selection is the current context and the entries it names.
type selection struct {
	contextName, clusterName, userName string
	context                            *clientcmdapi.Context
	cluster                            *clientcmdapi.Cluster
	user                               *clientcmdapi.AuthInfo
}

func current(raw *clientcmdapi.Config) (selection, error) {
	s := selection{contextName: raw.CurrentContext}
	if s.contextName == "" {
		return s, invalid("the kubeconfig has no current-context: set it to the context the hub is to use")
	}
	if s.context = raw.Contexts[s.contextName]; s.context == nil {
		return s, invalid("current-context %q is not among the kubeconfig's contexts", s.contextName)
	}
	if s.clusterName = s.context.Cluster; s.clusterName == "" {
		return s, invalid("context %q names no cluster", s.contextName)
	}
	if s.cluster = raw.Clusters[s.clusterName]; s.cluster == nil {
		return s, invalid("context %q names cluster %q, which is not among the kubeconfig's clusters", s.contextName, s.clusterName)
	}
	if s.userName = s.context.AuthInfo; s.userName == "" {
		return s, invalid("context %q names no user", s.contextName)
	}
	if s.user = raw.AuthInfos[s.userName]; s.user == nil {
		return s, invalid("context %q names user %q, which is not among the kubeconfig's users", s.contextName, s.userName)
	}
	return s, nil
}

// checkCluster refuses what would let a member's kubeconfig read the hub's
// files, skip verification or route around the endpoint policy, and
// returns the parsed server URL.
func checkCluster(name string, c *clientcmdapi.Cluster) (*url.URL, error) {
	switch {
	case c.CertificateAuthority != "":
		return nil, invalid("cluster %q sets certificate-authority, a file path: the hub reads no files for a member; put the CA inline in certificate-authority-data", name)
	case c.InsecureSkipTLSVerify:
		return nil, invalid("cluster %q sets insecure-skip-tls-verify: the hub always verifies a member's certificate; put its CA in certificate-authority-data instead", name)
	case c.ProxyURL != "":
		return nil, invalid("cluster %q sets proxy-url: the hub connects to members directly, through its endpoint policy", name)
	case c.Server == "":
		return nil, invalid("cluster %q has no server", name)
	}
	// The server is only quoted once it is known to carry no credentials.
	u, err := url.Parse(c.Server)
	switch {
	case err != nil:
		return nil, invalid("cluster %q: server is not a URL", name)
	case u.User != nil:
		return nil, invalid("cluster %q: server carries user information; credentials belong in the user entry", name)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, invalid("cluster %q: server has a query or fragment; it must be https://host[:port][/path]", name)
	case u.Scheme != "https":
		return nil, invalid("cluster %q: server %q is not an https:// URL", name, c.Server)
	case u.Hostname() == "":
		return nil, invalid("cluster %q: server %q has no host", name, c.Server)
	}
	return u, nil
}

// checkUser refuses plugins unless allowed, and credentials given as paths
// on the hub's disk.
func checkUser(name string, u *clientcmdapi.AuthInfo, allowExec bool) error {
	const flag = ", which the server allows only with --allow-member-exec"
	switch {
	case u.Exec != nil && !allowExec:
		return &Error{Class: ExecNotAllowed, Message: fmt.Sprintf("user %q uses an exec credential plugin: it would run a command on the hub%s", name, flag)}
	case u.AuthProvider != nil && !allowExec:
		return &Error{Class: ExecNotAllowed, Message: fmt.Sprintf("user %q uses the auth-provider plugin %q: it would act on the hub with the kubeconfig's settings (files, identity providers)%s", name, u.AuthProvider.Name, flag)}
	}
	for _, f := range []struct{ field, value, inline string }{
		{"client-certificate", u.ClientCertificate, "client-certificate-data"},
		{"client-key", u.ClientKey, "client-key-data"},
		{"tokenFile", u.TokenFile, "token"},
	} {
		if f.value != "" {
			return invalid("user %q sets %s, a file path: the hub reads no files for a member; put it inline in %s", name, f.field, f.inline)
		}
	}
	return nil
}

var lineNumber = regexp.MustCompile(`\bline (\d+)\b`)

// parseError describes a kubeconfig that does not decode. The decoder's own
// text can quote the input (a YAML map used as a key is printed whole), so
// only the kind of failure and its line are kept, and not the cause.
func parseError(err error) *Error {
	if runtime.IsNotRegisteredError(err) {
		return invalid("the data is not a kubeconfig: apiVersion must be v1 and kind Config")
	}
	text := err.Error()
	msg := "the kubeconfig does not parse as YAML or JSON"
	if strings.Contains(text, "cannot unmarshal") {
		msg = "the kubeconfig does not decode: a field holds a value of the wrong type"
	}
	if m := lineNumber.FindStringSubmatch(text); m != nil {
		msg += " (line " + m[1] + ")"
	}
	return invalid("%s", msg)
}

// Probe asks the member's API server for its version (GET /version) through
// cfg, bounded by ctx, and returns it (such as v1.36.3). Its errors are
// *Errors: Unreachable, TLSError, Unauthorized, Forbidden, EndpointForbidden
// or Unknown. It closes its connections when done: a probe is a one-off.
func Probe(ctx context.Context, cfg *rest.Config) (string, error) {
	server := redactURL(cfg.Host)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return "", &Error{Class: KubeconfigInvalid, Message: fmt.Sprintf("%s: the client configuration is not usable", server), err: err}
	}
	defer utilnet.CloseIdleConnectionsFor(client.Transport)
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, client)
	if err != nil {
		return "", &Error{Class: KubeconfigInvalid, Message: fmt.Sprintf("%s: the client configuration is not usable", server), err: err}
	}
	// Not dc.ServerVersion, which ignores the caller's context; no retries,
	// so that the answer is about this one attempt.
	body, err := dc.RESTClient().Get().AbsPath("/version").MaxRetries(0).Do(ctx).Raw()
	if err != nil {
		return "", classify(err, server)
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil || info.GitVersion == "" {
		return "", &Error{Class: Unknown, Message: fmt.Sprintf("%s answered /version without a Kubernetes version", server)}
	}
	return info.GitVersion, nil
}
