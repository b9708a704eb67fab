package postgres

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// wantKeys checks the primary keys of table and its cursor table.
func wantKeys(t *testing.T, conn *pgx.Conn, schema, table string) {
	t.Helper()
	for tbl, want := range map[string]string{
		table:                 "PRIMARY KEY (cluster, inventory_namespace, inventory_name, item_uid)",
		table + cursorsSuffix: "PRIMARY KEY (cluster, inventory_namespace, inventory_name)",
	} {
		var pk string
		err := conn.QueryRow(testContext(t), `SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = to_regclass($1) AND contype = 'p'`, pgx.Identifier{schema, tbl}.Sanitize()).Scan(&pk)
		if err != nil {
			t.Fatalf("primary key of %s: %v", tbl, err)
		}
		if pk != want {
			t.Errorf("primary key of %s = %q, want %q", tbl, pk, want)
		}
	}
}

// clusterCounts is the number of rows per cluster in table and its
// cursor table, as "cluster=items/cursors".
func clusterCounts(t *testing.T, conn *pgx.Conn, schema, table string) []string {
	t.Helper()
	rs, err := conn.Query(testContext(t), `SELECT coalesce(i.cluster, c.cluster) || '=' || coalesce(i.n, 0) || '/' || coalesce(c.n, 0)
		FROM (SELECT cluster, count(*) n FROM `+pgx.Identifier{schema, table}.Sanitize()+` GROUP BY 1) i
		FULL JOIN (SELECT cluster, count(*) n FROM `+pgx.Identifier{schema, table + cursorsSuffix}.Sanitize()+` GROUP BY 1) c
		USING (cluster) ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func inCluster(inv sink.Inventory, cluster string) sink.Inventory {
	inv.Cluster = cluster
	return inv
}

// Two clusters, each with its own server and Sink, export a same-named
// inventory holding the same item UIDs into one table: the fleet model.
// Neither reads, overwrites or deletes the other's rows or cursor.
func TestClustersShareTable(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "fleet"
	east, west := invA, inCluster(invA, "west")
	sEast, sWest := newSink(t, schema, table), newSink(t, schema, table)

	var eastItems, westItems []sink.Change
	wantEast, wantWest := map[string]string{}, map[string]string{}
	for i := range 5 {
		uid := fmt.Sprintf("u%d", i)
		eastItems = append(eastItems, upsert(item(uid, "east-"+uid)))
		westItems = append(westItems, upsert(item(uid, "west-"+uid)))
		wantEast[uid], wantWest[uid] = "east-"+uid, "west-"+uid
	}
	mustApply(t, sEast, east, eastItems, sink.Cursor{Position: "e1", Epoch: 3})
	// West's older epoch is not fenced by east's: each cluster has its own
	// cursor row.
	mustApply(t, sWest, west, westItems, sink.Cursor{Position: "w1", Epoch: 1})
	wantState(t, sEast, east, wantEast, sink.Cursor{Position: "e1", Epoch: 3})
	wantState(t, sWest, west, wantWest, sink.Cursor{Position: "w1", Epoch: 1})
	if got, want := clusterCounts(t, conn, schema, table), []string{"east=5/1", "west=5/1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows per cluster = %q, want %q", got, want)
	}
	wantKeys(t, conn, schema, table)

	// East's full sync: its State shows only its rows, and the deletes it
	// derives (and one for a UID only west holds) touch only its rows.
	westBefore := rows(t, conn, schema, table, &west)
	hashes, _ := mustState(t, sEast, east)
	live := map[string]bool{"u0": true, "u1": true}
	var changes []sink.Change
	for uid := range hashes {
		if !live[uid] {
			changes = append(changes, del(uid))
		}
	}
	changes = append(changes, upsert(item("u1", "east-u1b")), del("west-only"))
	mustApply(t, sEast, east, changes, sink.Cursor{Position: "e2", Epoch: 3})
	wantState(t, sEast, east, map[string]string{"u0": "east-u0", "u1": "east-u1b"}, sink.Cursor{Position: "e2", Epoch: 3})
	if got := rows(t, conn, schema, table, &west); !reflect.DeepEqual(got, westBefore) {
		t.Errorf("east's sync changed west's rows:\n%q\nwant\n%q", got, westBefore)
	}

	// The COPY path: west rewrites many rows, some with east's UIDs.
	eastBefore := rows(t, conn, schema, table, &east)
	changes = nil
	for i := range copyThreshold + 1 {
		changes = append(changes, upsert(item(fmt.Sprintf("u%d", i), "west2")))
	}
	copies := sWest.copies.Load()
	mustApply(t, sWest, west, changes, sink.Cursor{Position: "w2", Epoch: 1})
	if sWest.copies.Load() == copies {
		t.Error("west's large batch did not use COPY")
	}
	if got := rows(t, conn, schema, table, &east); !reflect.DeepEqual(got, eastBefore) {
		t.Errorf("west's COPY changed east's rows:\n%q\nwant\n%q", got, eastBefore)
	}
	if hashes, _ := mustState(t, sWest, west); len(hashes) != copyThreshold+1 || hashes["u0"] != "west2" {
		t.Errorf("west after COPY: %d rows, u0 = %q; want %d and west2", len(hashes), hashes["u0"], copyThreshold+1)
	}

	// Deleting east's inventory keeps west's rows and cursor.
	westBefore = rows(t, conn, schema, table, &west)
	if err := sEast.Delete(ctx, east, sink.Cursor{Epoch: 3}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	wantState(t, sEast, east, map[string]string{}, sink.Cursor{Epoch: 3})
	if got := rows(t, conn, schema, table, &west); !reflect.DeepEqual(got, westBefore) {
		t.Errorf("east's Delete changed west's rows")
	}
	if got, want := clusterCounts(t, conn, schema, table), []string{"east=0/1", fmt.Sprintf("west=%d/1", copyThreshold+1)}; !reflect.DeepEqual(got, want) {
		t.Errorf("rows per cluster after east's Delete (east keeps its emptied cursor) = %q, want %q", got, want)
	}
}

// An inventory without a cluster is the exporter's bug: refused by every
// call, before anything is created or read.
func TestRejectsUnkeyableInventory(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	s := newSink(t, schema, "items")
	for name, tc := range map[string]struct {
		inv  sink.Inventory
		text string
	}{
		"no cluster":       {inCluster(invA, ""), "has no cluster"},
		"NUL in cluster":   {inCluster(invA, "ea\x00st"), "cluster contains a NUL"},
		"NUL in namespace": {sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "a\x00", Name: "inv"}, "namespace contains a NUL"},
		"NUL in name":      {sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "a", Name: "i\x00nv"}, "name contains a NUL"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, errState := s.State(ctx, tc.inv)
			for op, err := range map[string]error{
				"State":  errState,
				"Apply":  s.Apply(ctx, tc.inv, []sink.Change{upsert(item("u", "h"))}, pos("c")),
				"Delete": s.Delete(ctx, tc.inv, sink.Cursor{}),
			} {
				if err == nil || !strings.Contains(err.Error(), tc.text) || !errors.Is(err, sink.ErrPermanent) {
					t.Errorf("%s: %v, want a permanent error saying %q", op, err, tc.text)
				}
			}
		})
	}
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Error("a refused call created the schema")
	}
}

// The type is registered: the exporter builds it by name.
func TestRegistered(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	if types := sink.Databases.Types(); !reflect.DeepEqual(types, []string{"postgres"}) {
		t.Errorf("registered database types = %q, want [postgres]", types)
	}
	spec := &v1alpha1.DatabaseSinkSpec{
		Type:     v1alpha1.DatabaseSinkPostgres,
		Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema, Table: "built"},
	}
	ds, err := sink.Databases.Build(ctx, "postgres", spec, sink.Params{Secret: sink.Secret{"dsn": []byte(testDSN())}, Dialer: loopbackDialer})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	defer func() { _ = ds.Close() }()
	if err := ds.Apply(ctx, invA, []sink.Change{upsert(item("u1", "h1"))}, sink.Cursor{Position: "c1", Epoch: 7}); err != nil {
		t.Fatalf("Apply through the registry: %v", err)
	}
	hashes, cursor, err := ds.State(ctx, invA)
	if err != nil || !reflect.DeepEqual(hashes, map[string]string{"u1": "h1"}) || cursor != (sink.Cursor{Position: "c1", Epoch: 7}) {
		t.Errorf("State through the registry = %v, %+v, %v", hashes, cursor, err)
	}
	// A failed build returns a nil interface, not a nil *Sink in one.
	ds2, err := sink.Databases.Build(ctx, "postgres", spec, sink.Params{Secret: sink.Secret{"dsn": []byte(testDSN())}})
	if !errors.Is(err, sink.ErrPermanent) || ds2 != nil {
		t.Errorf("Build without a dialer = %v, %v; want a nil sink and a permanent error", ds2, err)
	}
}
