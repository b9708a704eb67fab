package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The real sinks the export benchmarks deliver to, and what observes
// them. Every server listens on 127.0.0.1 and stops with the benchmark.

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func caBundle(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// postgresDSN and natsURL are the machine's services, as the e2e suites use them.
func postgresDSN() string {
	return envOr("KOLLECT_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
}

func natsURL() string { return envOr("KOLLECT_TEST_NATS_URL", "nats://127.0.0.1:4222") }

// arrivals records, per sink and token, when a token was first seen
// delivered. A token is the value of the ConfigMap data key "value" that a
// change wrote; it reaches every sink as the item attribute "value".
type arrivals struct {
	mu   sync.Mutex
	seen map[string]map[string]time.Time
}

func newArrivals() *arrivals { return &arrivals{seen: map[string]map[string]time.Time{}} }

func (a *arrivals) record(sinkName, token string, at time.Time) {
	if token == "" {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.seen[sinkName]
	if m == nil {
		m = map[string]time.Time{}
		a.seen[sinkName] = m
	}
	if _, ok := m[token]; !ok {
		m[token] = at
	}
}

func (a *arrivals) at(sinkName, token string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.seen[sinkName][token]
	return t, ok
}

// wait polls until token arrived at every sink of sinks, or ctx ends.
func (a *arrivals) wait(ctx context.Context, token string, sinks []string) error {
	for {
		var missing []string
		for _, s := range sinks {
			if _, ok := a.at(s, token); !ok {
				missing = append(missing, s)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("token %s not delivered to %s: %w", token, strings.Join(missing, ", "), context.Cause(ctx))
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// eventValue is the item attribute "value" of a CloudEvent body, "" when
// it has none (a delete, a resynced event).
func eventValue(body []byte) string {
	var ev struct {
		Data struct {
			Item *struct {
				Attributes map[string]any `json:"attributes"`
			} `json:"item"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &ev) != nil || ev.Data.Item == nil {
		return ""
	}
	s, _ := ev.Data.Item.Attributes["value"].(string)
	return s
}

// documentValues are the item attributes "value" of a snapshot document.
func documentValues(doc []byte) []string {
	var env struct {
		Items []struct {
			Attributes map[string]any `json:"attributes"`
		} `json:"items"`
	}
	if json.Unmarshal(doc, &env) != nil {
		return nil
	}
	out := make([]string, 0, len(env.Items))
	for _, it := range env.Items {
		if s, ok := it.Attributes["value"].(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// failingReceiver is a webhook endpoint that answers every delivery 500:
// a sink that keeps failing, transiently, as a receiver that is down does.
type failingReceiver struct {
	srv      *httptest.Server
	requests atomic.Int64
}

func startFailingReceiver(tb testing.TB) *failingReceiver {
	f := &failingReceiver{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		f.requests.Add(1)
		http.Error(w, "receiver unavailable", http.StatusInternalServerError)
	}))
	tb.Cleanup(f.srv.Close)
	return f
}

// webhookReceiver accepts every CloudEvent over TLS and records the
// arrival of its token.
type webhookReceiver struct {
	srv    *httptest.Server
	events atomic.Int64
}

func startWebhookReceiver(tb testing.TB, a *arrivals) *webhookReceiver {
	w := &webhookReceiver{}
	w.srv = httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			rw.Header().Set("WebHook-Allowed-Origin", "*")
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		w.events.Add(1)
		a.record("webhook", eventValue(body), time.Now())
	}))
	tb.Cleanup(w.srv.Close)
	return w
}

// gitServer is git's own smart HTTP server (git http-backend through
// net/http/cgi) behind TLS and basic auth, serving one bare repository.
// When a push completes it reads the pushed document and records its
// tokens: a push is delivered when its response has been written.
type gitServer struct {
	srv         *httptest.Server
	dir         string // the bare repository
	user, token string
	pushes      atomic.Int64
}

func startGitServer(tb testing.TB, a *arrivals) (*gitServer, error) {
	root := tb.TempDir()
	g := &gitServer{dir: filepath.Join(root, "inventory.git"), user: "kollect", token: "tok-" + randomSuffix()}
	if out, err := exec.Command("git", "init", "--bare", "-b", "main", g.dir).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git init: %v: %s", err, out)
	}
	if out, err := exec.Command("git", "--git-dir", g.dir, "config", "http.receivepack", "true").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("git config: %v: %s", err, out)
	}
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != g.user || pass != g.token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			at := time.Now()
			g.pushes.Add(1)
			for _, v := range g.documentValues() {
				a.record("git", v, at)
			}
		}
	}))
	tb.Cleanup(g.srv.Close)
	return g, nil
}

func (g *gitServer) url() string { return g.srv.URL + "/inventory.git" }

// documentValues reads every JSON document on main and returns its tokens.
func (g *gitServer) documentValues() []string {
	out, err := exec.Command("git", "--git-dir", g.dir, "ls-tree", "-r", "--name-only", "main").Output()
	if err != nil {
		return nil
	}
	var values []string
	for _, path := range strings.Fields(string(out)) {
		if !strings.HasSuffix(path, ".json") {
			continue
		}
		doc, err := exec.Command("git", "--git-dir", g.dir, "show", "main:"+path).Output()
		if err == nil {
			values = append(values, documentValues(doc)...)
		}
	}
	return values
}

// watchFiles polls the JSON documents under dir every period until ctx
// ends and records their tokens when a document changed. The file sink
// replaces a document by renaming a complete file over it, so a read never
// sees half of one.
func watchFiles(ctx context.Context, dir string, period time.Duration, a *arrivals) {
	type stamp struct {
		mod  time.Time
		size int64
	}
	last := map[string]stamp{}
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".json") {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return nil
			}
			st := stamp{info.ModTime(), info.Size()}
			if last[path] == st {
				return nil
			}
			doc, err := os.ReadFile(path)
			if err != nil {
				return nil
			}
			at := time.Now()
			last[path] = st
			for _, v := range documentValues(doc) {
				a.record("file", v, at)
			}
			return nil
		})
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// natsStream creates a JetStream stream capturing prefix.> and an ordered
// consumer of new messages on it (what a consumer of the stream runs),
// recording each event's token at its receipt. The stream is deleted when
// the benchmark ends.
func natsStream(ctx context.Context, tb testing.TB, nc *nats.Conn, prefix string, a *arrivals) (string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return "", err
	}
	name := strings.ToUpper(prefix)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Duplicates: time.Minute})
	if err != nil {
		return "", fmt.Errorf("creating stream %s: %w", name, err)
	}
	tb.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		return "", fmt.Errorf("consumer on %s: %w", name, err)
	}
	cc, err := c.Consume(func(msg jetstream.Msg) {
		a.record("nats", eventValue(msg.Data()), time.Now())
	})
	if err != nil {
		return "", fmt.Errorf("consuming %s: %w", name, err)
	}
	tb.Cleanup(cc.Stop)
	return name, nil
}

// notifyRows adds a trigger to an exported table that notifies channel
// with the item attribute "value" of every row written, once the
// transaction commits, and listens on it until ctx ends, recording each
// token as delivered to sinkName. It is added after the first export, so
// the bulk write it would slow is not measured with it.
func notifyRows(ctx context.Context, dsn, schema, table, sinkName string, a *arrivals) error {
	fn := pgx.Identifier{schema, "bench_notify"}.Sanitize()
	channel := "bench_" + randomSuffix()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	for _, stmt := range []string{
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	PERFORM pg_notify('` + channel + `', coalesce(NEW.attributes->>'value', ''));
	RETURN NEW;
END $$`,
		`CREATE TRIGGER bench_notify AFTER INSERT OR UPDATE ON ` + pgx.Identifier{schema, table}.Sanitize() +
			` FOR EACH ROW EXECUTE FUNCTION ` + fn + `()`,
		`LISTEN ` + channel,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			_ = conn.Close(context.Background())
			return fmt.Errorf("%s: %w", strings.SplitN(stmt, "\n", 2)[0], err)
		}
	}
	go func() {
		defer func() { _ = conn.Close(context.Background()) }()
		for {
			n, err := conn.WaitForNotification(ctx)
			if err != nil {
				return
			}
			a.record(sinkName, n.Payload, time.Now())
		}
	}()
	return nil
}

// dropSchema removes a benchmark's schema.
func dropSchema(dsn, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(ctx) }()
	_, err = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

// errMissingService explains how to start what the export benchmarks need.
var errMissingService = errors.New("start PostgreSQL and NATS with `make services` (hack/services.sh)")
