package postgres

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// A batch from an older epoch than the stored one is refused with
// ErrFenced and changes nothing, on both upsert paths; the current epoch
// and newer ones write.
func TestFencing(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)

	mustApply(t, s, invA, []sink.Change{upsert(item("u1", "h1")), upsert(item("u2", "h2"))}, sink.Cursor{Position: "p2", Epoch: 2})
	before := rows(t, conn, schema, table, nil)

	var large []sink.Change
	for i := range copyThreshold + 1 {
		large = append(large, upsert(item(fmt.Sprintf("stale-%d", i), "stale")))
	}
	copies, batches := s.copies.Load(), s.batches.Load()
	for name, changes := range map[string][]sink.Change{
		"batch": {upsert(item("u1", "stale")), del("u2"), upsert(item("u3", "stale"))},
		"copy":  append([]sink.Change{del("u1")}, large...),
		"empty": nil,
	} {
		err := s.Apply(ctx, invA, changes, sink.Cursor{Position: "p1", Epoch: 1})
		if !errors.Is(err, sink.ErrFenced) {
			t.Fatalf("%s: Apply at epoch 1 after epoch 2 = %v, want ErrFenced", name, err)
		}
		if errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "stored epoch 2 is newer than this batch's 1") {
			t.Errorf("%s: fenced error %q: want a non-permanent error naming both epochs", name, err)
		}
		if got := rows(t, conn, schema, table, nil); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: a fenced Apply changed the tables:\n%q\nwant\n%q", name, got, before)
		}
	}
	// Refused before any row work.
	if s.copies.Load() != copies || s.batches.Load() != batches {
		t.Errorf("fenced Applies ran %d COPY and %d INSERT batches, want none",
			s.copies.Load()-copies, s.batches.Load()-batches)
	}
	wantState(t, s, invA, map[string]string{"u1": "h1", "u2": "h2"}, sink.Cursor{Position: "p2", Epoch: 2})

	// The same epoch writes again, and a newer one fences epoch 2 in turn.
	mustApply(t, s, invA, []sink.Change{upsert(item("u1", "h1b"))}, sink.Cursor{Position: "p2b", Epoch: 2})
	wantState(t, s, invA, map[string]string{"u1": "h1b", "u2": "h2"}, sink.Cursor{Position: "p2b", Epoch: 2})
	mustApply(t, s, invA, []sink.Change{del("u2")}, sink.Cursor{Position: "p3", Epoch: 3})
	if err := s.Apply(ctx, invA, []sink.Change{upsert(item("u2", "back"))}, sink.Cursor{Position: "p2c", Epoch: 2}); !errors.Is(err, sink.ErrFenced) {
		t.Errorf("Apply at epoch 2 after epoch 3 = %v, want ErrFenced", err)
	}
	wantState(t, s, invA, map[string]string{"u1": "h1b"}, sink.Cursor{Position: "p3", Epoch: 3})

	// Epochs are per inventory cursor: another inventory is not fenced by
	// invA's.
	mustApply(t, s, invB, []sink.Change{upsert(item("u1", "b"))}, sink.Cursor{Position: "b1", Epoch: 1})
	wantState(t, s, invB, map[string]string{"u1": "b"}, sink.Cursor{Position: "b1", Epoch: 1})
}

// A stale and a current leader apply to one inventory at the same
// moment, through two Sinks (two replicas): whichever reaches the cursor
// row first, the current leader's batch is what the table ends with.
func TestFencingConcurrent(t *testing.T) {
	conn := connect(t)
	schema := testSchema(t, conn)
	const table = "items"
	stale, current := newSink(t, schema, table), newSink(t, schema, table)
	batch := func(hash string) []sink.Change {
		var changes []sink.Change
		for i := range 20 {
			changes = append(changes, upsert(item(fmt.Sprintf("u%d", i), hash)))
		}
		return changes
	}
	want := map[string]string{}
	for _, c := range batch("current") {
		want[c.Item.UID] = "current"
	}
	fenced := 0
	const rounds = 20
	for round := range rounds {
		inv := invA
		inv.Name = fmt.Sprintf("inv-%d", round)
		var errStale, errCurrent error
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			<-start
			errStale = stale.Apply(testContext(t), inv, batch("stale"), sink.Cursor{Position: "s", Epoch: 1})
		})
		wg.Go(func() {
			<-start
			errCurrent = current.Apply(testContext(t), inv, batch("current"), sink.Cursor{Position: "c", Epoch: 2})
		})
		close(start)
		wg.Wait()
		if errCurrent != nil {
			t.Fatalf("round %d: the current leader's Apply: %v", round, errCurrent)
		}
		switch {
		case errors.Is(errStale, sink.ErrFenced):
			fenced++
		case errStale != nil:
			t.Fatalf("round %d: the stale leader's Apply: %v, want nil or ErrFenced", round, errStale)
		}
		wantState(t, current, inv, want, sink.Cursor{Position: "c", Epoch: 2})
	}
	t.Logf("the stale leader was fenced in %d of %d rounds (it committed first in the others)", fenced, rounds)
}

// A batch from an older epoch that waits on the cursor row while a newer
// epoch's transaction holds it is refused with ErrFenced, also when the
// connection's default isolation is repeatable read (the DSN's options
// may set it): Apply pins read committed. Under repeatable read the
// fence failed with a serialization error instead, and the former leader
// reported a failure where it should step down quietly.
func TestFencedUnderRepeatableReadDefault(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "items"
	current := newSink(t, schema, table)
	mustApply(t, current, invA, []sink.Change{upsert(item("u1", "h1"))}, sink.Cursor{Position: "p1", Epoch: 1})

	u, err := url.Parse(testDSN())
	if err != nil {
		t.Fatal(err)
	}
	// pgx reads %20, not +, as a space.
	q := u.Query()
	q.Set("options", "-c default_transaction_isolation=repeatable\\ read")
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")
	if q := u.Query(); q.Get("options") == "" {
		t.Fatal("no options in the DSN")
	}
	former, err := New(ctx, &v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
		Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema, Table: table}}, sink.Secret{"dsn": []byte(u.String())}, loopbackDialer)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = former.Close() }()

	// The new leader's batch holds the cursor row.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := current.fence(ctx, tx, invA, sink.Cursor{Position: "p2", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	refused := make(chan error, 1)
	go func() {
		refused <- former.Apply(ctx, invA, []sink.Change{upsert(item("u1", "stale"))}, sink.Cursor{Position: "p1b", Epoch: 1})
	}()
	select {
	case err := <-refused:
		t.Fatalf("the former leader's Apply returned before the new leader's batch committed: %v", err)
	default:
	}
	waitLocked(t, conn, schema)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-refused; !errors.Is(err, sink.ErrFenced) {
		t.Errorf("the former leader's Apply behind the new leader's batch = %v, want ErrFenced", err)
	}
	wantState(t, current, invA, map[string]string{"u1": "h1"}, sink.Cursor{Position: "p2", Epoch: 2})
}

// waitLocked waits until a backend waits for a lock in the test's schema.
func waitLocked(t *testing.T, conn *pgx.Conn, schema string) {
	t.Helper()
	pool, err := pgxpool.New(testContext(t), conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for range 200 {
		var waiting int
		if err := pool.QueryRow(testContext(t), `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND position($1 in query) > 0`, schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			return
		}
		if t.Failed() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no backend waits for the cursor row's lock")
}
