package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/netguard"
)

const (
	hmacKey = "hm4c-K3y-value"
	token   = "b34rer-T0ken-value"
)

var secret = sink.Secret{"hmacKey": []byte(hmacKey), "token": []byte(token + "\n")}

type request struct {
	method string
	path   string
	header http.Header
	body   []byte
}

// receiver is a webhook endpoint that records what it gets and answers
// the nth request (1-based) with answer, 200 when answer is nil.
type receiver struct {
	srv    *httptest.Server
	answer func(n int, w http.ResponseWriter, r *http.Request)

	mu   sync.Mutex
	reqs []request
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{answer: answer}
	rc.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, request{r.Method, r.URL.Path, r.Header.Clone(), body})
		n := len(rc.reqs)
		rc.mu.Unlock()
		if rc.answer != nil {
			rc.answer(n, w, r)
		}
	}))
	// Handshakes the tests make fail on purpose are not news.
	rc.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	rc.srv.StartTLS()
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) requests() []request {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]request(nil), rc.reqs...)
}

// spec points at the receiver's /hook, trusting its certificate.
func (rc *receiver) spec(cfg *v1alpha1.WebhookSinkConfig) *v1alpha1.EventSinkSpec {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: rc.srv.Certificate().Raw})
	return &v1alpha1.EventSinkSpec{
		Type:     v1alpha1.EventSinkWebhook,
		Endpoint: rc.srv.URL + "/hook",
		TLS:      &v1alpha1.TLSConfig{CABundle: ca},
		Webhook:  cfg,
	}
}

// loopbackDialer allows the test servers' loopback addresses, as
// --allow-private-sink-endpoints does.
var loopbackDialer, _ = netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})

func newSink(t *testing.T, spec *v1alpha1.EventSinkSpec, secret sink.Secret) *Sink {
	t.Helper()
	s, err := New(spec, secret, loopbackDialer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fast() *v1alpha1.WebhookSinkConfig {
	return &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 2 * time.Second}}
}

func status(code int) func(int, http.ResponseWriter, *http.Request) {
	return func(_ int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }
}

var inv = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "web", UID: "inv-uid"}

// testEpoch is the leadership epoch of the tests' events.
const testEpoch = 7

// events builds the events of changes of inv, as the exporter does outside
// a resync.
func events(cs []sink.Change) []sink.Event {
	out := make([]sink.Event, len(cs))
	now := time.Now()
	for i, c := range cs {
		out[i] = sink.NewEvent(inv, c, testEpoch, "", now)
	}
	return out
}

func changes(n int) []sink.Change {
	out := make([]sink.Change, n)
	for i := range out {
		op := sink.Upsert
		if i%3 == 2 {
			op = sink.Delete
		}
		out[i] = sink.Change{Op: op, Item: &sink.Item{
			Namespace:       "team-a",
			Name:            fmt.Sprintf("item-%d", i),
			Target:          "apps",
			Profile:         "basic",
			Source:          sink.Source{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: fmt.Sprintf("obj-%d", i)},
			Attributes:      json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			Hash:            fmt.Sprintf("%064x", i),
			UID:             fmt.Sprintf("uid-%d", i),
			ResourceVersion: fmt.Sprint(100 + i),
		}}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventID(c sink.Change) string { return sink.NewEvent(inv, c, testEpoch, "", time.Time{}).ID }

// checkDelivery checks that r is the signed, authorized event of c.
func checkDelivery(t *testing.T, r request, sigHeader string, c sink.Change) {
	t.Helper()
	if r.method != http.MethodPost || r.path != "/hook" {
		t.Errorf("request is %s %s", r.method, r.path)
	}
	if got := r.header.Get("Content-Type"); got != "application/cloudevents+json; charset=utf-8" {
		t.Errorf("Content-Type %q", got)
	}
	if got := r.header.Get("Authorization"); got != "Bearer "+token {
		t.Errorf("Authorization %q", got)
	}
	mac := hmac.New(sha256.New, []byte(hmacKey))
	mac.Write(r.body)
	if got, want := r.header.Get(sigHeader), "sha256="+hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(got), []byte(want)) {
		t.Errorf("%s %q does not verify, want %q", sigHeader, got, want)
	}
	var ev sink.Event
	if err := json.Unmarshal(r.body, &ev); err != nil {
		t.Fatalf("body is not an event: %v", err)
	}
	wantType := sink.EventTypeUpserted
	if c.Op == sink.Delete {
		wantType = sink.EventTypeDeleted
	}
	if ev.SpecVersion != "1.0" || ev.ID != eventID(c) || ev.Type != wantType || ev.Source != sink.EventSource(inv) ||
		ev.Cluster != inv.Cluster || ev.Epoch != testEpoch || ev.Resync != "" ||
		ev.Subject != c.Item.Key() || ev.Time.IsZero() || ev.DataContentType != "application/json" ||
		ev.Data.Op != c.Op || ev.Data.ItemResourceVersion != c.Item.ResourceVersion || ev.Data.Item == nil ||
		ev.Data.Item.Name != c.Item.Name || string(ev.Data.Item.Attributes) != string(c.Item.Attributes) {
		t.Errorf("event %+v does not match change %s %+v", ev, c.Op, *c.Item)
	}
}

func TestPublishDeliversInOrder(t *testing.T) {
	codes := []int{200, 202, 204, 201, 200}
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) { w.WriteHeader(codes[(n-1)%len(codes)]) })
	s := newSink(t, rc.spec(nil), secret)

	cs := changes(5)
	if err := s.Publish(ctxT(t), inv, events(cs)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	reqs := rc.requests()
	if len(reqs) != len(cs) {
		t.Fatalf("%d requests, want %d", len(reqs), len(cs))
	}
	for i, c := range cs {
		checkDelivery(t, reqs[i], DefaultSignatureHeader, c)
	}
}

func TestSignatureHeaderAndNoCredentials(t *testing.T) {
	rc := newReceiver(t, nil)
	cfg := fast()
	cfg.SignatureHeader = "X-Hub-Signature-256"
	cs := changes(1)
	if err := newSink(t, rc.spec(cfg), secret).Publish(ctxT(t), inv, events(cs)); err != nil {
		t.Fatal(err)
	}
	checkDelivery(t, rc.requests()[0], "X-Hub-Signature-256", cs[0])

	// Without a Secret: neither signed nor authorized.
	if err := newSink(t, rc.spec(cfg), nil).Publish(ctxT(t), inv, events(cs)); err != nil {
		t.Fatal(err)
	}
	r := rc.requests()[1]
	if r.header.Get("Authorization") != "" || r.header.Get("X-Hub-Signature-256") != "" || r.header.Get(DefaultSignatureHeader) != "" {
		t.Errorf("delivery without a Secret has credentials: %v", r.header)
	}
}

func TestRetriesUnavailable(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n <= 2 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
		}
	})
	s := newSink(t, rc.spec(fast()), secret)
	cs := changes(1)
	start := time.Now()
	if err := s.Publish(ctxT(t), inv, events(cs)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	reqs := rc.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d attempts, want 3", len(reqs))
	}
	for _, r := range reqs {
		checkDelivery(t, r, DefaultSignatureHeader, cs[0])
	}
	// Two backoffs: at least half of 200ms and of 400ms.
	if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
		t.Errorf("3 attempts took %v: no backoff", elapsed)
	}
}

func TestRetryableStatuses(t *testing.T) {
	for _, code := range []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway} {
		rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 1 {
				w.WriteHeader(code)
			}
		})
		if err := newSink(t, rc.spec(fast()), secret).Publish(ctxT(t), inv, events(changes(1))); err != nil {
			t.Errorf("%d then 200: %v", code, err)
		}
		if n := len(rc.requests()); n != 2 {
			t.Errorf("%d then 200: %d attempts, want 2", code, n)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	})
	start := time.Now()
	if err := newSink(t, rc.spec(fast()), secret).Publish(ctxT(t), inv, events(changes(1))); err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed < time.Second {
		t.Errorf("retried after %v, before Retry-After's 1s", elapsed)
	}
	if n := len(rc.requests()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}

	s := newSink(t, rc.spec(nil), nil)
	for v, want := range map[string]time.Duration{
		"":                              0,
		"2":                             2 * time.Second,
		"3600":                          30 * time.Second,
		"-5":                            0,
		"soon":                          0,
		"Wed, 21 Oct 2015 07:28:00 GMT": 0,
		time.Now().Add(time.Hour).UTC().Format(http.TimeFormat): 30 * time.Second,
	} {
		if got := s.retryAfter(v); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestClientErrorIsPermanent(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unknown event type", http.StatusBadRequest)
	})
	err := newSink(t, rc.spec(fast()), secret).Publish(ctxT(t), inv, events(changes(3)))
	if !errors.Is(err, sink.ErrPermanent) {
		t.Fatalf("want a permanent error, got %v", err)
	}
	t.Log(err)
	if !strings.Contains(err.Error(), "delivered 0 of 3") || !strings.Contains(err.Error(), "unknown event type") {
		t.Errorf("error does not say 0 of 3 were delivered and why: %v", err)
	}
	if n := len(rc.requests()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestPartialDelivery(t *testing.T) {
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 3 {
			w.WriteHeader(http.StatusUnprocessableEntity)
		}
	})
	cs := changes(5)
	err := newSink(t, rc.spec(fast()), secret).Publish(ctxT(t), inv, events(cs))
	if err == nil || !strings.Contains(err.Error(), "delivered 2 of 5") || !strings.Contains(err.Error(), eventID(cs[2])) {
		t.Fatalf("want an error saying 2 of 5 were delivered and naming %s, got %v", eventID(cs[2]), err)
	}
	if n := len(rc.requests()); n != 3 {
		t.Errorf("%d requests, want 3: nothing after the failed event", n)
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hook" {
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		}
	})
	err := newSink(t, rc.spec(fast()), secret).Publish(ctxT(t), inv, events(changes(1)))
	if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "302") {
		t.Fatalf("want a permanent error for the 302, got %v", err)
	}
	t.Log(err)
	reqs := rc.requests()
	if len(reqs) != 1 || reqs[0].path != "/hook" {
		t.Errorf("requests %v: the redirect was followed or retried", reqs)
	}
}

func TestMaxAttempts(t *testing.T) {
	rc := newReceiver(t, status(http.StatusInternalServerError))
	cfg := fast()
	cfg.MaxAttempts = 3
	err := newSink(t, rc.spec(cfg), secret).Publish(ctxT(t), inv, events(changes(2)))
	if err == nil || errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "giving up after 3 attempts") {
		t.Fatalf("want a transient error after 3 attempts, got %v", err)
	}
	t.Log(err)
	if n := len(rc.requests()); n != 3 {
		t.Errorf("%d attempts, want 3", n)
	}
}

// TestSingleAttempt: the exporter's probe of an open breaker posts once.
func TestSingleAttempt(t *testing.T) {
	rc := newReceiver(t, status(http.StatusInternalServerError))
	cfg := fast()
	cfg.MaxAttempts = 3
	err := newSink(t, rc.spec(cfg), secret).Publish(sink.SingleAttempt(ctxT(t)), inv, events(changes(2)))
	if err == nil || errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "giving up after 1 attempts") {
		t.Fatalf("want a transient error after one attempt, got %v", err)
	}
	if n := len(rc.requests()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

func TestAttemptTimeoutIsRetried(t *testing.T) {
	rc := newReceiver(t, func(n int, _ http.ResponseWriter, r *http.Request) {
		if n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}
	})
	cfg := fast()
	cfg.Timeout = &metav1.Duration{Duration: 200 * time.Millisecond}
	if err := newSink(t, rc.spec(cfg), secret).Publish(ctxT(t), inv, events(changes(1))); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := len(rc.requests()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
}

func TestStopsWhenContextEnds(t *testing.T) {
	rc := newReceiver(t, status(http.StatusServiceUnavailable))
	cfg := fast()
	cfg.MaxAttempts = 20
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := newSink(t, rc.spec(cfg), secret).Publish(ctx, inv, events(changes(1)))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want an error wrapping the deadline, got %v", err)
	}
	if elapsed := time.Since(start); elapsed > 2*time.Second {
		t.Errorf("kept retrying for %v after a 500ms deadline", elapsed)
	}
	if n := len(rc.requests()); n >= 20 {
		t.Errorf("%d attempts", n)
	}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := newSink(t, rc.spec(cfg), secret).Publish(cancelled, inv, events(changes(1))); !errors.Is(err, context.Canceled) {
		t.Errorf("Publish with a cancelled context: %v", err)
	}
}

func TestUntrustedCertificate(t *testing.T) {
	rc := newReceiver(t, nil)
	spec := rc.spec(fast())
	spec.TLS = nil // system roots do not include httptest's CA
	s := newSink(t, spec, secret)
	if err := s.Publish(ctxT(t), inv, events(changes(1))); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Publish to an untrusted certificate: want a permanent error, got %v", err)
	}
	if err := s.Probe(ctxT(t)); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe of an untrusted certificate: want a permanent error, got %v", err)
	}
	if n := len(rc.requests()); n != 0 {
		t.Errorf("%d requests got through", n)
	}
}

func TestPlainHTTP(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { got.Add(1) }))
	defer srv.Close()
	s := newSink(t, &v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: srv.URL}, secret)
	if err := s.Publish(ctxT(t), inv, events(changes(2))); err != nil || got.Load() != 2 {
		t.Errorf("Publish over http: %v, %d requests", err, got.Load())
	}
}

func TestProbe(t *testing.T) {
	outcomes := map[int]sink.Outcome{
		http.StatusUnauthorized: sink.OutcomeAuth,
		http.StatusForbidden:    sink.OutcomeAuth,
		http.StatusFound:        sink.OutcomeHTTPStatus,
		http.StatusBadGateway:   sink.OutcomeHTTPStatus,
	}
	for code, wantErr := range map[int]string{
		http.StatusOK:               "",
		http.StatusNoContent:        "",
		http.StatusNotFound:         "",
		http.StatusMethodNotAllowed: "",
		http.StatusUnauthorized:     "permanent",
		http.StatusForbidden:        "permanent",
		http.StatusFound:            "permanent",
		http.StatusBadGateway:       "transient",
	} {
		t.Run(fmt.Sprint(code), func(t *testing.T) {
			rc := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request) {
				if code == http.StatusFound {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(code)
			})
			err := newSink(t, rc.spec(fast()), secret).Probe(ctxT(t))
			switch {
			case wantErr == "" && err != nil:
				t.Errorf("Probe: %v", err)
			case wantErr != "" && err == nil:
				t.Errorf("Probe succeeded")
			case wantErr == "permanent" && !errors.Is(err, sink.ErrPermanent),
				wantErr == "transient" && errors.Is(err, sink.ErrPermanent):
				t.Errorf("Probe: want a %s error, got %v", wantErr, err)
			}
			if c := sink.Classify(err); err != nil && (c.Outcome != outcomes[code] || c.HTTPStatus != code) {
				t.Errorf("Probe: classified %+v, want %s with the code %d", c, outcomes[code], code)
			}
			reqs := rc.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.method != http.MethodOptions || r.path != "/hook" || r.header.Get("WebHook-Request-Origin") != "kollect.dev" ||
				r.header.Get("Authorization") != "Bearer "+token {
				t.Errorf("probe request: %s %s %v", r.method, r.path, r.header)
			}
		})
	}

	// Nothing listening.
	rc := newReceiver(t, nil)
	s := newSink(t, rc.spec(fast()), secret)
	rc.srv.Close()
	err := s.Probe(ctxT(t))
	if err == nil || errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe of a closed server: want a transient error, got %v", err)
	}
	if c := sink.Classify(err); c == nil || c.Outcome != sink.OutcomeRefused {
		t.Errorf("Probe of a closed server: classified %+v, want Refused", c)
	}
}

// Without --allow-private-sink-endpoints the receiver on loopback never
// sees a request, from a probe or a delivery, and the error says why.
func TestLoopbackRefused(t *testing.T) {
	strict, err := netguard.New(netguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	rc := newReceiver(t, nil)
	s, err := New(rc.spec(fast()), secret, strict)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	for what, err := range map[string]error{"Probe": s.Probe(ctxT(t)), "Publish": s.Publish(ctxT(t), inv, events(changes(1)))} {
		c := sink.Classify(err)
		if c == nil || c.Outcome != sink.OutcomeAddressForbidden || c.Refusal.Class != netguard.Loopback {
			t.Errorf("%s: %v classified %+v, want AddressForbidden (loopback)", what, err, c)
		}
		if !strings.Contains(fmt.Sprint(err), "--allow-private-sink-endpoints") {
			t.Errorf("%s: %v does not name the flag", what, err)
		}
	}
	if reqs := rc.requests(); len(reqs) != 0 {
		t.Errorf("the receiver got %d requests", len(reqs))
	}
	if _, err := New(rc.spec(fast()), secret, nil); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("New without a dialer: %v, want a permanent error", err)
	}
}

// A receiver that echoes credentials back does not get them into errors.
func TestErrorsHideSecrets(t *testing.T) {
	echo := func(code int) func(int, http.ResponseWriter, *http.Request) {
		return func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Error(w, "bad credentials "+r.Header.Get("Authorization")+" key "+hmacKey, code)
		}
	}
	for _, tc := range []struct {
		name string
		code int
		call func(*Sink) error
	}{
		{"publish rejected", http.StatusBadRequest, func(s *Sink) error { return s.Publish(ctxT(t), inv, events(changes(1))) }},
		{"publish retried", http.StatusServiceUnavailable, func(s *Sink) error { return s.Publish(ctxT(t), inv, events(changes(1))) }},
		{"probe", http.StatusUnauthorized, func(s *Sink) error { return s.Probe(ctxT(t)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, echo(tc.code))
			cfg := fast()
			cfg.MaxAttempts = 2
			err := tc.call(newSink(t, rc.spec(cfg), secret))
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), hmacKey) {
				t.Errorf("error shows a secret: %v", err)
			}
			if !strings.Contains(err.Error(), plumbing.Redacted) {
				t.Errorf("error lost the receiver's text: %v", err)
			}
			if tc.code != http.StatusServiceUnavailable && !errors.Is(err, sink.ErrPermanent) {
				t.Errorf("scrubbing lost errors.Is(ErrPermanent): %v", err)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		endpoint string
		tls      *v1alpha1.TLSConfig
		cfg      *v1alpha1.WebhookSinkConfig
		secret   sink.Secret
	}{
		"nats endpoint":      {endpoint: "nats://127.0.0.1:4222"},
		"no host":            {endpoint: "https:///hook"},
		"not a URL":          {endpoint: "example.com/hook"},
		"credentials in URL": {endpoint: "https://user:" + token + "@example.com/hook"},
		"bad header":         {endpoint: "https://example.com", cfg: &v1alpha1.WebhookSinkConfig{SignatureHeader: "X Sig:"}},
		"bad CA bundle":      {endpoint: "https://example.com", tls: &v1alpha1.TLSConfig{CABundle: []byte("nope")}},
		"token with newline": {endpoint: "https://example.com", secret: sink.Secret{"token": []byte(token + "\nX-Evil: 1")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(&v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: tc.endpoint, TLS: tc.tls, Webhook: tc.cfg}, tc.secret, loopbackDialer)
			if !errors.Is(err, sink.ErrPermanent) {
				t.Fatalf("want a permanent error, got %v", err)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error shows the token: %v", err)
			}
		})
	}
}

func TestDefaultsAndLimits(t *testing.T) {
	s := newSink(t, &v1alpha1.EventSinkSpec{Endpoint: "https://example.com"}, nil)
	if s.timeout != DefaultTimeout || s.maxAttempts != DefaultMaxAttempts || s.sigHeader != DefaultSignatureHeader {
		t.Errorf("defaults: %v %d %s", s.timeout, s.maxAttempts, s.sigHeader)
	}
	s = newSink(t, &v1alpha1.EventSinkSpec{Endpoint: "https://example.com", Webhook: &v1alpha1.WebhookSinkConfig{
		Timeout: &metav1.Duration{Duration: time.Hour}, MaxAttempts: 100,
	}}, nil)
	if s.timeout != time.Minute || s.maxAttempts != 20 {
		t.Errorf("limits: %v %d", s.timeout, s.maxAttempts)
	}
	for attempt := 1; attempt <= 40; attempt++ {
		ceiling := min(200*time.Millisecond<<min(attempt-1, 20), 5*time.Second)
		if d := s.backoff(attempt); d < ceiling/2 || d > ceiling {
			t.Errorf("backoff(%d) = %v, want within [%v, %v]", attempt, d, ceiling/2, ceiling)
		}
	}
}

// TestResyncPassesThrough: a resync (the resynced event, then the live
// set's upserts tagged with its token) is posted as built, one request per
// event, in order: each body is the event's CloudEvent JSON, with the
// extension attributes kollectcluster, kollectepoch and kollectresync and
// the resynced event's data.resync, and its signature verifies.
func TestResyncPassesThrough(t *testing.T) {
	rc := newReceiver(t, nil)
	s := newSink(t, rc.spec(fast()), secret)

	now := time.Now()
	live := changes(4)
	items := make([]*sink.Item, len(live))
	for i := range live {
		live[i].Op = sink.Upsert
		items[i] = live[i].Item
	}
	const token = "resync-token-1"
	evs := []sink.Event{sink.NewResyncEvent(inv, token, len(live), sink.ChecksumOf(items), testEpoch, now)}
	for _, c := range live {
		evs = append(evs, sink.NewEvent(inv, c, testEpoch, token, now))
	}
	if err := s.Publish(ctxT(t), inv, evs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	reqs := rc.requests()
	if len(reqs) != len(evs) {
		t.Fatalf("%d requests, want %d", len(reqs), len(evs))
	}
	for i, ev := range evs {
		want, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if string(reqs[i].body) != string(want) {
			t.Errorf("request %d: body\n%s\nwant\n%s", i, reqs[i].body, want)
		}
		mac := hmac.New(sha256.New, []byte(hmacKey))
		mac.Write(reqs[i].body)
		if got := reqs[i].header.Get(DefaultSignatureHeader); got != "sha256="+hex.EncodeToString(mac.Sum(nil)) {
			t.Errorf("request %d: signature %q does not verify", i, got)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(reqs[i].body, &raw); err != nil {
			t.Fatal(err)
		}
		if string(raw["id"]) != `"`+ev.ID+`"` || string(raw["kollectcluster"]) != `"east"` || string(raw["kollectepoch"]) != "7" {
			t.Errorf("request %d: id %s, kollectcluster %s, kollectepoch %s", i, raw["id"], raw["kollectcluster"], raw["kollectepoch"])
		}
		if i == 0 {
			var data struct {
				Resync sink.Resync `json:"resync"`
			}
			if err := json.Unmarshal(raw["data"], &data); err != nil || data.Resync != (sink.Resync{Token: token, ItemCount: len(live), Checksum: sink.ChecksumOf(items)}) {
				t.Errorf("resynced event: data.resync %+v (%v)", data.Resync, err)
			}
			if string(raw["type"]) != `"`+sink.EventTypeResynced+`"` || raw["kollectresync"] != nil {
				t.Errorf("resynced event: type %s, kollectresync %s", raw["type"], raw["kollectresync"])
			}
		} else if string(raw["kollectresync"]) != `"`+token+`"` || !strings.HasSuffix(ev.ID, "/resync/"+token) {
			t.Errorf("upsert %d: kollectresync %s, id %s", i, raw["kollectresync"], ev.ID)
		}
	}
}

// TestRedeliveryKeepsIDs: after a partial failure the exporter sends the
// events that were not acknowledged again, and the receiver sees the same
// ids (and bodies) as in the failed attempt: what it deduplicates on.
func TestRedeliveryKeepsIDs(t *testing.T) {
	fail := true
	var mu sync.Mutex
	rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if fail && n == 3 {
			http.Error(w, "not now", http.StatusBadRequest)
		}
	})
	s := newSink(t, rc.spec(fast()), secret)
	evs := events(changes(5))
	if err := s.Publish(ctxT(t), inv, evs); err == nil || !strings.Contains(err.Error(), "delivered 2 of 5") {
		t.Fatalf("first Publish = %v, want 2 of 5 delivered", err)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := s.Publish(ctxT(t), inv, evs[2:]); err != nil {
		t.Fatalf("second Publish: %v", err)
	}
	reqs := rc.requests()
	if len(reqs) != 6 {
		t.Fatalf("%d requests, want 6 (2 delivered, 1 refused, 3 re-sent)", len(reqs))
	}
	if string(reqs[2].body) != string(reqs[3].body) {
		t.Errorf("the refused event was re-sent with another body:\n%s\n%s", reqs[2].body, reqs[3].body)
	}
	var ids []string
	for _, r := range reqs {
		var ev sink.Event
		if err := json.Unmarshal(r.body, &ev); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
	}
	want := []string{evs[0].ID, evs[1].ID, evs[2].ID, evs[2].ID, evs[3].ID, evs[4].ID}
	if strings.Join(ids, ",") != strings.Join(want, ",") {
		t.Errorf("ids = %v, want %v", ids, want)
	}
	for _, id := range want {
		if !strings.HasPrefix(id, "east/Inventory/team-a/web/") {
			t.Errorf("id %s does not name the cluster and the inventory", id)
		}
	}
}

// TestRegistered: the webhook type is built through sink.Events, from the
// Secret and the dialer of the parameters.
func TestRegistered(t *testing.T) {
	rc := newReceiver(t, nil)
	s, err := sink.Events.Build(ctxT(t), string(v1alpha1.EventSinkWebhook), rc.spec(fast()), sink.Params{Secret: secret, Dialer: loopbackDialer})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cs := changes(1)
	if err := s.Publish(ctxT(t), inv, events(cs)); err != nil {
		t.Fatal(err)
	}
	if reqs := rc.requests(); len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	} else {
		checkDelivery(t, reqs[0], DefaultSignatureHeader, cs[0])
	}
	if s, err := sink.Events.Build(ctxT(t), string(v1alpha1.EventSinkWebhook), rc.spec(fast()), sink.Params{}); !errors.Is(err, sink.ErrPermanent) || s != nil {
		t.Errorf("Build without a dialer = %v, %v; want a permanent error", s, err)
	}
}
