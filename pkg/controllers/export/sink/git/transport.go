package git

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"golang.org/x/net/proxy"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
)

// go-git picks a transport from a process-wide registry by the URL's
// scheme, and has no per-call option for how to connect. So the registry
// gets, once, transports that connect through the dialer of the sink
// making the call:
//
//   - https:// and http:// use an HTTP client whose transport dials through
//     the netguard.Dialer in each request's context (dialContext) and fails
//     closed without one. go-git follows redirects of the first request
//     only, as git does; every hop is a new connection through the same
//     dialer, so a redirect cannot lead past the policy. go-git clones this
//     transport for a sink's tls settings, and the clone keeps the dial hook.
//   - ssh:// connections go through golang.org/x/net/proxy, the only dial
//     hook go-git's ssh transport has: the sink passes a proxy URL of the
//     sshDialScheme naming its dialer, and the dialer makes the connection.
//
// Both run in init, before anything can read the registries (neither
// locks).
func init() {
	c := githttp.NewClient(&http.Client{Transport: netguard.ContextTransport()})
	client.InstallProtocol("https", c)
	client.InstallProtocol("http", c)
	proxy.RegisterDialerType(sshDialScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		if d := sshDialerByID(u.Host); d != nil {
			return d, nil
		}
		return nil, netguard.ErrNoDialer
	})
}

// dialContext returns ctx carrying the sink's dialer for the http(s)
// transport.
func (s *Sink) dialContext(ctx context.Context) context.Context {
	if s.dialer == nil {
		return ctx
	}
	return netguard.NewContext(ctx, s.dialer)
}

// sshDialScheme is the proxy scheme that stands for a netguard.Dialer.
const sshDialScheme = "kollect-netguard"

var sshDialers struct {
	sync.Mutex
	ids   map[*netguard.Dialer]string
	byID  map[string]*netguard.Dialer
	count int
}

// sshProxy returns the proxy options that make go-git's ssh transport
// connect through d. A server has one dialer, so the registry stays tiny.
func sshProxy(d *netguard.Dialer) transport.ProxyOptions {
	sshDialers.Lock()
	defer sshDialers.Unlock()
	id, ok := sshDialers.ids[d]
	if !ok {
		if sshDialers.ids == nil {
			sshDialers.ids, sshDialers.byID = map[*netguard.Dialer]string{}, map[string]*netguard.Dialer{}
		}
		sshDialers.count++
		id = "dialer-" + strconv.Itoa(sshDialers.count)
		sshDialers.ids[d], sshDialers.byID[id] = id, d
	}
	return transport.ProxyOptions{URL: sshDialScheme + "://" + id}
}

func sshDialerByID(id string) *netguard.Dialer {
	sshDialers.Lock()
	defer sshDialers.Unlock()
	return sshDialers.byID[id]
}

// classify is the class of a failed git operation: go-git's and ssh's
// answers about credentials and host keys, else what the network said.
// msg is err's scrubbed message.
func classify(err error, msg string) *sink.Classified {
	var refusal *netguard.Error
	switch {
	case errors.As(err, &refusal):
		return sink.Classify(err)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		errors.Is(err, transport.ErrInvalidAuthMethod), strings.Contains(msg, "ssh: unable to authenticate"):
		return &sink.Classified{Outcome: sink.OutcomeAuth}
	case strings.Contains(msg, "knownhosts: key"):
		return &sink.Classified{Outcome: sink.OutcomeTLS, Detail: "the server's ssh host key does not match known_hosts"}
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return &sink.Classified{Outcome: sink.OutcomeProtocol, Detail: "repository not found"}
	}
	var status *githttp.Err
	if errors.As(err, &status) && status.Response != nil {
		return &sink.Classified{Outcome: sink.OutcomeHTTPStatus, HTTPStatus: status.Response.StatusCode}
	}
	return sink.Classify(err)
}
