package postgres

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// createOldLayout creates schema.table and its cursor table with the DDL
// of the previous layout (no cluster, no epoch), holding n items of
// invA and one of invB, and both cursors.
func createOldLayout(t *testing.T, conn *pgx.Conn, schema, table string, n int) {
	t.Helper()
	ctx := testContext(t)
	tbl, cursors := pgx.Identifier{schema, table}.Sanitize(), pgx.Identifier{schema, table + cursorsSuffix}.Sanitize()
	for _, stmt := range []string{
		"CREATE SCHEMA IF NOT EXISTS " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE ` + tbl + ` (
	inventory_kind text,
	inventory_namespace text NOT NULL,
	inventory_name text NOT NULL,
	item_uid text NOT NULL,
	item_namespace text NOT NULL,
	item_name text NOT NULL,
	item_resource_version text NOT NULL,
	target text,
	profile text,
	source_api_version text,
	source_kind text,
	source_namespace text,
	source_name text,
	source_uid text,
	attributes jsonb,
	object jsonb,
	hash text NOT NULL,
	exported_at timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (inventory_namespace, inventory_name, item_uid)
)`,
		`CREATE TABLE ` + cursors + ` (
	inventory_namespace text NOT NULL,
	inventory_name text NOT NULL,
	inventory_kind text,
	"cursor" text NOT NULL,
	updated_at timestamptz NOT NULL,
	PRIMARY KEY (inventory_namespace, inventory_name)
)`,
		`INSERT INTO ` + cursors + ` VALUES ('team-a', 'inv', 'Inventory', 'old-a', now()), ('team-b', 'inv', 'Inventory', 'old-b', now())`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatalf("old layout: %v", err)
		}
	}
	_, err := conn.Exec(ctx, `INSERT INTO `+tbl+` (inventory_kind, inventory_namespace, inventory_name, item_uid,
		item_namespace, item_name, item_resource_version, attributes, hash)
		SELECT 'Inventory', 'team-a', 'inv', 'u' || i, 'default', 'deploy-u' || i, '1', '{"n": 1}'::jsonb, 'h' || i
		FROM generate_series(1, $1) i
		UNION ALL SELECT 'Inventory', 'team-b', 'inv', 'b1', 'default', 'deploy-b1', '1', NULL, 'hb1'`, n)
	if err != nil {
		t.Fatalf("old rows: %v", err)
	}
}

func oldHashes(n int) map[string]string {
	want := map[string]string{}
	for i := 1; i <= n; i++ {
		want[fmt.Sprintf("u%d", i)] = fmt.Sprintf("h%d", i)
	}
	return want
}

// A table of the previous layout, with rows, is migrated on first use:
// its rows and cursors become the migrating cluster's, the keys include
// the cluster, and everything works on it, for that cluster and others.
func TestMigratesOldLayout(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "legacy"
	createOldLayout(t, conn, schema, table, 3)

	sEast := newSink(t, schema, table)
	wantState(t, sEast, invA, oldHashes(3), pos("old-a"))
	wantState(t, sEast, invB, map[string]string{"b1": "hb1"}, pos("old-b"))
	wantKeys(t, conn, schema, table)
	if got, want := clusterCounts(t, conn, schema, table), []string{"east=4/2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows per cluster after migration = %q, want %q", got, want)
	}
	// The migration's default is gone: every writer must name its cluster.
	rs, err := conn.Query(ctx, `SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '-')
		FROM information_schema.columns WHERE table_schema = $1 AND column_name IN ('cluster', 'epoch') ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"legacy.cluster text NO -", "legacy_cursors.cluster text NO -", "legacy_cursors.epoch bigint NO 0"}; !reflect.DeepEqual(cols, want) {
		t.Errorf("new columns = %q, want %q", cols, want)
	}

	// Apply and State work on the migrated table, both paths.
	mustApply(t, sEast, invA, []sink.Change{upsert(item("u1", "h1b")), del("u2")}, sink.Cursor{Position: "new-a", Epoch: 2})
	wantState(t, sEast, invA, map[string]string{"u1": "h1b", "u3": "h3"}, sink.Cursor{Position: "new-a", Epoch: 2})
	var changes []sink.Change
	for i := range copyThreshold + 1 {
		changes = append(changes, upsert(item(fmt.Sprintf("c%d", i), "hc")))
	}
	copies := sEast.copies.Load()
	mustApply(t, sEast, invB, changes, sink.Cursor{Position: "new-b", Epoch: 2})
	if sEast.copies.Load() == copies {
		t.Error("the large batch did not use COPY")
	}
	if hashes, _ := mustState(t, sEast, invB); len(hashes) != copyThreshold+2 || hashes["b1"] != "hb1" {
		t.Errorf("invB after COPY: %d rows, b1 = %q; want %d and hb1", len(hashes), hashes["b1"], copyThreshold+2)
	}

	// Another cluster's Sink on the migrated table: it migrates nothing
	// again, sees none of east's rows and writes its own beside them.
	eastBefore := rows(t, conn, schema, table, nil)
	west := inCluster(invA, "west")
	sWest := newSink(t, schema, table)
	wantState(t, sWest, west, map[string]string{}, pos(""))
	if got := rows(t, conn, schema, table, nil); !reflect.DeepEqual(got, eastBefore) {
		t.Errorf("a second Sink on the migrated table changed it")
	}
	mustApply(t, sWest, west, []sink.Change{upsert(item("u1", "west"))}, sink.Cursor{Position: "w", Epoch: 1})
	wantState(t, sWest, west, map[string]string{"u1": "west"}, sink.Cursor{Position: "w", Epoch: 1})
	wantState(t, sEast, invA, map[string]string{"u1": "h1b", "u3": "h3"}, sink.Cursor{Position: "new-a", Epoch: 2})
	wantKeys(t, conn, schema, table)
}

// Two Sinks of different clusters migrate one old table at once, several
// times over: each time one of them migrates, the other then finds the
// new layout, and the table ends correct with every old row in one
// cluster.
func TestConcurrentMigrators(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	const n = 50
	wins := map[string]int{}
	for round := range 6 {
		table := fmt.Sprintf("legacy_%d", round)
		createOldLayout(t, conn, schema, table, n)
		// A quote and a backslash: the migration's literal is quoted right.
		invs := []sink.Inventory{invA, inCluster(invA, `we'st\`)}
		sinks := []*Sink{newSink(t, schema, table), newSink(t, schema, table)}
		hashes := make([]map[string]string, 2)
		errs := make([]error, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range sinks {
			wg.Go(func() {
				<-start
				hashes[i], _, errs[i] = sinks[i].State(testContext(t), invs[i])
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: %s migrating: %v", round, invs[i].Cluster, err)
			}
		}
		wantKeys(t, conn, schema, table)
		counts := clusterCounts(t, conn, schema, table)
		if len(counts) != 1 || !strings.HasSuffix(counts[0], fmt.Sprintf("=%d/2", n+1)) {
			t.Fatalf("round %d: rows per cluster = %q, want every old row in one cluster", round, counts)
		}
		winner := strings.SplitN(counts[0], "=", 2)[0]
		wins[winner]++
		for i, inv := range invs {
			want := map[string]string{}
			if inv.Cluster == winner {
				want = oldHashes(n)
			}
			if !reflect.DeepEqual(hashes[i], want) {
				t.Errorf("round %d: %s's State saw %d rows, want %d", round, inv.Cluster, len(hashes[i]), len(want))
			}
			// Both write afterwards.
			mustApply(t, sinks[i], inv, []sink.Change{upsert(item("after", "h-after"))}, sink.Cursor{Position: "p", Epoch: 1})
		}
		if got := clusterCounts(t, conn, schema, table); len(got) != 2 {
			t.Errorf("round %d: after both wrote, rows per cluster = %q, want two clusters", round, got)
		}
	}
	t.Logf("migrations won: %v", wins)
}
