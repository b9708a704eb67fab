package delivery

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/test/eventfold"
)

// gitServer is git's own smart HTTP server (git http-backend, through
// net/http/cgi) behind TLS and basic auth, serving bare repositories on
// 127.0.0.1.
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

func (g *gitServer) ca() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: g.srv.Certificate().Raw})
}

// repo creates a bare repository and returns its URL and directory.
func (g *gitServer) repo(t *testing.T, name string) (string, string) {
	t.Helper()
	dir := filepath.Join(g.root, name+".git")
	gitCmd(t, "", "init", "--bare", "-b", "main", dir)
	gitCmd(t, dir, "config", "http.receivepack", "true")
	return g.srv.URL + "/" + name + ".git", dir
}

func gitCmd(t *testing.T, gitDir string, args ...string) string {
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

// gitShow reads a file at main; nil when absent (or before the first push).
func gitShow(gitDir, path string) []byte {
	out, err := exec.Command("git", "--git-dir", gitDir, "show", "main:"+path).Output()
	if err != nil {
		return nil
	}
	return out
}

// gitCheck compares the document at path on main with the live set: its
// items and checksum, and the cluster it names.
func gitCheck(gitDir, path, cluster string) check {
	return check{"git " + path, func(_ context.Context, l liveSet) error {
		doc := gitShow(gitDir, path)
		if doc == nil {
			return fmt.Errorf("no document at main:%s", path)
		}
		var env sink.Envelope
		if err := json.Unmarshal(doc, &env); err != nil {
			return fmt.Errorf("main:%s: %w", path, err)
		}
		got := map[string]string{}
		for _, it := range env.Items {
			got[it.Key()] = it.Hash
		}
		switch {
		case env.Cluster != cluster || env.Inventory.Cluster != cluster:
			return fmt.Errorf("main:%s names cluster %q (inventory %q), want %q", path, env.Cluster, env.Inventory.Cluster, cluster)
		case env.Checksum != l.checksum() || sink.ChecksumOf(env.Items) != env.Checksum || env.ItemCount != len(l.hash):
			return fmt.Errorf("main:%s: checksum %.12s (items %.12s), %d items; live %.12s, %d items: %s",
				path, env.Checksum, sink.ChecksumOf(env.Items), env.ItemCount, l.checksum(), len(l.hash), diff(got, l.hash))
		}
		return nil
	}}
}

// pgSchema names a schema for a test and drops it afterwards.
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
	cluster, uid, key, hash string
}

// pgRows reads every row of a table, or those of one inventory of one
// cluster when ns and inventory are given.
func pgRows(ctx context.Context, schema, table, cluster, ns, inventory string) ([]pgRow, error) {
	q := "SELECT cluster, item_uid, item_namespace, item_name, hash FROM " + pgx.Identifier{schema, table}.Sanitize()
	var args []any
	if cluster != "" {
		q += " WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3"
		args = []any{cluster, ns, inventory}
	}
	rows, err := pg.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pgRow
	for rows.Next() {
		var r pgRow
		var ins, name string
		if err := rows.Scan(&r.cluster, &r.uid, &ins, &name, &r.hash); err != nil {
			return nil, err
		}
		r.key = ins + "/" + name
		out = append(out, r)
	}
	return out, rows.Err()
}

// pgCheck compares an inventory's rows of one cluster with the live set:
// one row per item, with the item's uid and hash.
func pgCheck(schema, table, cluster, ns, inventory string) check {
	return check{"postgres " + cluster, func(ctx context.Context, l liveSet) error {
		rows, err := pgRows(ctx, schema, table, cluster, ns, inventory)
		if err != nil {
			return err
		}
		got := map[string]string{}
		for _, r := range rows {
			if _, dup := got[r.key]; dup {
				return fmt.Errorf("two rows for %s", r.key)
			}
			got[r.key] = r.hash
			if r.uid != l.uid[r.key] && l.uid[r.key] != "" {
				return fmt.Errorf("row of %s has item uid %s, the item is %s", r.key, r.uid, l.uid[r.key])
			}
		}
		if d := diff(got, l.hash); d != "" {
			return fmt.Errorf("%d rows, %d items: %s", len(rows), len(l.hash), d)
		}
		return nil
	}}
}

// foldCheck compares an inventory's folded event stream with the live set.
func foldCheck(name string, f *eventfold.Fold, path string) check {
	return check{name, func(_ context.Context, l liveSet) error { return f.Equal(path, l.hash) }}
}

// natsStream creates a stream capturing subjects and deletes it after the
// test; the name is unique, the subjects are the test's own.
func natsStream(ctx context.Context, t *testing.T, subjects ...string) string {
	t.Helper()
	name := "DELIVERY_" + strings.ToUpper(randomSuffix())
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatalf("creating stream %s on %v: %v", name, subjects, err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return name
}

// streamMsg is one message of a stream.
type streamMsg struct {
	seq     uint64
	subject string
	msgID   string
	event   sink.Event
}

// streamMessages reads every message of a stream in order.
func streamMessages(ctx context.Context, t *testing.T, stream string) []streamMsg {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	must(t, err, "stream "+stream)
	info, err := s.Info(ctx)
	must(t, err, "stream info "+stream)
	var out []streamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		msg, err := s.GetMsg(ctx, seq)
		must(t, err, fmt.Sprintf("stream %s message %d", stream, seq))
		m := streamMsg{seq: seq, subject: msg.Subject, msgID: msg.Header.Get(jetstream.MsgIDHeader)}
		if err := json.Unmarshal(msg.Data, &m.event); err != nil {
			t.Fatalf("stream %s message %d is not a CloudEvent: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// checkIDs is the id rule over a raw stream: every message's Nats-Msg-Id
// is its event id; one id never carries two different events (nor two
// epochs); and one leader never publishes one change outside resyncs
// (inventory, op, item uid and revision) under two ids, so every duplicate
// a consumer can see from one leader is a re-delivery it recognises by the
// id. A change two leaders published (under two ids) carries the same
// item in both; the count is logged. It returns how many messages repeat
// an id seen before.
func checkIDs(t *testing.T, what string, msgs []streamMsg) int {
	t.Helper()
	// A change has one id per leader: a former leader and its successor
	// may both publish it, and the successor's must not be dropped as a
	// repeat of the former's (docs/export.md, "Ids").
	type change struct {
		path, op, uid, rv string
		epoch             int64
	}
	byID := map[string]sink.Event{}
	idOf := map[change]string{}
	first := map[change]sink.Event{} // by change, epoch left out
	repeats, twoLeaders := 0, 0
	for _, m := range msgs {
		ev := m.event
		if m.msgID != ev.ID {
			t.Errorf("%s: message %d: Nats-Msg-Id %q, event id %q", what, m.seq, m.msgID, ev.ID)
		}
		if prev, ok := byID[ev.ID]; ok {
			repeats++
			if prev.Type != ev.Type || prev.Epoch != ev.Epoch || prev.Data.Op != ev.Data.Op || prev.Data.ItemUID != ev.Data.ItemUID ||
				prev.Data.ItemResourceVersion != ev.Data.ItemResourceVersion || itemHash(prev) != itemHash(ev) {
				t.Errorf("%s: id %s carries two different events: %s %s %s epoch %d and %s %s %s epoch %d", what, ev.ID,
					prev.Data.Op, prev.Data.ItemResourceVersion, itemHash(prev), prev.Epoch, ev.Data.Op, ev.Data.ItemResourceVersion, itemHash(ev), ev.Epoch)
			}
			continue
		}
		byID[ev.ID] = ev
		if ev.Type == sink.EventTypeResynced || ev.Resync != "" {
			continue // a resync restates items under ids of its own
		}
		c := change{sink.InventoryPath(ev.Data.Inventory), string(ev.Data.Op), ev.Data.ItemUID, ev.Data.ItemResourceVersion, ev.Epoch}
		if id, ok := idOf[c]; ok && id != ev.ID {
			t.Errorf("%s: one change of epoch %d published under two ids: %s and %s", what, ev.Epoch, id, ev.ID)
		}
		idOf[c] = ev.ID
		anyEpoch := c
		anyEpoch.epoch = 0
		if prev, ok := first[anyEpoch]; !ok {
			first[anyEpoch] = ev
		} else if prev.Epoch != ev.Epoch {
			twoLeaders++
			if itemHash(prev) != itemHash(ev) {
				t.Errorf("%s: %s %s of %s published by epochs %d and %d with items %s and %s", what, ev.Data.Op,
					ev.Data.ItemResourceVersion, ev.Subject, prev.Epoch, ev.Epoch, itemHash(prev), itemHash(ev))
			}
		}
	}
	if twoLeaders > 0 {
		t.Logf("%s: %d changes published by two leaders (each under its own id)", what, twoLeaders)
	}
	return repeats
}

func itemHash(ev sink.Event) string {
	if ev.Data.Item == nil {
		return ""
	}
	return ev.Data.Item.Hash
}
