package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// These tests run against a real PostgreSQL server; see testDSN.

const defaultTestDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

func testDSN() string {
	if dsn := os.Getenv("KOLLECT_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return defaultTestDSN
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect opens the test's own connection, independent of the Sink. A
// server that cannot be reached fails the test: a skipped test would hide
// that the sink went untested.
func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, testDSN())
	if err != nil {
		t.Fatalf("cannot connect to PostgreSQL (KOLLECT_TEST_POSTGRES_DSN, default %s): %v\n"+
			"start the local server with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
			defaultTestDSN, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var nonIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// testSchema returns a schema name unique to the test, dropped with
// everything in it when the test ends.
func testSchema(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	name := nonIdent.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(name) > 40 {
		name = name[:40]
	}
	name += "_" + randomSuffix(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", name, err)
		}
	})
	return name
}

func newSink(t *testing.T, schema, table string) *Sink {
	t.Helper()
	spec := &v1alpha1.DatabaseSinkSpec{
		Type:     v1alpha1.DatabaseSinkPostgres,
		Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema, Table: table},
	}
	s, err := New(testContext(t), spec, sink.Secret{"dsn": []byte(testDSN())}, loopbackDialer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func item(uid, hash string) *sink.Item {
	return &sink.Item{
		Namespace: "default",
		Name:      "deploy-" + uid,
		Target:    "workloads",
		Profile:   "basic",
		Source: sink.Source{
			APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "app-" + uid, UID: "src-" + uid,
		},
		Attributes:      json.RawMessage(`{"replicas": 3, "hash": "` + hash + `"}`),
		Hash:            hash,
		UID:             uid,
		ResourceVersion: "rv-" + hash,
	}
}

func upsert(it *sink.Item) sink.Change { return sink.Change{Op: sink.Upsert, Item: it} }

func del(uid string) sink.Change { return sink.Change{Op: sink.Delete, Item: &sink.Item{UID: uid}} }

var (
	invA = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "inv", UID: "ia"}
	invB = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-b", Name: "inv", UID: "ib"}
	invC = sink.Inventory{Cluster: "east", Kind: "ClusterInventory", Name: "inv", UID: "ic"}
)

// pos is a cursor at position p of epoch 0.
func pos(p string) sink.Cursor { return sink.Cursor{Position: p} }

// rows returns every row of the item and cursor tables as text, for
// before/after comparisons; inv limits them to one inventory when set.
func rows(t *testing.T, conn *pgx.Conn, schema, table string, inv *sink.Inventory) []string {
	t.Helper()
	ctx := testContext(t)
	var out []string
	for _, tbl := range []string{table, table + cursorsSuffix} {
		q := "SELECT r::text FROM " + pgx.Identifier{schema, tbl}.Sanitize() + " r"
		var args []any
		if inv != nil {
			q += " WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3"
			args = []any{inv.Cluster, inv.Namespace, inv.Name}
		}
		rs, err := conn.Query(ctx, q+" ORDER BY 1", args...)
		if err != nil {
			t.Fatalf("read %s: %v", tbl, err)
		}
		texts, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("read %s: %v", tbl, err)
		}
		out = append(out, texts...)
	}
	return out
}

func countRows(t *testing.T, conn *pgx.Conn, schema, table string, inv sink.Inventory) int {
	t.Helper()
	var n int
	err := conn.QueryRow(testContext(t), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()+
		" WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3", inv.Cluster, inv.Namespace, inv.Name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustState(t *testing.T, s *Sink, inv sink.Inventory) (map[string]string, sink.Cursor) {
	t.Helper()
	hashes, cursor, err := s.State(testContext(t), inv)
	if err != nil {
		t.Fatalf("State(%s: %s/%s): %v", inv.Cluster, inv.Namespace, inv.Name, err)
	}
	return hashes, cursor
}

func wantState(t *testing.T, s *Sink, inv sink.Inventory, wantHashes map[string]string, wantCursor sink.Cursor) {
	t.Helper()
	hashes, cursor := mustState(t, s, inv)
	if !reflect.DeepEqual(hashes, wantHashes) {
		t.Errorf("State(%s: %s/%s) hashes = %v, want %v", inv.Cluster, inv.Namespace, inv.Name, hashes, wantHashes)
	}
	if cursor != wantCursor {
		t.Errorf("State(%s: %s/%s) cursor = %+v, want %+v", inv.Cluster, inv.Namespace, inv.Name, cursor, wantCursor)
	}
}

func mustApply(t *testing.T, s *Sink, inv sink.Inventory, changes []sink.Change, cursor sink.Cursor) {
	t.Helper()
	if err := s.Apply(testContext(t), inv, changes, cursor); err != nil {
		t.Fatalf("Apply: %v", err)
	}
}

func TestCreatesSchemaAndTables(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "")

	// Probe only connects.
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("Probe created the schema")
	}

	wantState(t, s, invA, map[string]string{}, pos(""))

	for table, want := range map[string][]string{
		v1alpha1.DefaultPostgresTable: {
			"cluster text NO", "inventory_kind text YES", "inventory_namespace text NO", "inventory_name text NO",
			"item_uid text NO", "item_namespace text NO", "item_name text NO", "item_resource_version text NO",
			"target text YES", "profile text YES", "source_api_version text YES", "source_kind text YES",
			"source_namespace text YES", "source_name text YES", "source_uid text YES",
			"attributes jsonb YES", "object jsonb YES", "hash text NO",
			"exported_at timestamp with time zone NO",
		},
		v1alpha1.DefaultPostgresTable + cursorsSuffix: {
			"cluster text NO", "inventory_namespace text NO", "inventory_name text NO", "inventory_kind text YES",
			"cursor text NO", "epoch bigint NO", "updated_at timestamp with time zone NO",
		},
	} {
		rs, err := conn.Query(ctx, `SELECT column_name || ' ' || data_type || ' ' || is_nullable
			FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, schema, table)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rs, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("columns of %s.%s =\n%q\nwant\n%q", schema, table, got, want)
		}
	}
	wantKeys(t, conn, schema, v1alpha1.DefaultPostgresTable)

	// A second Sink on existing tables works without creating anything.
	s2 := newSink(t, schema, "")
	wantState(t, s2, invA, map[string]string{}, pos(""))
}

func TestApplyAndState(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)

	changes := []sink.Change{upsert(item("u1", "h1")), upsert(item("u2", "h2")), upsert(item("u3", "h3"))}
	changes[2].Item.Attributes = nil
	changes[2].Item.Object = json.RawMessage(`{"kind":"Deployment"}`)
	mustApply(t, s, invA, changes, pos("c1"))
	wantState(t, s, invA, map[string]string{"u1": "h1", "u2": "h2", "u3": "h3"}, pos("c1"))

	// The row holds the item as given.
	var (
		kind, ns, name, itemNS, itemName, rv, target, profile, srcAV, srcKind, srcNS, srcName, srcUID string
		attrs, obj                                                                                    *string
		exportedAt                                                                                    time.Time
	)
	err := conn.QueryRow(ctx, `SELECT inventory_kind, inventory_namespace, inventory_name, item_namespace, item_name,
		item_resource_version, target, profile, source_api_version, source_kind, source_namespace, source_name,
		source_uid, attributes::text, object::text, exported_at FROM `+pgx.Identifier{schema, table}.Sanitize()+
		` WHERE item_uid = 'u1'`).Scan(&kind, &ns, &name, &itemNS, &itemName, &rv, &target, &profile,
		&srcAV, &srcKind, &srcNS, &srcName, &srcUID, &attrs, &obj, &exportedAt)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{kind, ns, name, itemNS, itemName, rv, target, profile, srcAV, srcKind, srcNS, srcName, srcUID}
	want := []string{"Inventory", "team-a", "inv", "default", "deploy-u1", "rv-h1", "workloads", "basic",
		"apps/v1", "Deployment", "default", "app-u1", "src-u1"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("row u1 = %q, want %q", got, want)
	}
	if attrs == nil || *attrs != `{"hash": "h1", "replicas": 3}` || obj != nil {
		t.Errorf("row u1 attributes = %v, object = %v; want the jsonb document and NULL", attrs, obj)
	}
	if time.Since(exportedAt) > time.Minute {
		t.Errorf("exported_at = %v, want about now", exportedAt)
	}
	if err := conn.QueryRow(ctx, "SELECT attributes::text, object::text FROM "+pgx.Identifier{schema, table}.Sanitize()+
		" WHERE item_uid = 'u3'").Scan(&attrs, &obj); err != nil {
		t.Fatal(err)
	}
	if attrs != nil || obj == nil || *obj != `{"kind": "Deployment"}` {
		t.Errorf("row u3 attributes = %v, object = %v; want NULL and the jsonb document", attrs, obj)
	}

	// Applying the same changes again leaves one row per UID.
	mustApply(t, s, invA, changes, pos("c1"))
	if n := countRows(t, conn, schema, table, invA); n != 3 {
		t.Errorf("after applying twice: %d rows, want 3", n)
	}

	// An update and a delete touch exactly their rows.
	mustApply(t, s, invA, []sink.Change{upsert(item("u1", "h1b")), del("u2")}, pos("c2"))
	wantState(t, s, invA, map[string]string{"u1": "h1b", "u3": "h3"}, pos("c2"))

	// Deleting a row that does not exist is not an error.
	mustApply(t, s, invA, []sink.Change{del("u2"), del("nope")}, pos("c3"))
	wantState(t, s, invA, map[string]string{"u1": "h1b", "u3": "h3"}, pos("c3"))

	// An empty batch still stores its cursor.
	mustApply(t, s, invA, nil, pos("c4"))
	wantState(t, s, invA, map[string]string{"u1": "h1b", "u3": "h3"}, pos("c4"))
}

func TestInventoriesAreIsolated(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "shared"
	s := newSink(t, schema, table)

	// The same item UIDs in three inventories: the key includes the
	// inventory, and a ClusterInventory's empty namespace is its own.
	for _, inv := range []sink.Inventory{invA, invB, invC} {
		mustApply(t, s, inv, []sink.Change{upsert(item("u1", inv.UID+"1")), upsert(item("u2", inv.UID+"2"))}, pos("c-"+inv.UID))
	}
	otherB := rows(t, conn, schema, table, &invB)
	otherC := rows(t, conn, schema, table, &invC)
	if len(otherB) != 3 || len(otherC) != 3 {
		t.Fatalf("setup: inventory B has %d rows, C %d, want 3 each (two items and a cursor)", len(otherB), len(otherC))
	}

	mustApply(t, s, invA, []sink.Change{upsert(item("u1", "new")), del("u2"), upsert(item("u3", "ia3"))}, pos("c-a2"))
	wantState(t, s, invA, map[string]string{"u1": "new", "u3": "ia3"}, pos("c-a2"))
	wantState(t, s, invB, map[string]string{"u1": "ib1", "u2": "ib2"}, pos("c-ib"))
	wantState(t, s, invC, map[string]string{"u1": "ic1", "u2": "ic2"}, pos("c-ic"))

	if err := s.Delete(testContext(t), invA, sink.Cursor{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantState(t, s, invA, map[string]string{}, pos(""))
	if got := rows(t, conn, schema, table, &invB); !reflect.DeepEqual(got, otherB) {
		t.Errorf("inventory B changed:\n%q\nwant\n%q", got, otherB)
	}
	if got := rows(t, conn, schema, table, &invC); !reflect.DeepEqual(got, otherC) {
		t.Errorf("inventory C changed:\n%q\nwant\n%q", got, otherC)
	}
}

func TestDelete(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)

	mustApply(t, s, invA, []sink.Change{upsert(item("u1", "h1")), upsert(item("u2", "h2"))}, pos("c1"))
	if err := s.Delete(ctx, invA, sink.Cursor{}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	// What stays is the emptied cursor row, which keeps the epoch.
	if got := rows(t, conn, schema, table, &invA); len(got) != 1 || !strings.HasPrefix(got[0], `(east,team-a,inv,Inventory,"",0,`) {
		t.Errorf("after Delete the inventory still has rows, or lost its cursor row: %q", got)
	}
	wantState(t, s, invA, map[string]string{}, pos(""))
	// Deleting again, or deleting an inventory never exported, is fine.
	if err := s.Delete(ctx, invA, sink.Cursor{}); err != nil {
		t.Errorf("second Delete: %v", err)
	}
	if err := s.Delete(ctx, invC, sink.Cursor{}); err != nil {
		t.Errorf("Delete of an unknown inventory: %v", err)
	}
	// A cleanup at epoch 5 fences a former leader's batch and Delete.
	if err := s.Delete(ctx, invA, sink.Cursor{Epoch: 5}); err != nil {
		t.Fatalf("Delete at epoch 5: %v", err)
	}
	if err := s.Apply(ctx, invA, []sink.Change{upsert(item("u1", "h1"))}, sink.Cursor{Position: "c2", Epoch: 4}); !errors.Is(err, sink.ErrFenced) {
		t.Errorf("a batch of epoch 4 after a Delete at epoch 5: %v, want ErrFenced", err)
	}
	if err := s.Delete(ctx, invA, sink.Cursor{Epoch: 4}); !errors.Is(err, sink.ErrFenced) {
		t.Errorf("a Delete of epoch 4 after one at epoch 5: %v, want ErrFenced", err)
	}
	wantState(t, s, invA, map[string]string{}, sink.Cursor{Epoch: 5})
}

func TestLargeApplyUsesCopy(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)
	// Another inventory's row with a UID of A's: not a conflict for A.
	mustApply(t, s, invB, []sink.Change{upsert(item("other", "h")), upsert(item("uid-00001", "hB"))}, pos("cb"))
	otherB := rows(t, conn, schema, table, &invB)

	const n = 10_000
	batch := func(suffix string) ([]sink.Change, map[string]string) {
		changes := make([]sink.Change, n)
		want := make(map[string]string, n)
		for i := range changes {
			uid := fmt.Sprintf("uid-%05d", i)
			changes[i] = upsert(item(uid, "h"+suffix+uid))
			want[uid] = "h" + suffix + uid
		}
		return changes, want
	}

	copies, direct, batches := s.copies.Load(), s.direct.Load(), s.batches.Load()
	changes, want := batch("1")
	mustApply(t, s, invA, changes, pos("c1"))
	if got := s.copies.Load() - copies; got != 1 {
		t.Errorf("a %d-item Apply used COPY %d times, want 1", n, got)
	}
	if got := s.direct.Load() - direct; got != 1 {
		t.Errorf("a first %d-item Apply copied straight into the table %d times, want 1", n, got)
	}
	if got := s.batches.Load() - batches; got != 0 {
		t.Errorf("a %d-item Apply sent %d INSERT batches, want 0", n, got)
	}
	if got := countRows(t, conn, schema, table, invA); got != n {
		t.Errorf("%d rows, want %d", got, n)
	}
	wantState(t, s, invA, want, pos("c1"))

	// Again with new hashes and a few deletes: every row conflicts.
	changes, want = batch("2")
	for _, uid := range []string{"uid-00000", "uid-05000", "uid-09999"} {
		changes = append(changes, del(uid))
		delete(want, uid)
	}
	mustApply(t, s, invA, changes, pos("c2"))
	if got := s.copies.Load() - copies; got != 2 {
		t.Errorf("two large Applies used COPY %d times, want 2", got)
	}
	if got := s.direct.Load() - direct; got != 1 {
		t.Errorf("an Apply of held rows copied straight into the table")
	}
	if got := countRows(t, conn, schema, table, invA); got != n-3 {
		t.Errorf("%d rows, want %d", got, n-3)
	}
	wantState(t, s, invA, want, pos("c2"))

	// New rows and one held row: merged, and nothing lost or doubled.
	var mixed []sink.Change
	for i := range copyThreshold + 1 {
		uid := fmt.Sprintf("new-%03d", i)
		mixed = append(mixed, upsert(item(uid, "h3"+uid)))
		want[uid] = "h3" + uid
	}
	mixed = append(mixed, upsert(item("uid-00002", "h3")))
	want["uid-00002"] = "h3"
	mustApply(t, s, invA, mixed, pos("c2b"))
	if got := s.direct.Load() - direct; got != 1 {
		t.Errorf("an Apply holding one held row copied straight into the table")
	}
	wantState(t, s, invA, want, pos("c2b"))
	n2 := len(want)

	// Small batches do not use COPY.
	mustApply(t, s, invA, []sink.Change{upsert(item("small", "h"))}, pos("c3"))
	if got := countRows(t, conn, schema, table, invA); got != n2+1 {
		t.Errorf("%d rows, want %d", got, n2+1)
	}
	if got := s.copies.Load() - copies; got != 3 {
		t.Errorf("a one-item Apply used COPY")
	}
	if got := s.batches.Load() - batches; got != 1 {
		t.Errorf("a one-item Apply sent %d INSERT batches, want 1", got)
	}
	if got := rows(t, conn, schema, table, &invB); !reflect.DeepEqual(got, otherB) {
		t.Errorf("inventory B changed:\n%q\nwant\n%q", got, otherB)
	}
}

func TestStateStreamsManyRows(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "items")

	const n = 100_000
	changes := make([]sink.Change, n)
	for i := range changes {
		changes[i] = upsert(item(fmt.Sprintf("uid-%06d", i), fmt.Sprintf("h%d", i)))
	}
	mustApply(t, s, invC, changes, pos("c1"))
	hashes, cursor := mustState(t, s, invC)
	if len(hashes) != n || cursor != pos("c1") {
		t.Fatalf("State: %d hashes and cursor %+v, want %d and c1 at epoch 0", len(hashes), cursor, n)
	}
	if hashes["uid-012345"] != "h12345" {
		t.Errorf("hash of uid-012345 = %q, want h12345", hashes["uid-012345"])
	}
}

func TestFailedApplyChangesNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		valid int // valid upserts before the invalid one
	}{
		{"batch", 5},
		{"copy", 2 * copyThreshold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := connect(t)
			schema := testSchema(t, conn)
			const table = "items"
			s := newSink(t, schema, table)
			mustApply(t, s, invA, []sink.Change{upsert(item("u1", "h1")), upsert(item("u2", "h2"))}, pos("c1"))
			before := rows(t, conn, schema, table, nil)

			changes := []sink.Change{del("u1"), upsert(item("u2", "h2-new"))}
			for i := range tc.valid {
				changes = append(changes, upsert(item(fmt.Sprintf("new-%d", i), "h")))
			}
			bad := item("bad", "h")
			bad.Attributes = json.RawMessage(`{"not": json`)
			changes = append(changes, upsert(bad))
			copies := s.copies.Load()
			err := s.Apply(testContext(t), invA, changes, pos("c2"))
			if err == nil {
				t.Fatal("Apply with invalid JSON succeeded")
			}
			if tc.name == "copy" && s.copies.Load() == copies {
				t.Error("the large failing batch did not use COPY")
			}
			if got := rows(t, conn, schema, table, nil); !reflect.DeepEqual(got, before) {
				t.Errorf("a failed Apply changed the tables:\n%q\nwant\n%q", got, before)
			}
			wantState(t, s, invA, map[string]string{"u1": "h1", "u2": "h2"}, pos("c1"))

			// The Sink still works after the rollback.
			mustApply(t, s, invA, changes[:len(changes)-1], pos("c2"))
			hashes, cursor := mustState(t, s, invA)
			if len(hashes) != 1+tc.valid || hashes["u2"] != "h2-new" || cursor != pos("c2") {
				t.Errorf("after a valid retry: %d hashes, u2 = %q, cursor %+v", len(hashes), hashes["u2"], cursor)
			}
		})
	}
}

func TestDuplicateUIDsLastWins(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "items")

	mustApply(t, s, invA, []sink.Change{upsert(item("gone", "h"))}, pos("c0"))
	mustApply(t, s, invA, []sink.Change{
		upsert(item("u1", "first")),
		upsert(item("u2", "first")),
		upsert(item("u1", "last")),
		del("u2"),
		del("u3"),
		upsert(item("u3", "back")),
		upsert(item("gone", "h2")),
		del("gone"),
	}, pos("c1"))
	wantState(t, s, invA, map[string]string{"u1": "last", "u3": "back"}, pos("c1"))

	// The COPY path too: every UID twice in one batch.
	var changes []sink.Change
	want := map[string]string{}
	for round := range 2 {
		for i := range copyThreshold + 1 {
			uid := fmt.Sprintf("dup-%03d", i)
			changes = append(changes, upsert(item(uid, fmt.Sprintf("r%d", round))))
			want[uid] = fmt.Sprintf("r%d", round)
		}
	}
	copies := s.copies.Load()
	mustApply(t, s, invB, changes, pos("c2"))
	if s.copies.Load() == copies {
		t.Error("the duplicate-laden large batch did not use COPY")
	}
	wantState(t, s, invB, want, pos("c2"))
}

func TestConcurrentFirstUse(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	// Several fresh tables, each raced by two Sinks, to make the race
	// likely: both create the schema and tables.
	for round := range 5 {
		table := fmt.Sprintf("raced_%d", round)
		sinks := []*Sink{newSink(t, schema, table), newSink(t, schema, table)}
		start := make(chan struct{})
		errs := make([]error, len(sinks))
		var wg sync.WaitGroup
		for i, s := range sinks {
			wg.Go(func() {
				<-start
				inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: fmt.Sprintf("inv-%d", i)}
				errs[i] = s.Apply(testContext(t), inv, []sink.Change{upsert(item("u", "h"))}, pos("c"))
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d: Sink %d: %v", round, i, err)
			}
		}
	}
}

// TestErrorsHideCredentials: pgx errors may carry the connection
// configuration, so every error the Sink returns must be free of the
// password and the DSN.
func TestErrorsHideCredentials(t *testing.T) {
	connect(t) // the real server must be up for the role test below
	suffix := randomSuffix(t)
	user := "kollect_bad_user_" + suffix
	password := "s3cret-" + suffix
	odd := "s3cret-" + suffix + "/@:%#&?= '"
	realCfg, err := pgx.ParseConfig(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	realHost := fmt.Sprintf("%s:%d", realCfg.Host, realCfg.Port)

	for _, tc := range []struct {
		name      string
		endpoint  string
		secret    sink.Secret
		password  string
		permanent bool
	}{{
		name:     "dsn to a closed port",
		secret:   sink.Secret{"dsn": []byte("postgres://" + user + ":" + password + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")},
		password: password,
	}, {
		name:     "keyword dsn to a closed port",
		secret:   sink.Secret{"dsn": []byte("host=127.0.0.1 port=1 dbname=test sslmode=disable connect_timeout=2 user=" + user + " password=" + password)},
		password: password,
	}, {
		name:     "percent-encoded password",
		secret:   sink.Secret{"dsn": []byte("postgres://" + url.UserPassword(user, odd).String() + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=2")},
		password: odd,
	}, {
		// pgx redacts passwords in parse errors only on a best-effort basis.
		name:      "unparsable dsn with an ambiguous password",
		secret:    sink.Secret{"dsn": []byte("postgres://" + user + ":" + odd + "@127.0.0.1:1/test")},
		password:  odd,
		permanent: true,
	}, {
		name:     "endpoint and secret to a closed port",
		endpoint: "postgres://127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
		secret:   sink.Secret{"username": []byte(user), "password": []byte(odd)},
		password: odd,
	}, {
		// Trust authentication accepts any password, but an unknown role
		// is still rejected (SQLSTATE 28000): a real authentication failure.
		name:      "unknown role on the real server",
		secret:    sink.Secret{"dsn": []byte("postgres://" + user + ":" + password + "@" + realHost + "/" + realCfg.Database + "?sslmode=disable&connect_timeout=5")},
		password:  password,
		permanent: true,
	}, {
		name:      "unparsable dsn",
		secret:    sink.Secret{"dsn": []byte("postgres://" + user + ":" + password + "@127.0.0.1:notaport/test")},
		password:  password,
		permanent: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			spec := &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, Endpoint: tc.endpoint}
			var errs []error
			s, err := New(ctx, spec, tc.secret, loopbackDialer)
			if err != nil {
				errs = append(errs, err)
			} else {
				defer func() { _ = s.Close() }()
				errs = append(errs, s.Probe(ctx))
				_, _, err := s.State(ctx, invA)
				errs = append(errs, err)
				errs = append(errs, s.Apply(ctx, invA, []sink.Change{upsert(item("u", "h"))}, pos("c")))
				errs = append(errs, s.Delete(ctx, invA, sink.Cursor{}))
			}
			for _, err := range errs {
				if err == nil {
					t.Fatal("got no error")
				}
				msg := err.Error()
				for _, secret := range append(strings.FieldsFunc(tc.password, isDelimiter), tc.password,
					url.PathEscape(tc.password), url.QueryEscape(tc.password), tc.secret.Get("dsn")) {
					if len(secret) > 3 && strings.Contains(msg, secret) {
						t.Errorf("error contains a credential: %s", msg)
					}
				}
				if got := errors.Is(err, sink.ErrPermanent); got != tc.permanent {
					t.Errorf("errors.Is(err, ErrPermanent) = %v, want %v: %s", got, tc.permanent, msg)
				}
				// Nothing in the chain may expose the original error.
				var pgErr *pgconn.PgError
				var connectErr *pgconn.ConnectError
				if errors.As(err, &pgErr) || errors.As(err, &connectErr) {
					t.Errorf("error unwraps to a pgx error: %s", msg)
				}
			}
		})
	}
}

// isDelimiter splits a password into the fragments a mangled parse error
// might echo.
func isDelimiter(r rune) bool { return strings.ContainsRune("/@:%#&?= '", r) }

func TestInvalidConfigurationIsPermanent(t *testing.T) {
	ctx := testContext(t)
	dsn := sink.Secret{"dsn": []byte(testDSN())}
	pg := v1alpha1.DatabaseSinkPostgres
	for _, tc := range []struct {
		name   string
		spec   *v1alpha1.DatabaseSinkSpec
		secret sink.Secret
	}{
		{"no spec", nil, dsn},
		{"wrong type", &v1alpha1.DatabaseSinkSpec{Type: "mysql"}, dsn},
		{"no endpoint and no dsn", &v1alpha1.DatabaseSinkSpec{Type: pg}, sink.Secret{"password": []byte("x")}},
		{"endpoint not a URL", &v1alpha1.DatabaseSinkSpec{Type: pg, Endpoint: "host=db"}, nil},
		{"password in endpoint", &v1alpha1.DatabaseSinkSpec{Type: pg, Endpoint: "postgres://u:p@db/x"}, nil},
		{"password parameter in endpoint", &v1alpha1.DatabaseSinkSpec{Type: pg, Endpoint: "postgres://db/x?password=p"}, nil},
		{"bad CA bundle", &v1alpha1.DatabaseSinkSpec{Type: pg, TLS: &v1alpha1.TLSConfig{CABundle: []byte("junk")}}, dsn},
		{"table too long for its cursor table", &v1alpha1.DatabaseSinkSpec{Type: pg,
			Postgres: &v1alpha1.PostgresSinkConfig{Table: strings.Repeat("t", 56)}}, dsn},
		{"schema too long", &v1alpha1.DatabaseSinkSpec{Type: pg,
			Postgres: &v1alpha1.PostgresSinkConfig{Schema: strings.Repeat("s", 64)}}, dsn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(ctx, tc.spec, tc.secret, loopbackDialer)
			if err == nil {
				_ = s.Close()
				t.Fatal("New succeeded")
			}
			if !errors.Is(err, sink.ErrPermanent) {
				t.Errorf("error is not permanent: %v", err)
			}
		})
	}

	// Authentication failures are permanent by SQLSTATE; a dropped
	// connection is not.
	s := &Sink{}
	for code, want := range map[string]bool{"28P01": true, "28000": true, "08006": false, "40001": false} {
		err := s.wrap("op", fmt.Errorf("connect: %w", &pgconn.PgError{Code: code}))
		if got := errors.Is(err, sink.ErrPermanent); got != want {
			t.Errorf("SQLSTATE %s: permanent = %v, want %v", code, got, want)
		}
		// Probes show the class and the code, never the server's text.
		wantClass := map[bool]string{true: "Auth", false: "Protocol: the server answered SQLSTATE " + code}[want]
		if c := sink.Classify(err); c.Error() != wantClass {
			t.Errorf("SQLSTATE %s: classified %q, want %q", code, c, wantClass)
		}
	}
	// Context errors survive the wrapping.
	if err := s.wrap("op", fmt.Errorf("x: %w", context.DeadlineExceeded)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("wrapped deadline error lost: %v", err)
	}
}

func TestTLSFromSpec(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	var ssl string
	if err := conn.QueryRow(ctx, "SHOW ssl").Scan(&ssl); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	// An endpoint without credentials and with sslmode=disable: spec.tls
	// overrides the DSN, so every attempt uses TLS.
	endpoint := (&url.URL{
		Scheme:   "postgres",
		Host:     fmt.Sprintf("%s:%d", cfg.Host, cfg.Port),
		Path:     "/" + cfg.Database,
		RawQuery: "sslmode=disable",
	}).String()
	spec := &v1alpha1.DatabaseSinkSpec{
		Type:     v1alpha1.DatabaseSinkPostgres,
		Endpoint: endpoint,
		TLS:      &v1alpha1.TLSConfig{InsecureSkipVerify: true},
	}
	s, err := New(ctx, spec, sink.Secret{"username": []byte(cfg.User), "password": []byte(cfg.Password)}, loopbackDialer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer func() { _ = s.Close() }()
	cc := s.pool.Config().ConnConfig
	if cc.TLSConfig == nil || cc.TLSConfig.ServerName != cfg.Host {
		t.Errorf("TLS config = %+v, want one with ServerName %q", cc.TLSConfig, cfg.Host)
	}
	for _, fb := range cc.Fallbacks {
		if fb.TLSConfig == nil {
			t.Errorf("fallback %s:%d is plaintext", fb.Host, fb.Port)
		}
	}
	if ssl != "on" {
		t.Fatalf("the server at KOLLECT_TEST_POSTGRES_DSN has ssl off; this test needs TLS on (Debian's cluster enables it with a snakeoil certificate)")
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe over TLS: %v", err)
	}
	var usesTLS bool
	if err := s.pool.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&usesTLS); err != nil {
		t.Fatal(err)
	}
	if !usesTLS {
		t.Error("the connection does not use TLS")
	}
}
