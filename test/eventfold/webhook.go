package eventfold

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"io"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// SignatureHeader is the header the webhook sink signs deliveries in by
// default: "sha256=<hex HMAC-SHA256 of the body>".
const SignatureHeader = "X-Kollect-Signature"

// maxBody bounds what one delivery may carry; an event is far smaller.
const maxBody = 16 << 20

// Webhook is a CloudEvents receiver over TLS on 127.0.0.1 that folds the
// events it accepts into Fold. It answers 2xx only when it folded the
// event, so what a sender counts as delivered the fold holds; Fail, Hang
// and FoldAndHang inject the receiver faults a sender must survive.
type Webhook struct {
	// URL is the https:// endpoint to deliver to.
	URL string
	// CA is the PEM certificate the server's certificate is signed with:
	// a sink's tls.caBundle.
	CA []byte
	// Fold holds the events the receiver accepted.
	Fold *Fold

	hmacKey []byte
	srv     *httptest.Server

	mu       sync.Mutex
	failWith int           // answer this status to every request; 0: don't
	hang     chan struct{} // non-nil: hold every request until it closes
	// afterFold: hold requests after folding them (FoldAndHang), not before.
	afterFold bool
	closed    bool
	requests  int
}

// StartWebhook starts a receiver; it stops when the test ends. With an
// hmacKey, a delivery whose X-Kollect-Signature is not the body's
// HMAC-SHA256 under that key is answered 400 and not folded.
func StartWebhook(t testing.TB, hmacKey string) *Webhook {
	t.Helper()
	w := &Webhook{Fold: New()}
	if hmacKey != "" {
		w.hmacKey = []byte(hmacKey)
	}
	// Loopback only: nothing outside the test reaches it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("eventfold: webhook listen: %v", err)
	}
	w.srv = httptest.NewUnstartedServer(http.HandlerFunc(w.serve))
	w.srv.Listener = ln
	w.srv.StartTLS()
	w.URL = w.srv.URL
	// httptest's certificate is self-signed and a CA: it is its own root.
	w.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: w.srv.Certificate().Raw})
	t.Cleanup(func() {
		// Release held requests first: Close waits for every handler.
		w.mu.Lock()
		w.closed = true
		if w.hang != nil {
			close(w.hang)
			w.hang = nil
		}
		w.mu.Unlock()
		w.srv.Close()
	})
	return w
}

// Fail makes the receiver answer status to every request (without reading
// or folding it) until Heal.
func (w *Webhook) Fail(status int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failWith = status
}

// Hang makes the receiver hold every request, without folding it, until
// Heal (then it answers 503) or until the client gives up.
func (w *Webhook) Hang() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hang == nil && !w.closed {
		w.hang = make(chan struct{})
	}
	w.afterFold = false
}

// FoldAndHang makes the receiver fold every valid delivery and then hold
// its answer until Heal (then it answers 503) or until the client gives
// up: a receiver that processed an event whose answer never arrived, so
// the sender must count it as not delivered and send it again.
func (w *Webhook) FoldAndHang() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hang == nil && !w.closed {
		w.hang = make(chan struct{})
	}
	w.afterFold = true
}

// Heal ends Fail, Hang and FoldAndHang: requests are folded and answered
// again.
func (w *Webhook) Heal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failWith, w.afterFold = 0, false
	if w.hang != nil {
		close(w.hang)
		w.hang = nil
	}
}

// Requests is the number of deliveries (POST requests) received, however
// they were answered.
func (w *Webhook) Requests() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.requests
}

func (w *Webhook) serve(rw http.ResponseWriter, r *http.Request) {
	w.mu.Lock()
	if r.Method == http.MethodPost {
		w.requests++
	}
	failWith, hang, afterFold := w.failWith, w.hang, w.afterFold
	w.mu.Unlock()

	if hang != nil && !afterFold {
		hold(rw, r, hang)
		return
	}
	if failWith != 0 {
		http.Error(rw, "failing on purpose", failWith)
		return
	}
	switch r.Method {
	case http.MethodOptions:
		// The CloudEvents webhook validation handshake (the sink's probe).
		rw.Header().Set("WebHook-Allowed-Origin", "*")
		rw.WriteHeader(http.StatusOK)
		return
	case http.MethodPost:
	default:
		rw.Header().Set("Allow", "OPTIONS, POST")
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/cloudevents+json" {
		http.Error(rw, "Content-Type: want application/cloudevents+json (structured mode)", http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, maxBody))
	if err != nil {
		http.Error(rw, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if w.hmacKey != nil && !w.signed(r.Header.Get(SignatureHeader), body) {
		http.Error(rw, SignatureHeader+": missing or not the HMAC-SHA256 of the body", http.StatusBadRequest)
		return
	}
	if err := w.Fold.ApplyJSON(body); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	if hang != nil {
		hold(rw, r, hang)
		return
	}
	rw.WriteHeader(http.StatusNoContent)
}

// hold keeps a request unanswered until release closes (then answers
// 503) or the client gives up.
func hold(rw http.ResponseWriter, r *http.Request, release <-chan struct{}) {
	select {
	case <-release:
		http.Error(rw, "held, then released", http.StatusServiceUnavailable)
	case <-r.Context().Done():
	}
}

func (w *Webhook) signed(header string, body []byte) bool {
	hexSig, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSig)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, w.hmacKey)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}
