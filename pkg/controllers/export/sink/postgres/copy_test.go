package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// bigBatch is n upserts of new items, enough to take the COPY path.
func bigBatch(prefix string, n int) []sink.Change {
	var changes []sink.Change
	for i := range n {
		changes = append(changes, upsert(item(fmt.Sprintf("%s-%04d", prefix, i), "h")))
	}
	return changes
}

// TestCopyUnderRowLevelSecurity: a table several clusters share, each
// cluster's role confined to its rows by row-level security. PostgreSQL
// refuses COPY FROM into such a table; a first large export still lands,
// through the staging table.
func TestCopyUnderRowLevelSecurity(t *testing.T) {
	ctx := testContext(t)
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	owner := newSink(t, schema, table)
	mustApply(t, owner, invB, []sink.Change{upsert(item("x", "h"))}, pos("c0")) // creates the tables

	role := "kollect_rls_" + randomSuffix(t)
	q := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	r, s, tb, cur := pgx.Identifier{role}.Sanitize(), pgx.Identifier{schema}.Sanitize(), pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{schema, table + "_cursors"}.Sanitize()
	q("CREATE ROLE " + r + " LOGIN")
	t.Cleanup(func() {
		// The test's context is done by now.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, sql := range []string{"DROP OWNED BY " + r, "DROP ROLE " + r} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Errorf("%s: %v", sql, err)
			}
		}
	})
	q("GRANT USAGE ON SCHEMA " + s + " TO " + r)
	q("GRANT SELECT, INSERT, UPDATE, DELETE ON " + tb + ", " + cur + " TO " + r)
	q("ALTER TABLE " + tb + " ENABLE ROW LEVEL SECURITY")
	q("CREATE POLICY east ON " + tb + " TO " + r + " USING (cluster = 'east') WITH CHECK (cluster = 'east')")

	spec := &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema, Table: table}}
	dsn := fmt.Sprintf("postgres://%s@127.0.0.1:5432/test?sslmode=disable", role)
	confined, err := New(ctx, spec, sink.Secret{"dsn": []byte(dsn)}, loopbackDialer)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = confined.Close() })

	// A small batch works either way.
	mustApply(t, confined, invA, []sink.Change{upsert(item("small", "h"))}, pos("c1"))
	// A first large export of a new inventory.
	if err := confined.Apply(ctx, invA, bigBatch("new", copyThreshold+50), pos("c2")); err != nil {
		t.Fatalf("a large first export into a table under row-level security: %v", err)
	}
	if got := countRows(t, conn, schema, table, invA); got != copyThreshold+51 {
		t.Errorf("%d rows, want %d", got, copyThreshold+51)
	}
}

// TestCopyWithoutExportedAtDefault: a table whose exported_at has no
// default (a DBA's) takes large batches through the staging merge, which
// sets it; one that loses the default under a running sink fails one
// batch, and the next goes through the merge.
func TestCopyWithoutExportedAtDefault(t *testing.T) {
	ctx := testContext(t)
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	running := newSink(t, schema, table)
	mustApply(t, running, invB, []sink.Change{upsert(item("x", "h"))}, pos("c0"))
	if _, err := conn.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, table}.Sanitize()+" ALTER COLUMN exported_at DROP DEFAULT"); err != nil {
		t.Fatal(err)
	}
	fresh := newSink(t, schema, table)
	mustApply(t, fresh, invA, bigBatch("new", copyThreshold+50), pos("c1"))
	if fresh.direct.Load() != 0 {
		t.Error("COPY went straight into a table without the exported_at default")
	}
	if got := countRows(t, conn, schema, table, invA); got != copyThreshold+50 {
		t.Errorf("%d rows, want %d", got, copyThreshold+50)
	}

	inv := invA
	inv.Name = "other"
	if err := running.Apply(ctx, inv, bigBatch("n", copyThreshold+50), pos("c2")); err == nil {
		t.Error("a COPY without exported_at into a table without its default succeeded")
	}
	mustApply(t, running, inv, bigBatch("n", copyThreshold+50), pos("c2"))
	if got := countRows(t, conn, schema, table, inv); got != copyThreshold+50 {
		t.Errorf("%d rows after the retry, want %d", got, copyThreshold+50)
	}
}

// TestCopyIntoUUIDColumn: a DBA's table whose item_uid is a uuid takes
// large batches and deletes (the UIDs compare as text).
func TestCopyIntoUUIDColumn(t *testing.T) {
	ctx := testContext(t)
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	mustApply(t, newSink(t, schema, table), invB, nil, pos("c0")) // creates the tables
	if _, err := conn.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, table}.Sanitize()+" ALTER COLUMN item_uid TYPE uuid USING item_uid::uuid"); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, schema, table)
	var changes []sink.Change
	for i := range copyThreshold + 10 {
		changes = append(changes, upsert(item(fmt.Sprintf("00000000-0000-0000-0000-%012d", i), "h")))
	}
	mustApply(t, s, invA, changes, pos("c1"))
	mustApply(t, s, invA, changes, pos("c2")) // held: the merge
	mustApply(t, s, invA, []sink.Change{del("00000000-0000-0000-0000-000000000000")}, pos("c3"))
	if got := countRows(t, conn, schema, table, invA); got != copyThreshold+9 {
		t.Errorf("%d rows, want %d", got, copyThreshold+9)
	}
}

// TestCopyNULTwins: two item UIDs equal but for a NUL are one row once the
// NUL is dropped (see nul.go); in one large batch the last one wins
// instead of failing the batch on a duplicate key.
func TestCopyNULTwins(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "items")
	changes := append(bigBatch("n", copyThreshold+10), upsert(item("twin", "h1")), upsert(item("twin\x00", "h2")))
	mustApply(t, s, invA, changes, pos("c1"))
	if hashes, _ := mustState(t, s, invA); hashes["twin"] != "h2" || len(hashes) != copyThreshold+11 {
		t.Errorf("twin = %q of %d rows; want h2 of %d", hashes["twin"], len(hashes), copyThreshold+11)
	}
}

// TestHeldProbeUsesTheKey: the probe that decides whether a large batch
// goes straight into the table looks up each UID in the primary key, in
// the generic plan the statement cache ends up with. Filtering every row
// of the inventory through "item_uid = ANY($4)" instead made a first
// export of 100,000 items take 80 s (each batch scanning all the rows
// before it).
func TestHeldProbeUsesTheKey(t *testing.T) {
	ctx := testContext(t)
	conn := connect(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "items")
	mustApply(t, s, invA, bigBatch("held", copyThreshold+1), pos("c1"))
	for _, sql := range []string{
		"SET plan_cache_mode = force_generic_plan",
		"PREPARE held (text, text, text, text[]) AS " + s.anyHeldSQL,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	rows, err := conn.Query(ctx, "EXPLAIN EXECUTE held('east', 'team-a', 'inv', '{held-0001,new}')")
	if err != nil {
		t.Fatal(err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	keyed := false
	for _, line := range plan {
		keyed = keyed || strings.Contains(line, "Index Cond:") && strings.Contains(line, "item_uid")
	}
	if !keyed {
		t.Errorf("the probe does not look item_uid up in an index:\n%s", strings.Join(plan, "\n"))
	}
}

// TestCopyTrustsAbsent: upserts the caller marks Absent (it read the table
// in its epoch) go straight in without a probe; were one there after all (a
// second sink naming the same table writes it in the same epoch), the batch
// is merged instead, in the same transaction.
func TestCopyTrustsAbsent(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)
	absent := func(changes []sink.Change) []sink.Change {
		for i := range changes {
			changes[i].Absent = true
		}
		return changes
	}
	direct := s.direct.Load()
	mustApply(t, s, invA, absent(bigBatch("a", 500)), pos("c1"))
	if got := s.direct.Load() - direct; got != 1 {
		t.Errorf("500 Absent upserts copied straight in %d times, want 1", got)
	}

	// A wrong Absent: "a-0007" is held.
	direct = s.direct.Load()
	mustApply(t, s, invA, absent(append(bigBatch("b", 300), upsert(item("a-0007", "h2")))), pos("c2"))
	if got := s.direct.Load() - direct; got != 0 {
		t.Errorf("a batch with a held item marked Absent was copied straight in %d times, want 0 (merged)", got)
	}
	want := map[string]string{}
	for i := range 500 {
		want[fmt.Sprintf("a-%04d", i)] = "h"
	}
	for i := range 300 {
		want[fmt.Sprintf("b-%04d", i)] = "h"
	}
	want["a-0007"] = "h2"
	wantState(t, s, invA, want, pos("c2"))
}
