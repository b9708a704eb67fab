// Package nats is the nats EventSink: it publishes the CloudEvents the
// exporter builds, one message each, to a NATS JetStream stream.
//
// Each message carries the event's ID as Nats-Msg-Id, so the stream's
// duplicate window drops an event the exporter publishes again after a
// partial failure (the ID names the cluster and the inventory, so events
// of two inventories sharing a stream never collide), and the
// expected-stream header, so a subject that the configured stream does not
// capture fails instead of landing in another stream or nowhere.
//
// Connections go through the server's netguard.Dialer, to the endpoint's
// servers only: the servers a NATS server advertises (connect_urls) are
// ignored, so a server cannot point the client at an internal address.
package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/netguard"
)

const (
	// DefaultSubject (the API's default) is the subject template when
	// spec.nats.subject is empty: a subject per cluster and inventory, so
	// that consumers of a stream many clusters share can filter by cluster.
	DefaultSubject = v1alpha1.DefaultNATSSubject
	// ClusterNamespace stands in for {namespace} for a ClusterInventory: an
	// empty subject token is invalid.
	ClusterNamespace = "_cluster"
	// ContentType of every message: a structured-mode CloudEvent.
	ContentType = "application/cloudevents+json"

	connectTimeout = 10 * time.Second
	// ackTimeout bounds the wait for one message's ack when the caller's
	// context has no deadline, so a stalled server cannot hang an export.
	ackTimeout = 10 * time.Second
	// maxInFlight bounds the unacknowledged messages of one Publish: enough
	// to keep the pipe full, well under the client's own stall limit.
	maxInFlight = 256

	// errCodeStreamNotMatch is JetStream's answer when the subject is
	// captured by a stream other than the expected one.
	errCodeStreamNotMatch jetstream.ErrorCode = 10060
)

// Sink publishes change events to a JetStream stream. It connects on first
// use and again after its connection closed; it is safe for concurrent use.
type Sink struct {
	servers string
	stream  string
	subject string
	opts    []natsgo.Option
	secrets []string
	creds   nkeys.KeyPair

	asyncErr atomic.Pointer[error]
	// dialErr is the last failed dial: nats.go reports a refused
	// connection only as "no servers available".
	dialErr atomic.Pointer[error]

	mu     sync.Mutex
	nc     *natsgo.Conn
	js     jetstream.JetStream
	closed bool
}

var _ sink.EventSink = (*Sink)(nil)

func init() {
	sink.Events.Register(string(v1alpha1.EventSinkNATS), build)
}

// build is the nats type's sink.Factory.
func build(_ context.Context, spec *v1alpha1.EventSinkSpec, p sink.Params) (sink.EventSink, error) {
	s, err := New(spec, p.Secret, p.Dialer)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New validates the spec and Secret and returns a sink that has not
// connected yet and connects only through dialer. Errors from a spec or
// Secret that cannot work wrap sink.ErrPermanent.
func New(spec *v1alpha1.EventSinkSpec, secret sink.Secret, dialer *netguard.Dialer) (*Sink, error) {
	s := &Sink{secrets: secretValues(secret)}
	err := s.init(spec, secret, dialer)
	// Longest first, so no shorter value (the JWT in the creds) splits a
	// longer one.
	slices.SortFunc(s.secrets, func(a, b string) int { return len(b) - len(a) })
	if err != nil {
		return nil, s.scrub(err)
	}
	return s, nil
}

func (s *Sink) init(spec *v1alpha1.EventSinkSpec, secret sink.Secret, dialer *netguard.Dialer) error {
	if dialer == nil {
		return fmt.Errorf("nats: no dialer: %w", sink.ErrPermanent)
	}
	if spec == nil {
		return fmt.Errorf("nats: no spec: %w", sink.ErrPermanent)
	}
	if spec.NATS == nil || spec.NATS.Stream == "" {
		return fmt.Errorf("nats: spec.nats.stream is required: %w", sink.ErrPermanent)
	}
	s.stream = spec.NATS.Stream
	s.subject = spec.NATS.Subject
	if s.subject == "" {
		s.subject = DefaultSubject
	}
	// Expanding with placeholder values catches a template that can never
	// give a valid subject (wildcards, empty tokens) before anything is sent.
	sample := sink.Expand(s.subject, map[string]string{"cluster": "c", "namespace": "n", "inventory": "i", "kind": "k", "name": "x"})
	if err := validSubject(sample); err != nil {
		return fmt.Errorf("nats: spec.nats.subject %q: %w: %w", s.subject, err, sink.ErrPermanent)
	}

	secure := spec.TLS != nil
	servers := strings.Split(spec.Endpoint, ",")
	for i, raw := range servers {
		raw = strings.TrimSpace(raw)
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			// Not quoting it: a malformed URL may still hold a credential.
			return fmt.Errorf("nats: endpoint is not a nats:// or tls:// URL: %w", sink.ErrPermanent)
		}
		switch u.Scheme {
		case "nats":
		case "tls":
			secure = true
		default:
			return fmt.Errorf("nats: endpoint scheme %q is not nats or tls: %w", u.Scheme, sink.ErrPermanent)
		}
		if u.User != nil {
			// Credentials belong in the Secret: the endpoint shows up in
			// status and errors (hence not quoting it here either).
			return fmt.Errorf("nats: endpoint holds credentials; put them in the Secret: %w", sink.ErrPermanent)
		}
		servers[i] = raw
	}
	s.servers = strings.Join(servers, ",")

	s.opts = []natsgo.Option{
		natsgo.Name("kollect"),
		// The dialer resolves and checks each server's name itself; nats.go
		// would otherwise resolve it with the system's resolver first.
		natsgo.SetCustomDialer(recordingDialer{dialer, &s.dialErr}),
		natsgo.SkipHostLookup(),
		natsgo.IgnoreDiscoveredServers(),
		// The server reports some failures, such as a publish the user may
		// not make, only asynchronously: keep the last one for the error of
		// the ack that then times out, instead of the default print to stderr.
		natsgo.ErrorHandler(func(_ *natsgo.Conn, _ *natsgo.Subscription, err error) {
			s.asyncErr.Store(&err)
		}),
	}
	if secure {
		cfg, err := sink.TLSConfig(spec.TLS)
		if err != nil {
			return fmt.Errorf("nats: %w", err)
		}
		s.opts = append(s.opts, natsgo.Secure(cfg))
	}
	auth, err := s.authOption(secret)
	if err != nil {
		return err
	}
	if auth != nil {
		s.opts = append(s.opts, auth)
	}
	return nil
}

// authOption picks the credential of the Secret: creds, else username and
// password, else token.
func (s *Sink) authOption(secret sink.Secret) (natsgo.Option, error) {
	if creds := secret["creds"]; len(creds) > 0 {
		jwt, err := nkeys.ParseDecoratedJWT(creds)
		// Without its markers the whole content comes back as the "JWT";
		// a real one is three base64url parts.
		if err != nil || strings.Count(jwt, ".") != 2 || strings.ContainsAny(jwt, " \t\r\n") {
			return nil, fmt.Errorf("nats: Secret key creds holds no user JWT: %w", sink.ErrPermanent)
		}
		kp, err := nkeys.ParseDecoratedUserNKey(creds)
		if err != nil {
			return nil, fmt.Errorf("nats: Secret key creds holds no user seed: %w", sink.ErrPermanent)
		}
		if seed, err := kp.Seed(); err == nil {
			s.secrets = append(s.secrets, string(seed))
		}
		s.secrets = append(s.secrets, jwt)
		s.creds = kp
		return natsgo.UserJWT(
			func() (string, error) { return jwt, nil },
			func(nonce []byte) ([]byte, error) { return kp.Sign(nonce) },
		), nil
	}
	user, pass := trimLine(secret.Get("username")), trimLine(secret.Get("password"))
	if user != "" || pass != "" {
		if user == "" || pass == "" {
			return nil, fmt.Errorf("nats: Secret needs both username and password: %w", sink.ErrPermanent)
		}
		return natsgo.UserInfo(user, pass), nil
	}
	if token := trimLine(secret.Get("token")); token != "" {
		return natsgo.Token(token), nil
	}
	return nil, nil
}

// Publish sends one message per event, in order, and returns once all are
// acknowledged by the stream. An ack saying the stream already held the
// message (a duplicate within the stream's window: an earlier attempt
// stored it) counts as delivered.
//
// Messages are pipelined (at most maxInFlight unacknowledged) for
// throughput; the server stores one connection's messages in the order
// sent, and acks are awaited in that order, so the events before the first
// failed ack are the ones delivered. Events after a failed one may still
// have been stored: the exporter's next delivery is a resync, which
// restates the live set over whatever landed.
func (s *Sink) Publish(ctx context.Context, inv sink.Inventory, events []sink.Event) error {
	n := len(events)
	if n == 0 {
		return nil
	}
	msgs := make([]*natsgo.Msg, n)
	ids := make([]string, n)
	for i := range events {
		ev := &events[i]
		if ev.ID == "" {
			// JetStream would store it without deduplication.
			return s.failed(0, n, "", "", fmt.Errorf("event %d has no id: %w", i, sink.ErrPermanent))
		}
		data, err := json.Marshal(ev)
		if err != nil {
			return s.failed(0, n, ev.ID, "", fmt.Errorf("encoding event: %w", err))
		}
		subject := s.subjectOf(inv, ev.Data.Item)
		if err := validSubject(subject); err != nil {
			return s.failed(0, n, ev.ID, subject, fmt.Errorf("%w: %w", err, sink.ErrPermanent))
		}
		msgs[i] = &natsgo.Msg{Subject: subject, Data: data, Header: natsgo.Header{"Content-Type": []string{ContentType}}}
		ids[i] = ev.ID
	}

	js, err := s.jetStream(ctx)
	if err != nil {
		return s.failed(0, n, ids[0], msgs[0].Subject, err)
	}

	futures := make([]jetstream.PubAckFuture, 0, n)
	acked := 0
	var sendErr error
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			sendErr = err
			break
		}
		if i-acked >= maxInFlight {
			if err := waitAck(ctx, futures[acked]); err != nil {
				return s.failed(acked, n, ids[acked], msgs[acked].Subject, err)
			}
			acked++
		}
		f, err := js.PublishMsgAsync(m,
			jetstream.WithMsgID(ids[i]),
			jetstream.WithExpectStream(s.stream),
			// A retried message would land after the ones sent behind it:
			// fail instead, and let the exporter resend in order.
			jetstream.WithRetryAttempts(0),
		)
		if err != nil {
			sendErr = err
			break
		}
		futures = append(futures, f)
	}
	// Even when sending stopped early, the acks already on their way tell
	// how many events were delivered.
	for ; acked < len(futures); acked++ {
		if err := waitAck(ctx, futures[acked]); err != nil {
			return s.failed(acked, n, ids[acked], msgs[acked].Subject, err)
		}
	}
	if sendErr != nil {
		return s.failed(acked, n, ids[acked], msgs[acked].Subject, sendErr)
	}
	return nil
}

func waitAck(ctx context.Context, f jetstream.PubAckFuture) error {
	select {
	case <-f.Ok():
		return nil
	case err := <-f.Err():
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the ack: %w", ctx.Err())
	}
}

// failed builds Publish's error: how many events were delivered, which
// one failed and why.
func (s *Sink) failed(delivered, total int, id, subject string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, natsgo.ErrNoResponders):
		err = fmt.Errorf("no stream captures the subject, or JetStream is unavailable: %w", err)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == errCodeStreamNotMatch:
		err = fmt.Errorf("the subject belongs to another stream than %q: %w: %w", s.stream, err, sink.ErrPermanent)
	case errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, context.DeadlineExceeded):
		if last := s.asyncErr.Load(); last != nil {
			err = fmt.Errorf("%w (last server error: %w)", err, *last)
		}
	}
	if subject != "" {
		err = fmt.Errorf("event %s on subject %s: %w", id, subject, err)
	} else if id != "" {
		err = fmt.Errorf("event %s: %w", id, err)
	}
	return s.scrub(fmt.Errorf("nats: delivered %d of %d events: %w", delivered, total, err))
}

// Probe connects and checks that the stream exists.
func (s *Sink) Probe(ctx context.Context) error {
	js, err := s.jetStream(ctx)
	if err != nil {
		return s.scrub(fmt.Errorf("nats: %w", err))
	}
	if _, err := js.Stream(ctx, s.stream); err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return s.scrub(fmt.Errorf("nats: stream %q not found: %w: %w", s.stream,
				&sink.Classified{Outcome: sink.OutcomeProtocol, Detail: fmt.Sprintf("stream %q not found", s.stream)}, sink.ErrPermanent))
		}
		return s.scrub(fmt.Errorf("nats: looking up stream %q: %w", s.stream, err))
	}
	return nil
}

// Close closes the connection. Every publish has been acknowledged by the
// time Publish returns, so there is nothing to drain.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.nc != nil {
		s.nc.Close()
		s.nc, s.js = nil, nil
	}
	if s.creds != nil {
		s.creds.Wipe()
	}
	return nil
}

// jetStream returns the JetStream context, connecting first when there is
// no open connection.
func (s *Sink) jetStream(ctx context.Context) (jetstream.JetStream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("sink is closed")
	}
	if s.nc != nil && !s.nc.IsClosed() {
		return s.js, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// nats.Connect takes no context: bound it by the context's deadline.
	timeout := connectTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(deadline))
	}
	s.dialErr.Store(nil)
	nc, err := natsgo.Connect(s.servers, append(s.opts, natsgo.Timeout(timeout))...)
	if err != nil {
		if errors.Is(err, natsgo.ErrAuthorization) || errors.Is(err, natsgo.ErrAuthExpired) ||
			errors.Is(err, natsgo.ErrAuthRevoked) || errors.Is(err, natsgo.ErrAccountAuthExpired) {
			return nil, fmt.Errorf("connecting to %s: %w: %w: %w", s.servers, err, &sink.Classified{Outcome: sink.OutcomeAuth}, sink.ErrPermanent)
		}
		if last := s.dialErr.Load(); last != nil && errors.Is(err, natsgo.ErrNoServers) {
			return nil, fmt.Errorf("connecting to %s: %w: %w", s.servers, err, *last)
		}
		return nil, fmt.Errorf("connecting to %s: %w", s.servers, err)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(ackTimeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	s.nc, s.js = nc, js
	s.asyncErr.Store(nil)
	return js, nil
}

// subjectOf expands the subject template for one event. An event without
// an item (a resynced event) has "_" for {kind} and {name}.
func (s *Sink) subjectOf(inv sink.Inventory, item *sink.Item) string {
	ns := inv.Namespace
	if ns == "" {
		ns = ClusterNamespace
	}
	var kind, name string
	if item != nil {
		kind, name = item.Source.Kind, item.Name
	}
	return sink.Expand(s.subject, map[string]string{
		"cluster":   Token(inv.Cluster),
		"namespace": Token(ns),
		"inventory": Token(inv.Name),
		"kind":      Token(kind),
		"name":      Token(name),
	})
}

// Token makes s one valid subject token: separators, wildcards, spaces and
// non-printable characters become "_", and an empty value becomes "_".
func Token(s string) string {
	if s == "" {
		return "_"
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r == '.' || r == '*' || r == '>' || r == ' ' || r == unicode.ReplacementChar || !unicode.IsPrint(r) {
			b.WriteByte('_')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// validSubject rejects what the server would refuse or treat as a
// wildcard: empty tokens, whitespace, "*" and ">" tokens.
func validSubject(subject string) error {
	if subject == "" {
		return errors.New("empty subject")
	}
	if strings.ContainsAny(subject, " \t\r\n") {
		return errors.New("subject contains whitespace")
	}
	for tok := range strings.SplitSeq(subject, ".") {
		switch tok {
		case "":
			return errors.New("subject has an empty token")
		case "*", ">":
			return errors.New("subject has a wildcard")
		}
	}
	return nil
}

// trimLine drops the line end a Secret created from a file often has.
func trimLine(s string) string { return strings.TrimRight(s, "\r\n") }

// secretValues lists the values that must never appear in errors.
func secretValues(secret sink.Secret) []string {
	var out []string
	for _, k := range []string{"token", "password", "creds"} {
		if v := secret.Get(k); v != "" {
			out = append(out, v)
			if t := trimLine(v); t != v && t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// scrub replaces secret values in err's message (see plumbing.Redact) and
// keeps its class (sink.Classify) for the exporter.
func (s *Sink) scrub(err error) error { return sink.WithOutcome(plumbing.Redact(err, s.secrets), err) }

// recordingDialer is nats.go's CustomDialer: the guarded dialer, keeping
// the last error.
type recordingDialer struct {
	dialer *netguard.Dialer
	last   *atomic.Pointer[error]
}

func (d recordingDialer) Dial(network, address string) (net.Conn, error) {
	conn, err := d.dialer.Dial(network, address)
	if err != nil {
		d.last.Store(&err)
	}
	return conn, err
}
