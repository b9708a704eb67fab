// Package webhook is the webhook EventSink: it POSTs each CloudEvent the
// exporter builds (structured JSON mode) to an HTTPS endpoint, one request
// per event, in order, retrying what a retry can fix.
//
// A delivery is signed with HMAC-SHA256 of the body when the Secret has an
// hmacKey, and carries a bearer token when it has a token. Redirects are
// not followed: a signed body and a bearer token must not be replayed to
// wherever a 3xx points, and a redirect must not lead past the address
// policy. Every connection goes through the server's netguard.Dialer, never
// through a proxy from the environment.
package webhook

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/netguard"
)

const (
	// ContentType of every delivery: a structured-mode CloudEvent.
	ContentType = "application/cloudevents+json; charset=utf-8"
	// DefaultSignatureHeader carries "sha256=<hex HMAC-SHA256 of the body>".
	DefaultSignatureHeader = "X-Kollect-Signature"
	// DefaultTimeout of one delivery attempt.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxAttempts per event.
	DefaultMaxAttempts = 5
	// RequestOrigin is sent as WebHook-Request-Origin by Probe.
	RequestOrigin = "kollect.dev"

	maxTimeout     = time.Minute
	maxMaxAttempts = 20
	// A receiver's error text helps debugging; more is noise.
	maxBodyInError = 200
)

// Sink delivers change events to one webhook endpoint. It is safe for
// concurrent use, though the exporter calls Publish for one inventory at a
// time to keep the order.
type Sink struct {
	endpoint    string
	client      *http.Client
	transport   *http.Transport
	timeout     time.Duration
	maxAttempts int
	sigHeader   string
	hmacKey     []byte
	token       string
	secrets     []string

	// Retry pacing: exponential from backoffBase, doubling, capped at
	// backoffMax, jittered; a Retry-After answer is honoured up to
	// retryAfterMax.
	backoffBase, backoffMax, retryAfterMax time.Duration
}

var _ sink.EventSink = (*Sink)(nil)

func init() {
	sink.Events.Register(string(v1alpha1.EventSinkWebhook), build)
}

// build is the webhook type's sink.Factory.
func build(_ context.Context, spec *v1alpha1.EventSinkSpec, p sink.Params) (sink.EventSink, error) {
	s, err := New(spec, p.Secret, p.Dialer)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New validates the spec and Secret and returns the sink, which connects
// only through dialer. Errors from a spec or Secret that cannot work wrap
// sink.ErrPermanent.
func New(spec *v1alpha1.EventSinkSpec, secret sink.Secret, dialer *netguard.Dialer) (*Sink, error) {
	s := &Sink{
		timeout:       DefaultTimeout,
		maxAttempts:   DefaultMaxAttempts,
		sigHeader:     DefaultSignatureHeader,
		backoffBase:   200 * time.Millisecond,
		backoffMax:    5 * time.Second,
		retryAfterMax: 30 * time.Second,
		secrets:       secretValues(secret),
	}
	if err := s.init(spec, secret, dialer); err != nil {
		return nil, s.scrub(err)
	}
	return s, nil
}

func (s *Sink) init(spec *v1alpha1.EventSinkSpec, secret sink.Secret, dialer *netguard.Dialer) error {
	if dialer == nil {
		return fmt.Errorf("webhook: no dialer: %w", sink.ErrPermanent)
	}
	if spec == nil {
		return fmt.Errorf("webhook: no spec: %w", sink.ErrPermanent)
	}
	u, err := url.Parse(spec.Endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		// Not quoting it: a malformed URL may still hold a credential.
		return fmt.Errorf("webhook: endpoint is not an https:// or http:// URL: %w", sink.ErrPermanent)
	}
	if u.User != nil {
		// Credentials belong in the Secret: the endpoint shows up in
		// status and errors.
		return fmt.Errorf("webhook: endpoint holds credentials; put a token in the Secret: %w", sink.ErrPermanent)
	}
	s.endpoint = u.String()

	if w := spec.Webhook; w != nil {
		if w.SignatureHeader != "" {
			if !validHeaderName(w.SignatureHeader) {
				return fmt.Errorf("webhook: signatureHeader %q is not a header name: %w", w.SignatureHeader, sink.ErrPermanent)
			}
			s.sigHeader = w.SignatureHeader
		}
		if w.Timeout != nil && w.Timeout.Duration > 0 {
			s.timeout = min(w.Timeout.Duration, maxTimeout)
		}
		if w.MaxAttempts > 0 {
			s.maxAttempts = min(int(w.MaxAttempts), maxMaxAttempts)
		}
	}

	if key := secret["hmacKey"]; len(key) > 0 {
		s.hmacKey = key
	}
	// A Secret made from a file often ends in a line break, which is not
	// part of the token and not allowed in a header.
	if token := strings.TrimRight(secret.Get("token"), "\r\n"); token != "" {
		if strings.IndexFunc(token, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			return fmt.Errorf("webhook: Secret key token has control characters: %w", sink.ErrPermanent)
		}
		s.token = token
	}

	tlsConfig, err := sink.TLSConfig(spec.TLS)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	s.transport = dialer.Transport()
	s.transport.TLSClientConfig = tlsConfig
	s.client = &http.Client{
		Transport: s.transport,
		// The 3xx comes back as the answer, and fails the delivery.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return nil
}

// Publish delivers the events one after the other, each once the one
// before it was accepted, so the receiver gets them in order.
func (s *Sink) Publish(ctx context.Context, _ sink.Inventory, events []sink.Event) error {
	for i := range events {
		ev := &events[i]
		body, err := json.Marshal(ev)
		if err == nil {
			err = s.deliver(ctx, body)
		}
		if err != nil {
			return s.scrub(fmt.Errorf("webhook: delivered %d of %d events: event %s: %w", i, len(events), ev.ID, err))
		}
	}
	return nil
}

// deliver posts one event until it is accepted, fails for good, runs out
// of attempts (one while ctx probes an open breaker) or ctx ends.
func (s *Sink) deliver(ctx context.Context, body []byte) error {
	maxAttempts := s.maxAttempts
	if sink.IsSingleAttempt(ctx) {
		maxAttempts = 1
	}
	var sig string
	if s.hmacKey != nil {
		mac := hmac.New(sha256.New, s.hmacKey)
		mac.Write(body)
		sig = "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}
	for attempt := 1; ; attempt++ {
		wait, err := s.attempt(ctx, body, sig)
		if err == nil {
			sink.Answered(ctx)
			return nil
		}
		if errors.Is(err, sink.ErrPermanent) || ctx.Err() != nil {
			return fmt.Errorf("attempt %d: %w", attempt, err)
		}
		if attempt >= maxAttempts {
			return fmt.Errorf("giving up after %d attempts: %w", attempt, err)
		}
		if wait <= 0 {
			wait = s.backoff(attempt)
		}
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			// Sleeping past the deadline only delays the same error.
			return fmt.Errorf("attempt %d: %w (no time left for another: %w)", attempt, err, context.DeadlineExceeded)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("attempt %d: %w (stopped retrying: %w)", attempt, err, ctx.Err())
		case <-timer.C:
		}
	}
}

// attempt makes one delivery. It returns nil on a 2xx answer; an error
// wrapping sink.ErrPermanent when retrying cannot help; otherwise the
// error and how long the receiver asked us to wait (0 when it did not).
func (s *Sink) attempt(ctx context.Context, body []byte, sig string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%w: %w", err, sink.ErrPermanent)
	}
	req.Header.Set("Content-Type", ContentType)
	req.Header.Set("User-Agent", "kollect")
	if sig != "" {
		req.Header.Set(s.sigHeader, sig)
	}
	s.authorize(req)
	resp, err := s.client.Do(req)
	if err != nil {
		var refusal *netguard.Error
		if badCertificate(err) || errors.As(err, &refusal) {
			// Another attempt would be refused the same way.
			return 0, fmt.Errorf("%w: %w", err, sink.ErrPermanent)
		}
		return 0, err
	}
	defer drain(resp.Body)
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		return 0, nil
	case code == http.StatusRequestTimeout || code >= 500:
		wait := time.Duration(0)
		if code == http.StatusServiceUnavailable {
			wait = s.retryAfter(resp.Header.Get("Retry-After"))
		}
		return wait, s.statusError(resp)
	case code == http.StatusTooManyRequests:
		return s.retryAfter(resp.Header.Get("Retry-After")), s.statusError(resp)
	case code >= 300 && code < 400:
		return 0, fmt.Errorf("%w (redirect to %q not followed): %w", s.statusError(resp), resp.Header.Get("Location"), sink.ErrPermanent)
	default:
		return 0, fmt.Errorf("%w: %w", s.statusError(resp), sink.ErrPermanent)
	}
}

// Probe sends an OPTIONS request, as in the CloudEvents webhook
// validation handshake. Any answer below 500 shows the endpoint is there,
// except 401 and 403, which reject the token, and a 3xx, which every
// delivery would fail on.
func (s *Sink) Probe(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodOptions, s.endpoint, nil)
	if err != nil {
		return s.scrub(fmt.Errorf("webhook: %w: %w", err, sink.ErrPermanent))
	}
	req.Header.Set("WebHook-Request-Origin", RequestOrigin)
	req.Header.Set("User-Agent", "kollect")
	s.authorize(req)
	resp, err := s.client.Do(req)
	if err != nil {
		if badCertificate(err) {
			err = fmt.Errorf("%w: %w", err, sink.ErrPermanent)
		}
		return s.scrub(fmt.Errorf("webhook: probe: %w", err))
	}
	defer drain(resp.Body)
	switch code := resp.StatusCode; {
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return s.scrub(fmt.Errorf("webhook: probe: the endpoint rejects the credentials: %w: %w",
			s.classifiedStatus(resp, &sink.Classified{Outcome: sink.OutcomeAuth, HTTPStatus: code}), sink.ErrPermanent))
	case code >= 300 && code < 400:
		return s.scrub(fmt.Errorf("webhook: probe: %w (redirect to %q; deliveries do not follow redirects): %w",
			s.classifiedStatus(resp, &sink.Classified{Outcome: sink.OutcomeHTTPStatus, HTTPStatus: code, Detail: "redirects are not followed"}),
			resp.Header.Get("Location"), sink.ErrPermanent))
	case code >= 500:
		return s.scrub(fmt.Errorf("webhook: probe: %w", s.statusError(resp)))
	}
	return nil
}

// Close closes idle connections.
func (s *Sink) Close() error {
	s.transport.CloseIdleConnections()
	return nil
}

func (s *Sink) authorize(req *http.Request) {
	if s.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.token)
	}
}

// backoff is the wait after the given failed attempt: base·2^(attempt-1),
// capped, then jittered to between half and all of it so that retries of
// many sinks spread out but never come too early.
func (s *Sink) backoff(attempt int) time.Duration {
	d := s.backoffMax
	if attempt < 32 {
		d = min(s.backoffBase<<(attempt-1), s.backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// retryAfter parses a Retry-After value (seconds or an HTTP date), capped
// at retryAfterMax; 0 when absent or unparsable.
func (s *Sink) retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = time.Until(t)
	}
	return max(0, min(d, s.retryAfterMax))
}

// statusError describes an answer that is not a 2xx, with the start of the
// receiver's explanation, classified by its status code.
func (s *Sink) statusError(resp *http.Response) error {
	return s.classifiedStatus(resp, &sink.Classified{Outcome: sink.OutcomeHTTPStatus, HTTPStatus: resp.StatusCode})
}

// classifiedStatus is statusError with the given class.
func (s *Sink) classifiedStatus(resp *http.Response, class *sink.Classified) error {
	return &statusErr{msg: s.describeStatus(resp), class: class}
}

// statusErr is an answer that is not a 2xx: its text for the exporter's
// status (the sink's own receiver wrote it) and its class for probes,
// which show no text the endpoint sent.
type statusErr struct {
	msg   string
	class *sink.Classified
}

func (e *statusErr) Error() string { return e.msg }
func (e *statusErr) Unwrap() error { return e.class }

func (s *Sink) describeStatus(resp *http.Response) string {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4*maxBodyInError))
	// Redact first: a receiver may echo the token, and once the text is
	// cut, mapped or quoted a piece of it would no longer match.
	text := strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(plumbing.RedactString(string(b), s.secrets)))
	if len(text) > maxBodyInError {
		cut := maxBodyInError
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut] + "…"
	}
	if text == "" {
		return "endpoint answered " + resp.Status
	}
	return fmt.Sprintf("endpoint answered %s: %q", resp.Status, text)
}

// badCertificate tells a server certificate that does not verify, which
// only a change to the spec or the server fixes, from network trouble.
func badCertificate(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// drain reads a little of what is left so the connection can be reused.
func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	_ = body.Close()
}

func validHeaderName(name string) bool {
	for _, r := range name {
		// RFC 9110 token characters.
		if r > unicode.MaxASCII || !(unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("!#$%&'*+-.^_`|~", r)) {
			return false
		}
	}
	return name != ""
}

// secretValues lists the values that must never appear in errors.
func secretValues(secret sink.Secret) []string {
	var out []string
	for _, k := range []string{"token", "hmacKey"} {
		if v := secret.Get(k); v != "" {
			out = append(out, v)
			if t := strings.TrimRight(v, "\r\n"); t != v && t != "" {
				out = append(out, t)
			}
		}
	}
	// Longest first, so no shorter value splits a longer one.
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// scrub replaces secret values in err's message (see plumbing.Redact) and
// keeps its class (sink.Classify) for the exporter.
func (s *Sink) scrub(err error) error { return sink.WithOutcome(plumbing.Redact(err, s.secrets), err) }
