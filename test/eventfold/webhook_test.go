package eventfold

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
	"net/http"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// client trusts only the receiver's CA, so every request is real TLS
// verified against w.CA.
func client(t *testing.T, w *Webhook) *http.Client {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(w.CA) {
		t.Fatal("Webhook.CA holds no PEM certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

func sign(key string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(key))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// post delivers ev as the webhook sink does and returns the status, or
// the error when there was no answer.
func post(ctx context.Context, t *testing.T, c *http.Client, w *Webhook, ev sink.Event, sig string) (int, error) {
	t.Helper()
	body, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/cloudevents+json; charset=utf-8")
	if sig == "sign" {
		sig = sign("k3y", body)
	}
	if sig != "" {
		req.Header.Set(SignatureHeader, sig)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func mustPost(t *testing.T, c *http.Client, w *Webhook, ev sink.Event, sig string, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code, err := post(ctx, t, c, w, ev, sig)
	if err != nil {
		t.Fatalf("POST %s: %v", ev.ID, err)
	}
	if code != want {
		t.Fatalf("POST %s answered %d, want %d", ev.ID, code, want)
	}
}

func TestWebhookFoldsOnlyCorrectlySignedEvents(t *testing.T) {
	w := StartWebhook(t, "k3y")
	if !strings.HasPrefix(w.URL, "https://127.0.0.1:") {
		t.Fatalf("URL %s is not https on 127.0.0.1", w.URL)
	}
	c := client(t, w)
	p := sink.InventoryPath(eastApp)
	a, b := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1")

	mustPost(t, c, w, up(eastApp, a, 1, ""), "sign", http.StatusNoContent)
	mustPost(t, c, w, up(eastApp, b, 1, ""), "", http.StatusBadRequest)                         // unsigned
	mustPost(t, c, w, up(eastApp, b, 1, ""), sign("wrong", []byte("x")), http.StatusBadRequest) // signed with another key
	mustPost(t, c, w, up(eastApp, b, 1, ""), "sha256=zz", http.StatusBadRequest)                // not hex
	wantEqual(t, w.Fold, p, a)

	// A signed body that is no event is refused, and not folded.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := []byte(`{"specversion":"1.0","id":"x","type":"dev.kollect.item.upserted","data":{}}`)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.URL, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/cloudevents+json")
	req.Header.Set(SignatureHeader, sign("k3y", body))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("an invalid event answered %d, want 400", resp.StatusCode)
	}

	// The probe's OPTIONS handshake.
	req, _ = http.NewRequestWithContext(ctx, http.MethodOptions, w.URL, nil)
	req.Header.Set("WebHook-Request-Origin", "kollect")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("WebHook-Allowed-Origin") == "" {
		t.Fatalf("OPTIONS answered %d, WebHook-Allowed-Origin %q", resp.StatusCode, resp.Header.Get("WebHook-Allowed-Origin"))
	}
	if got := w.Requests(); got != 5 {
		t.Fatalf("Requests() = %d after 5 POSTs and an OPTIONS", got)
	}
	wantStats(t, w.Fold, p, Stats{Events: 1})

	// Without a key, unsigned deliveries are folded.
	open := StartWebhook(t, "")
	mustPost(t, client(t, open), open, up(eastApp, b, 1, ""), "", http.StatusNoContent)
	wantEqual(t, open.Fold, p, b)
}

// Fail answers its status without folding until Heal; a sender that
// delivers again after Heal leaves the fold complete.
func TestWebhookFailAndHeal(t *testing.T) {
	w := StartWebhook(t, "k3y")
	c := client(t, w)
	p := sink.InventoryPath(eastApp)
	a, b := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1")
	mustPost(t, c, w, up(eastApp, a, 1, ""), "sign", http.StatusNoContent)

	for _, status := range []int{http.StatusServiceUnavailable, http.StatusBadRequest, http.StatusTooManyRequests} {
		w.Fail(status)
		mustPost(t, c, w, up(eastApp, b, 1, ""), "sign", status)
		mustPost(t, c, w, del(eastApp, a, 1), "sign", status)
	}
	wantEqual(t, w.Fold, p, a)
	w.Heal()
	mustPost(t, c, w, up(eastApp, b, 1, ""), "sign", http.StatusNoContent)
	mustPost(t, c, w, del(eastApp, a, 1), "sign", http.StatusNoContent)
	wantEqual(t, w.Fold, p, b)
	if got := w.Requests(); got != 9 {
		t.Fatalf("Requests() = %d, want 9", got)
	}
	wantStats(t, w.Fold, p, Stats{Events: 3})
}

// Hang holds requests: one the client gives up on is never folded, one
// still held at Heal is answered 503 and not folded either.
func TestWebhookHangAndHeal(t *testing.T) {
	w := StartWebhook(t, "k3y")
	c := client(t, w)
	p := sink.InventoryPath(eastApp)
	a, b := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1")
	w.Hang()

	// waitRequests waits until the receiver holds n requests.
	waitRequests := func(n int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for w.Requests() < n {
			select {
			case <-ctx.Done():
				t.Fatalf("the receiver got %d requests, want %d", w.Requests(), n)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	// A client that gives up.
	gaveUp, giveUp := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := post(gaveUp, t, c, w, up(eastApp, a, 1, ""), "sign")
		errc <- err
	}()
	waitRequests(1)
	giveUp()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("a held request ended with %v, want the client's cancellation", err)
	}

	// A request held until Heal.
	type answer struct {
		code int
		err  error
	}
	ansc := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		code, err := post(ctx, t, c, w, up(eastApp, b, 1, ""), "sign")
		ansc <- answer{code, err}
	}()
	waitRequests(2)
	w.Heal()
	if ans := <-ansc; ans.err != nil || ans.code != http.StatusServiceUnavailable {
		t.Fatalf("the request held at Heal got %d, %v; want 503", ans.code, ans.err)
	}
	wantEqual(t, w.Fold, p)

	mustPost(t, c, w, up(eastApp, a, 1, ""), "sign", http.StatusNoContent)
	mustPost(t, c, w, up(eastApp, b, 1, ""), "sign", http.StatusNoContent)
	wantEqual(t, w.Fold, p, a, b)
	wantStats(t, w.Fold, p, Stats{Events: 2})

	// A request still held when the test ends does not keep the server
	// from stopping: the cleanup releases it.
	w.Hang()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = post(ctx, t, c, w, del(eastApp, a, 1), "sign")
	}()
	waitRequests(5)
}

// FoldAndHang folds a delivery but never answers it: the sender gives up
// and sends the event again, which the fold counts as a re-delivery.
func TestWebhookFoldAndHangLosesTheAnswer(t *testing.T) {
	w := StartWebhook(t, "k3y")
	c := client(t, w)
	p := sink.InventoryPath(eastApp)
	a := item("a", "uid-a", "10", "a1")
	w.FoldAndHang()

	gaveUp, giveUp := context.WithCancel(context.Background())
	defer giveUp()
	errc := make(chan error, 1)
	go func() {
		_, err := post(gaveUp, t, c, w, up(eastApp, a, 1, ""), "sign")
		errc <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The event is folded while its answer is held.
	if err := w.Fold.WaitEqual(ctx, p, live(a)); err != nil {
		t.Fatal(err)
	}
	giveUp()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("the held request ended with %v, want the client's cancellation", err)
	}
	// An invalid delivery is still refused at once, not held.
	mustPost(t, c, w, up(eastApp, a, 1, ""), "", http.StatusBadRequest)

	w.Heal()
	mustPost(t, c, w, up(eastApp, a, 1, ""), "sign", http.StatusNoContent)
	wantEqual(t, w.Fold, p, a)
	wantStats(t, w.Fold, p, Stats{Events: 2, Duplicates: 1})
}
