package memberconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
)

// The classes of failure, MemberObservation.errorClass: CamelCase words
// that alerts and users select on, so a new kind of failure gets a new
// class and an existing one is never renamed.
const (
	// KubeconfigInvalid: the kubeconfig does not parse, lacks what it
	// needs, or asks for something the hub refuses (a file on the hub's
	// disk, a proxy, skipping TLS verification, a server that is not
	// https://host).
	KubeconfigInvalid = "KubeconfigInvalid"
	// ExecNotAllowed: the user entry runs an exec or auth-provider plugin
	// and the server does not run with --allow-member-exec.
	ExecNotAllowed = "ExecNotAllowed"
	// EndpointForbidden: the server address is or resolves to an address
	// the endpoint policy forbids (netguard).
	EndpointForbidden = "EndpointForbidden"
	// Unreachable: DNS failed, the connection was refused or timed out.
	Unreachable = "Unreachable"
	// TLSError: the TLS handshake failed (the certificate does not verify,
	// the server does not speak TLS, it sent an alert).
	TLSError = "TLSError"
	// Unauthorized: the member's API server did not accept the
	// credentials (401).
	Unauthorized = "Unauthorized"
	// Forbidden: the member's API server accepted the credentials and
	// refused the request (403).
	Forbidden = "Forbidden"
	// SecretNotFound: the Secret or its key is missing; callers that read
	// the Secret report it, this package never does.
	SecretNotFound = "SecretNotFound"
	// Unknown: any other failure, such as an answer that is not a
	// Kubernetes API server's.
	Unknown = "Unknown"
)

// Error is a classified failure. Message is written by this package and
// never holds a credential (token, password, key) or text the member's
// endpoint sent, so it may go into status as it is.
type Error struct {
	Class   string
	Message string
	// err is the cause, for errors.Is and errors.As; its text is never
	// part of Message.
	err error
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.err }

func invalid(format string, args ...any) *Error {
	return &Error{Class: KubeconfigInvalid, Message: fmt.Sprintf(format, args...)}
}

// ClassOf returns the class of err: the Class of an *Error in its chain,
// else what the errors in it say (a dial the endpoint policy refused, a
// network or TLS failure, a 401 or 403 from the API server). It returns ""
// for nil and Unknown for what it does not recognise.
func ClassOf(err error) string {
	var (
		classified *Error
		refusal    *netguard.Error
	)
	switch {
	case err == nil:
		return ""
	case errors.As(err, &classified):
		return classified.Class
	case errors.As(err, &refusal):
		return EndpointForbidden
	case apierrors.IsUnauthorized(err):
		return Unauthorized
	case apierrors.IsForbidden(err):
		return Forbidden
	}
	switch sink.Classify(err).Outcome {
	case sink.OutcomeDNS, sink.OutcomeRefused, sink.OutcomeTimeout:
		return Unreachable
	case sink.OutcomeTLS:
		return TLSError
	}
	if plainHTTP(err) {
		return TLSError
	}
	// Failures sink.Classify leaves to its sinks: no route, a peer that
	// hung up (a load balancer without backends closes what it accepts),
	// or a dial that failed some other way.
	var op *net.OpError
	if errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || (errors.As(err, &op) && op.Op == "dial") {
		return Unreachable
	}
	return Unknown
}

// classify returns err as an *Error whose message says, in this package's
// words, what went wrong with the request to server: the endpoint's own
// text (a body, a certificate's names) stays out, as it does from a sink's
// probe, so that a member's status cannot be used to read what some other
// service answers.
func classify(err error, server string) *Error {
	var classified *Error
	if errors.As(err, &classified) {
		return classified
	}
	class := ClassOf(err)
	out := &Error{Class: class, err: err}
	var (
		refusal *netguard.Error
		status  apierrors.APIStatus
	)
	switch class {
	case EndpointForbidden:
		// ClassOf says so only for an *Error, returned above, or a refusal.
		errors.As(err, &refusal)
		out.Message = forbiddenMessage(refusal)
	case Unreachable:
		out.Message = fmt.Sprintf("%s did not answer: %s", server, unreachableDetail(err))
	case TLSError:
		out.Message = fmt.Sprintf("TLS with %s failed: %s", server, tlsDetail(err))
	case Unauthorized:
		out.Message = fmt.Sprintf("%s did not accept the kubeconfig's credentials (401 Unauthorized)", server)
	case Forbidden:
		out.Message = fmt.Sprintf("%s refused the kubeconfig's user (403 Forbidden)", server)
	default:
		out.Message = fmt.Sprintf("%s: the request failed", server)
		if errors.As(err, &status) && status.Status().Code != 0 {
			out.Message = fmt.Sprintf("%s answered HTTP %d, not as a Kubernetes API server would", server, status.Status().Code)
		}
	}
	return out
}

// forbiddenMessage is a refusal of the endpoint policy, told for members:
// netguard's own message speaks of sinks. Like a sink's probe, it leaves
// out the address a name resolved to.
func forbiddenMessage(e *netguard.Error) string {
	what := "is"
	if e.Addr.IsValid() && e.Addr.String() != e.Host {
		what = "resolves to"
	}
	return fmt.Sprintf("the member's API server %s %s %s address: members follow the sink endpoint policy, "+
		"so the hub reaches it only if the server runs with --allow-private-sink-endpoints or --allowed-sink-cidrs",
		e.Host, what, article(string(e.Class)))
}

func article(word string) string {
	if word != "" && strings.ContainsRune("aeiou", rune(word[0])) {
		return "an " + word
	}
	return "a " + word
}

func unreachableDetail(err error) string {
	var dns *net.DNSError
	switch {
	case errors.As(err, &dns):
		return "its name does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to it"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "it closed the connection"
	case sink.Classify(err).Outcome == sink.OutcomeTimeout:
		return "timed out"
	}
	return "the connection failed"
}

// plainHTTP reports net/http's refusal of a server that answered the TLS
// handshake in plain HTTP: an error of no type of its own, known by its
// text.
func plainHTTP(err error) bool {
	return strings.Contains(err.Error(), "server gave HTTP response to HTTPS client")
}

func tlsDetail(err error) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		notValid x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	switch {
	case errors.As(err, &unknown):
		return "its certificate is not signed by the kubeconfig's certificate-authority-data"
	case errors.As(err, &hostname):
		return "its certificate is not valid for the server's host name (or tls-server-name)"
	case errors.As(err, &notValid):
		return "its certificate is not valid (expired, not yet valid, or not for serving)"
	case errors.As(err, &header), plainHTTP(err):
		return "it does not speak TLS"
	case errors.As(err, &alert):
		return "it ended the handshake with an alert (does it want a client certificate?)"
	}
	return "the handshake failed"
}

// redactURL is server without user information, query or fragment, for
// messages: RESTConfig refuses those, but Probe takes any rest.Config.
func redactURL(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return "the member's API server"
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment = nil, "", false, ""
	return u.String()
}
