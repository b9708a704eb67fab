package export

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/test/eventfold"
)

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func caBundle(srv *httptest.Server) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
}

// gitServer is git's own smart HTTP server (git http-backend, through
// net/http/cgi) behind TLS and basic auth, serving bare repositories.
type gitServer struct {
	srv         *httptest.Server
	root        string
	user, token string
}

func startGitServer(t *testing.T) *gitServer {
	t.Helper()
	g := &gitServer{root: t.TempDir(), user: "kollect", token: "tok-" + randomSuffix()}
	backend := &cgi.Handler{
		Path: "/usr/lib/git-core/git-http-backend",
		Env:  []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, pass, ok := r.BasicAuth()
		if !ok || user != g.user || pass != g.token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// repo creates a bare repository and returns its URL and directory.
func (g *gitServer) repo(t *testing.T, name string) (string, string) {
	t.Helper()
	dir := filepath.Join(g.root, name+".git")
	git(t, "", "init", "--bare", "-b", "main", dir)
	git(t, dir, "config", "http.receivepack", "true")
	return g.srv.URL + "/" + name + ".git", dir
}

func git(t *testing.T, gitDir string, args ...string) string {
	t.Helper()
	if gitDir != "" {
		args = append([]string{"--git-dir", gitDir}, args...)
	}
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// commits counts the commits on main; 0 before the first.
func commits(t *testing.T, gitDir string) int {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", gitDir, "rev-list", "--count", "main").Output()
	if err != nil {
		return 0
	}
	var n int
	_, _ = fmt.Sscan(strings.TrimSpace(string(out)), &n)
	return n
}

// gitFile reads a file at main; nil when absent.
func gitFile(gitDir, path string) []byte {
	out, err := exec.Command("git", "--git-dir", gitDir, "show", "main:"+path).Output()
	if err != nil {
		return nil
	}
	return out
}

// webhookReceiver records CloudEvents whose HMAC signature verifies.
type webhookReceiver struct {
	srv *httptest.Server
	key string

	mu       sync.Mutex
	events   []sink.Event
	rejected int
}

func startWebhook(t *testing.T) *webhookReceiver {
	t.Helper()
	w := &webhookReceiver{key: "hmac-" + randomSuffix()}
	w.srv = httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodOptions {
			rw.Header().Set("WebHook-Allowed-Origin", "*")
			return
		}
		body, _ := io.ReadAll(r.Body)
		mac := hmac.New(sha256.New, []byte(w.key))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		var ev sink.Event
		err := json.Unmarshal(body, &ev)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil || !hmac.Equal([]byte(r.Header.Get("X-Kollect-Signature")), []byte(want)) || ev.SpecVersion != "1.0" {
			w.rejected++
			http.Error(rw, "bad signature or body", http.StatusBadRequest)
			return
		}
		w.events = append(w.events, ev)
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// rejectedCount is how many deliveries failed the signature or body check.
func (w *webhookReceiver) rejectedCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rejected
}

func (w *webhookReceiver) received() []sink.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sink.Event(nil), w.events...)
}

// natsStream creates a JetStream stream capturing prefix.> and deletes it
// after the test.
func natsStream(ctx context.Context, t *testing.T, prefix string) jetstream.Stream {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.ToUpper(prefix)
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Duplicates: time.Minute})
	if err != nil {
		t.Fatalf("creating stream %s: %v", name, err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return s
}

// streamEvents reads every message of a stream in order.
func streamEvents(ctx context.Context, t *testing.T, s jetstream.Stream) []sink.Event {
	t.Helper()
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []sink.Event
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		var ev sink.Event
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			t.Fatalf("message %d is not a CloudEvent: %v", seq, err)
		}
		if id := msg.Header.Get(jetstream.MsgIDHeader); id != ev.ID {
			t.Errorf("message %d: Nats-Msg-Id %q, event id %q", seq, id, ev.ID)
		}
		out = append(out, ev)
	}
	return out
}

// pgSchema creates a schema name for a test and drops it afterwards.
func pgSchema(t *testing.T, base string) string {
	t.Helper()
	schema := base + "_" + randomSuffix()
	t.Cleanup(func() {
		_, _ = pg.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	return schema
}

// pgRow is one exported row.
type pgRow struct {
	key, hash, attributes string
	exportedAt            time.Time
}

// pgRows reads an inventory's rows by item UID. Every row must name the
// suite's cluster: the table is the test's own, and a row of another
// cluster would be one the exporter mislabelled.
func pgRows(ctx context.Context, schema, table, ns, inventory string) (map[string]pgRow, error) {
	rows, err := pg.Query(ctx, fmt.Sprintf(`SELECT cluster, item_uid, item_namespace, item_name, hash, coalesce(attributes::text, ''), exported_at FROM %s
		WHERE inventory_namespace = $1 AND inventory_name = $2`, pgx.Identifier{schema, table}.Sanitize()), ns, inventory)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]pgRow{}
	for rows.Next() {
		var cl, uid, ins, name string
		var r pgRow
		if err := rows.Scan(&cl, &uid, &ins, &name, &r.hash, &r.attributes, &r.exportedAt); err != nil {
			return nil, err
		}
		if cl != clusterName {
			return nil, fmt.Errorf("row for item %s names cluster %q, want %q", uid, cl, clusterName)
		}
		r.key = name
		if ins != "" {
			r.key = ins + "/" + name
		}
		if _, dup := out[uid]; dup {
			return nil, fmt.Errorf("duplicate row for item %s", uid)
		}
		out[uid] = r
	}
	return out, rows.Err()
}

// checksumOfRows is the snapshot checksum of the rows: the same function
// a reader applies to a snapshot document (docs/export.md).
func checksumOfRows(rows map[string]pgRow) string {
	var c sink.Checksum
	for _, r := range rows {
		c.Add(r.key, r.hash)
	}
	return c.String()
}

// foldEvents folds events, in the order a sink received them, by the
// consumer contract (eventfold, docs/export.md "Consuming events"); an
// event a consumer could not fold fails the test.
func foldEvents(t *testing.T, what string, events []sink.Event) *eventfold.Fold {
	t.Helper()
	f := eventfold.New()
	for _, ev := range events {
		f.Apply(ev)
	}
	if err := f.Err(); err != nil {
		t.Errorf("%s: events a consumer cannot fold: %v", what, err)
	}
	return f
}

// readEnvelope reads a JSON snapshot document.
func readEnvelope(data []byte) (*sink.Envelope, error) {
	var env sink.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

func readFileEnvelope(path string) (*sink.Envelope, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return readEnvelope(data)
}
