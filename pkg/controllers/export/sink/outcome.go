package sink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"syscall"

	"kollect.dev/kollect/pkg/netguard"
)

// Outcome classifies a probe or a failed connection without disclosing what
// answered (ProbeResult.outcome): a sink's author learns whether the
// endpoint works, not what some other service on that address said.
type Outcome string

// The outcomes of a probe.
const (
	OutcomeSucceeded Outcome = "Succeeded"
	// OutcomeAddressForbidden: the endpoint is or resolves to an address
	// sinks may not reach (netguard).
	OutcomeAddressForbidden Outcome = "AddressForbidden"
	OutcomeDNS              Outcome = "DNS"
	OutcomeRefused          Outcome = "Refused"
	OutcomeTimeout          Outcome = "Timeout"
	OutcomeTLS              Outcome = "TLS"
	OutcomeAuth             Outcome = "Auth"
	OutcomeHTTPStatus       Outcome = "HTTPStatus"
	// OutcomeProtocol: the endpoint answered, but not as the sink expects,
	// or the sink's spec or Secret cannot work.
	OutcomeProtocol        Outcome = "Protocol"
	OutcomeSecretForbidden Outcome = "SecretForbidden"
)

// Classified is the class of a failure. Sinks put it in the chain of the
// errors they return (their scrubbed errors do not unwrap to the raw
// ones), and the exporter finds it with errors.As.
type Classified struct {
	Outcome Outcome
	// HTTPStatus is the answer's status code, for OutcomeHTTPStatus.
	HTTPStatus int
	// Refusal is the dialer's refusal, for OutcomeAddressForbidden.
	Refusal *netguard.Error
	// Detail is a short phrase of ours, never text the endpoint sent,
	// such as "stream \"events\" not found".
	Detail string
}

func (c *Classified) Error() string {
	if c.Detail != "" {
		return string(c.Outcome) + ": " + c.Detail
	}
	return string(c.Outcome)
}

// Classify returns the class of err: a *Classified in its chain when a
// sink marked it, else what the network errors in it say. It returns nil
// for nil.
func Classify(err error) *Classified {
	var (
		marked  *Classified
		refusal *netguard.Error
		dns     *net.DNSError
		netErr  net.Error
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &refusal):
		// Before a sink's own mark: a refusal is what happened, whatever
		// the sink made of the failure.
		return &Classified{Outcome: OutcomeAddressForbidden, Refusal: refusal}
	case errors.As(err, &marked):
		return marked
	case errors.As(err, &dns):
		return &Classified{Outcome: OutcomeDNS}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &Classified{Outcome: OutcomeRefused}
	case badTLS(err):
		return &Classified{Outcome: OutcomeTLS}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ETIMEDOUT) ||
		(errors.As(err, &netErr) && netErr.Timeout()):
		return &Classified{Outcome: OutcomeTimeout}
	}
	return &Classified{Outcome: OutcomeProtocol}
}

// badTLS reports a failed TLS handshake: a certificate that does not
// verify, an alert, or an answer that is not TLS at all.
func badTLS(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		header   tls.RecordHeaderError
		alert    tls.AlertError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &invalid) || errors.As(err, &header) || errors.As(err, &alert)
}

// WithOutcome returns scrubbed, the error a sink returns in place of raw,
// carrying raw's class (Classify) for errors.As. It does not unwrap to raw.
func WithOutcome(scrubbed, raw error) error {
	if scrubbed == nil {
		return nil
	}
	return &classifiedError{err: scrubbed, class: Classify(raw)}
}

type classifiedError struct {
	err   error
	class *Classified
}

func (e *classifiedError) Error() string   { return e.err.Error() }
func (e *classifiedError) Unwrap() []error { return []error{e.err, e.class} }
