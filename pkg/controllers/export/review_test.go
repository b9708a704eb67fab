package export

// Adversarial review of the delivery model (issue 11). Each test drives
// the real item set, subscription and adapters against the real PostgreSQL
// and NATS JetStream servers; each failed before its defect was fixed.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/test/eventfold"
)

func reviewCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func reviewSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func reviewDialer(t *testing.T) *netguard.Dialer {
	t.Helper()
	d, err := netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func reviewDSN() string {
	if dsn := os.Getenv("KOLLECT_TEST_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

func reviewNATSURL() string {
	if u := os.Getenv("KOLLECT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// reviewPostgres builds a real postgres sink on a schema of the test's own
// (dropped afterwards), and returns its database adapter and the sink.
func reviewPostgres(ctx context.Context, t *testing.T) (*databaseAdapter, sink.DatabaseSink) {
	a, ds, _ := reviewPostgresSchema(ctx, t)
	return a, ds
}

func reviewPostgresSchema(ctx context.Context, t *testing.T) (*databaseAdapter, sink.DatabaseSink, string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, reviewDSN())
	if err != nil {
		t.Fatalf("PostgreSQL (KOLLECT_TEST_POSTGRES_DSN): %v", err)
	}
	schema := "review_" + reviewSuffix(t)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = conn.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_ = conn.Close(cctx)
	})
	ds, err := sink.Databases.Build(ctx, string(v1alpha1.DatabaseSinkPostgres), &v1alpha1.DatabaseSinkSpec{
		Type:     v1alpha1.DatabaseSinkPostgres,
		Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema},
	}, sink.Params{Secret: sink.Secret{"dsn": []byte(reviewDSN())}, Dialer: reviewDialer(t)})
	if err != nil {
		t.Fatalf("building the postgres sink: %v", err)
	}
	t.Cleanup(func() { _ = ds.Close() })
	return &databaseAdapter{s: ds}, ds, schema
}

// reviewStream creates a memory stream of its own on the machine's NATS,
// capturing "<stream>.>", deleted when the test ends.
func reviewStream(ctx context.Context, t *testing.T) (jetstream.JetStream, jetstream.Stream, string) {
	t.Helper()
	nc, err := natsgo.Connect(reviewNATSURL(), natsgo.Timeout(3*time.Second))
	if err != nil {
		t.Fatalf("NATS (KOLLECT_TEST_NATS_URL): %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := "review_" + reviewSuffix(t)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(cctx, stream)
	})
	return js, st, stream
}

func reviewItem(name, uid, rv, hash string) *sink.Item {
	return &sink.Item{Namespace: "ns", Name: name, Target: "t", Profile: "p", UID: uid, ResourceVersion: rv, Hash: hash,
		Source:     sink.Source{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: name},
		Attributes: json.RawMessage(`{"v":"` + hash + `"}`)}
}

// exportOnce is one exporter run: take what the subscription owes (the
// live set too when the exporter does not know the sink) and deliver it.
func exportOnce(ctx context.Context, a deliverer, s *subscription, inv sink.Inventory, known bool, epoch int64) error {
	b := s.take(a.needsLiveSet(known, false))
	_, err := a.deliver(ctx, &delivery{inv: inv, b: b, known: known, generation: 1, epoch: epoch})
	return err
}

// A new leader whose first run finds the table already right writes
// nothing, so it never stores its epoch: the former leader, resuming with
// a batch it took before the failover, is not fenced, and the row it
// writes (of an item that no longer exists) survives the new leader,
// which only sends deltas from then on (forever with interval 0s).
func TestReviewNewLeaderWithNothingToWriteIsNotFenced(t *testing.T) {
	ctx := reviewCtx(t)
	a, ds := reviewPostgres(ctx, t)
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	x := reviewItem("x", "uid-x", "10", "hx")

	// Leader A, epoch 5, exports x.
	vA := newItemSet(func() string { return "10" })
	sA := vA.subscribe()
	vA.upsert(exported(x))
	if err := exportOnce(ctx, a, sA, inv, false, 5); err != nil {
		t.Fatalf("leader A's first export: %v", err)
	}
	// z is created; A takes the batch and is paused (SIGSTOP) before Apply.
	vA.upsert(exported(reviewItem("z", "uid-z", "11", "hz")))
	stale := sA.take(false)

	// z is deleted; B takes the Lease with epoch 6 and exports the live set {x}.
	vB := newItemSet(func() string { return "12" })
	sB := vB.subscribe()
	vB.upsert(exported(x))
	if err := exportOnce(ctx, a, sB, inv, false, 6); err != nil {
		t.Fatalf("leader B's first export: %v", err)
	}
	_, cursor, err := ds.State(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after B's first run the stored cursor is %+v", cursor)

	// A resumes and applies the batch it held.
	_, err = a.deliver(ctx, &delivery{inv: inv, b: stale, known: true, generation: 1, epoch: 5})
	if !errors.Is(err, sink.ErrFenced) {
		t.Errorf("the former leader's batch (epoch 5) after leader B (epoch 6) exported: err %v, want ErrFenced", err)
	}
	held, _, err := ds.State(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held["uid-z"]; ok {
		t.Errorf("the table holds %v: the row of z, deleted before B led, was written by the former leader and stays (B's live set is {x})", held)
	}
}

func checksumOf(items ...*sink.Item) string {
	var c sink.Checksum
	for _, it := range items {
		c.Add(it.Key(), it.Hash)
	}
	return c.String()
}

// The fence is checked when a batch is applied, but the new leader's diff
// comes from State, read before it takes the cursor row. A former leader
// paused inside its Apply transaction (it passed the epoch check: nobody
// newer had written) holds the cursor row; the new leader reads State,
// computes its diff, and waits for the row. When the former leader
// resumes it commits its stale rows, and the new leader's diff, computed
// without them, leaves them in place: "the new one exports, then the old
// one resumes" (acceptance 1) ends with a row of an item that is gone,
// even though the new leader did write its epoch.
func TestReviewStaleCommitBetweenStateAndApplySurvives(t *testing.T) {
	ctx := reviewCtx(t)
	a, ds, schema := reviewPostgresSchema(ctx, t)
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	x := reviewItem("x", "uid-x", "10", "hx")

	vA := newItemSet(func() string { return "10" })
	sA := vA.subscribe()
	vA.upsert(exported(x))
	if err := exportOnce(ctx, a, sA, inv, false, 5); err != nil {
		t.Fatalf("leader A's first export: %v", err)
	}
	vA.upsert(exported(reviewItem("z", "uid-z", "11", "hz"))) // z created; A's next batch
	stale := sA.take(false)

	// A is inside its Apply transaction, past the epoch check, holding the
	// cursor row (modelled by this transaction taking the row first).
	conn, err := pgx.Connect(ctx, reviewDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	hold, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(context.Background()) }()
	cursors := pgx.Identifier{schema, "kollect_inventory_cursors"}.Sanitize()
	if _, err := hold.Exec(ctx, "SELECT 1 FROM "+cursors+" WHERE cluster = 'east' AND inventory_name = 'inv' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	waiting := func(n int) {
		t.Helper()
		watch, err := pgx.Connect(ctx, reviewDSN())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = watch.Close(context.Background()) }()
		for {
			var got int
			if err := watch.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND strpos(query, $1) > 0",
				schema).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got >= n {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%d of %d applies wait for the cursor row", got, n)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	errA := make(chan error, 1)
	go func() {
		_, err := a.deliver(ctx, &delivery{inv: inv, b: stale, known: true, generation: 1, epoch: 5})
		errA <- err
	}()
	waiting(1)

	// z is deleted; B (epoch 6) leads: live set {x, w}. It reads State now
	// (z is not there yet) and waits for the cursor row to apply w.
	vB := newItemSet(func() string { return "13" })
	sB := vB.subscribe()
	vB.upsert(exported(x))
	vB.upsert(exported(reviewItem("w", "uid-w", "12", "hw")))
	errB := make(chan error, 1)
	go func() { errB <- exportOnce(ctx, a, sB, inv, false, 6) }()
	waiting(2)

	if err := hold.Commit(ctx); err != nil { // A resumes and commits
		t.Fatal(err)
	}
	t.Logf("former leader's apply: %v; new leader's export: %v", <-errA, <-errB)
	held, cursor, err := ds.State(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := held["uid-z"]; ok {
		t.Errorf("the table holds %v with cursor %+v: the row of z (deleted before B led) stays after B exported {x, w}", held, cursor)
	}
}

// reviewHost is the exporter's host with the sink object and Secret held
// by the test instead of the informers and the host cluster: the exporter,
// its client handling and the sinks are the real ones.
type reviewHost struct {
	inv    sink.Inventory
	obj    *sinkObject
	secret sink.Secret
	// secretVersion stands for the Secret's resourceVersion.
	secretVersion string
	root          string
	interval      time.Duration
	maxAge        time.Duration
	// watchdog is the settings' watchdog period; zero means an hour.
	watchdog time.Duration
	entries  []*v1alpha1.SinkExportStatus
	// echo: resolve hands back the last entry written, as the informer
	// would.
	echo bool
}

func (h *reviewHost) resolve(context.Context, exporterKey) (*resolved, error) {
	r := &resolved{inventory: h.inv, generation: 1, sinkFound: true, sink: h.obj, sinkType: h.obj.typ, interval: h.interval}
	if h.echo && len(h.entries) > 0 {
		r.entry = h.entries[len(h.entries)-1]
	}
	return r, nil
}

func (h *reviewHost) connect(ctx context.Context, obj *sinkObject) (*sinkClient, error) {
	out := &sinkClient{fingerprint: fingerprintOf(obj), builtAt: time.Now(), secret: h.secret, secretVersion: h.secretVersion}
	var err error
	out.adapter, err = obj.build(ctx, sink.Params{Namespace: obj.GetNamespace(), UID: string(obj.GetUID()), Secret: h.secret,
		Dialer: reviewDialerOnce, FileSinkRoot: h.root})
	return out, err
}

func (h *reviewHost) writeEntry(_ context.Context, _ exporterKey, _ string, e *v1alpha1.SinkExportStatus, _ string) error {
	h.entries = append(h.entries, e)
	return nil
}

func (h *reviewHost) settings() settings {
	watchdog := h.watchdog
	if watchdog == 0 {
		watchdog = time.Hour
	}
	return settings{epoch: 1, watchdog: watchdog, clientMaxAge: h.maxAge}
}

var reviewDialerOnce, _ = netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})

// A snapshot sink edited to write elsewhere (another directory, path
// template, repository) is marked unknown, but the unknown mark is ignored
// for snapshot sinks: with interval 0s nothing is written to the new place
// until an item changes; status keeps saying Debounced, "the sink holds
// the current payload".
func TestReviewEditedSnapshotSinkNeverWritesTheNewPlace(t *testing.T) {
	ctx := reviewCtx(t)
	root := t.TempDir()
	ss := &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "files", UID: "sink-uid", Generation: 1},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///a"},
	}
	obj, err := sinkObjectOf(ss)
	if err != nil {
		t.Fatal(err)
	}
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	h := &reviewHost{inv: inv, obj: obj, root: root, maxAge: time.Hour}
	v := newItemSet(func() string { return "1" })
	v.upsert(exported(reviewItem("x", "uid-x", "1", "hx")))
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
	defer func() { e.sub.close(); e.closeClient() }()
	e.runOnce(ctx)
	if _, err := os.Stat(filepath.Join(root, "ns", "a", "east", "ns", "inv.json")); err != nil {
		t.Fatalf("the first export: %v", err)
	}

	edited := ss.DeepCopy()
	edited.Spec.Endpoint, edited.Generation = "file:///b", 2
	if h.obj, err = sinkObjectOf(edited); err != nil {
		t.Fatal(err)
	}
	e.runOnce(ctx)
	if _, err := os.Stat(filepath.Join(root, "ns", "b", "east", "ns", "inv.json")); err != nil {
		t.Errorf("after the sink was edited to file:///b: %v (%d status writes in all; the entry still says %s)",
			err, len(h.entries), h.entries[len(h.entries)-1].Outcome)
	}
}

// At rest, a due re-export of an event sink (default interval 30s)
// restates what the consumer acknowledged under that state's token: its
// ids repeat, and the stream's duplicate window (2 minutes, longer than
// the interval) drops them. (Resyncs with a new token each time added N+1
// messages per interval.) The test reports the figures for 1,000 items.
func TestReviewIdleEventSinkKeepsTheStream(t *testing.T) {
	ctx := reviewCtx(t)
	_, st, stream := reviewStream(ctx, t)
	prefix := stream
	obj, err := sinkObjectOf(&v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "events", UID: "sink-uid", Generation: 1},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: reviewNATSURL(),
			NATS: &v1alpha1.NATSSinkConfig{Stream: stream, Subject: prefix + ".{cluster}.{namespace}.{inventory}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	h := &reviewHost{inv: inv, obj: obj, interval: DefaultInterval, maxAge: time.Hour}
	v := newItemSet(func() string { return "1" })
	const n = 1000
	for i := range n {
		v.upsert(exported(reviewItem(strconv.Itoa(i), "uid-"+strconv.Itoa(i), "1", "h"+strconv.Itoa(i))))
	}
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: "events"}, v)
	defer func() { e.sub.close(); e.closeClient() }()
	msgs := func() uint64 {
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	e.runOnce(ctx) // the first run: a resync with a token never used
	// The first due re-export restates the acknowledged state under that
	// state's token; the ones after it repeat its ids. (The first comes
	// up to one more interval late: the exporter's share of it.)
	e.lastExport = e.lastExport.Add(-2 * DefaultInterval)
	e.runOnce(ctx)
	first := msgs()
	const dues = 4
	for range dues {
		// The interval elapsed with nothing changed (as 30s of rest would).
		e.lastExport = e.lastExport.Add(-DefaultInterval)
		e.runOnce(ctx)
	}
	grown := msgs() - first
	t.Logf("%d items at rest: first run %d messages, then %d more over %d due re-exports (%d a day per inventory at the default %s)",
		n, first, grown, dues, grown/dues*uint64(24*time.Hour/DefaultInterval), DefaultInterval)
	if grown != 0 {
		t.Errorf("an unchanged inventory added %d messages to the stream over %d due re-exports", grown, dues)
	}
}

// Cleanup (deletionPolicy Delete) deletes the cursor row with the rows, and
// with it the stored epoch: a former leader's batch applied afterwards
// inserts a fresh cursor row and puts rows back for an inventory that no
// longer exists. Nothing will ever remove them.
func TestReviewStaleApplyAfterCleanupResurrectsRows(t *testing.T) {
	ctx := reviewCtx(t)
	a, ds := reviewPostgres(ctx, t)
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "gone"}

	vA := newItemSet(func() string { return "10" })
	sA := vA.subscribe()
	vA.upsert(exported(reviewItem("x", "uid-x", "10", "hx")))
	stale := sA.take(true) // A (epoch 5) holds its first batch, paused

	// B (epoch 6) exports, then the inventory is deleted and B cleans up.
	vB := newItemSet(func() string { return "11" })
	sB := vB.subscribe()
	vB.upsert(exported(reviewItem("x", "uid-x", "11", "hx2")))
	if err := exportOnce(ctx, a, sB, inv, false, 6); err != nil {
		t.Fatalf("leader B's export: %v", err)
	}
	if err := a.remove(ctx, inv, nil, 6); err != nil {
		t.Fatalf("leader B's cleanup: %v", err)
	}

	_, err := a.deliver(ctx, &delivery{inv: inv, b: stale, known: false, generation: 1, epoch: 5})
	if !errors.Is(err, sink.ErrFenced) {
		t.Errorf("the former leader's batch (epoch 5) after leader B (epoch 6) cleaned up: err %v, want ErrFenced", err)
	}
	held, cursor, err := ds.State(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	if len(held) != 0 {
		t.Errorf("rows of the deleted inventory are back: %v (cursor %+v)", held, cursor)
	}
}

// An item that leaves the inventory's selection (its Target relabelled)
// and comes back unchanged is re-published with the id of its earlier
// upsert: JetStream acknowledges it as a duplicate without storing it, the
// exporter counts it as delivered, and a consumer that did see it would
// skip it by rule 1 anyway. The consumer keeps the delete: the item is
// lost for good with interval 0s (until the next resync otherwise).
func TestReviewReselectedItemIsRestated(t *testing.T) {
	ctx := reviewCtx(t)
	js, st, stream := reviewStream(ctx, t)
	prefix := stream
	fold := eventfold.New()
	eventfold.Follow(ctx, t, js, stream, fold)

	es, err := sink.Events.Build(ctx, string(v1alpha1.EventSinkNATS), &v1alpha1.EventSinkSpec{
		Type: v1alpha1.EventSinkNATS, Endpoint: reviewNATSURL(),
		NATS: &v1alpha1.NATSSinkConfig{Stream: stream, Subject: prefix + ".{cluster}.{namespace}.{inventory}"},
	}, sink.Params{Dialer: reviewDialer(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.Close() })
	_ = es.Close()
	obj, err := sinkObjectOf(&v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "events", UID: "sink-uid", Generation: 1},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: reviewNATSURL(),
			NATS: &v1alpha1.NATSSinkConfig{Stream: stream, Subject: prefix + ".{cluster}.{namespace}.{inventory}"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	path := sink.InventoryPath(inv)
	h := &reviewHost{inv: inv, obj: obj, maxAge: time.Hour} // interval 0s: no anti-drift resync
	v := newItemSet(func() string { return "" })
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyEvent, namespace: "ns", name: "events"}, v)
	defer func() { e.sub.close(); e.closeClient() }()
	run := func(what string) {
		t.Helper()
		e.runOnce(ctx)
		if last := h.entries[len(h.entries)-1]; last.Outcome != v1alpha1.OutcomeExported {
			t.Fatalf("%s: %s", what, last.Outcome)
		}
	}
	run("the first run: a resync of nothing")
	x := reviewItem("x", "uid-x", "5", "hx")
	v.upsert(exported(x))
	run("created")
	v.replace(map[string]*exportedItem{})
	run("its Target's labels no longer match")
	v.replace(map[string]*exportedItem{x.Key(): exported(x)})
	run("and match again")

	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// resync(0); upsert x; resync(0) after the selection changed;
	// resync(1) and x when it changed back: none dropped as a repeat.
	if info.State.Msgs != 5 {
		t.Errorf("the stream holds %d messages, want 5 (resync, upsert, resync, resync, upsert)", info.State.Msgs)
	}
	// Wait until the consumer folded everything the stream holds.
	for fold.Stats(path).Events < int(info.State.Msgs) {
		select {
		case <-ctx.Done():
			t.Fatalf("the consumer folded %d of %d messages", fold.Stats(path).Events, info.State.Msgs)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := fold.Equal(path, map[string]string{x.Key(): x.Hash}); err != nil {
		t.Errorf("after the item came back: %v", err)
	}
}

// A Postgres sink's destination is its Secret's dsn (docs: "a whole
// connection string"), but the exporter treats a client rebuilt from a
// changed Secret as the same destination: it keeps sending deltas, and the
// new database never gets the items exported before (forever with 0s; until
// the next anti-drift full sync otherwise), while status says Exported with
// the full count and checksum.
func TestReviewSecretNamingAnotherDatabaseGetsEverything(t *testing.T) {
	ctx := reviewCtx(t)
	admin, err := pgx.Connect(ctx, reviewDSN())
	if err != nil {
		t.Fatal(err)
	}
	db2 := "review_" + reviewSuffix(t)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(cctx, "DROP DATABASE IF EXISTS "+db2+" WITH (FORCE)")
		_ = admin.Close(cctx)
	})
	cfg, err := pgx.ParseConfig(reviewDSN())
	if err != nil {
		t.Fatal(err)
	}
	dsn2 := "postgres://" + cfg.User + "@" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port)) + "/" + db2 + "?sslmode=disable"

	schema := "review_" + reviewSuffix(t)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = admin.Exec(cctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	dbSink := &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "db", UID: "sink-uid", Generation: 1},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, SecretRef: &v1alpha1.LocalObjectReference{Name: "db"},
			Postgres: &v1alpha1.PostgresSinkConfig{Schema: schema}},
	}
	obj, err := sinkObjectOf(dbSink)
	if err != nil {
		t.Fatal(err)
	}
	inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "ns", Name: "inv"}
	h := &reviewHost{inv: inv, obj: obj, secret: sink.Secret{"dsn": []byte(reviewDSN())}, secretVersion: "1", maxAge: time.Nanosecond}
	v := newItemSet(func() string { return "1" })
	v.upsert(exported(reviewItem("x", "uid-x", "1", "hx")))
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilyDatabase, namespace: "ns", name: "db"}, v)
	defer func() { e.sub.close(); e.closeClient() }()
	e.runOnce(ctx)

	// The Secret is edited to point at the new database; the client is
	// rebuilt (by age, as every --sink-client-max-age) and y is created.
	h.secret, h.secretVersion = sink.Secret{"dsn": []byte(dsn2)}, "2"
	v.upsert(exported(reviewItem("y", "uid-y", "2", "hy")))
	e.runOnce(ctx)

	ds, err := sink.Databases.Build(ctx, string(v1alpha1.DatabaseSinkPostgres), &dbSink.Spec,
		sink.Params{Secret: sink.Secret{"dsn": []byte(dsn2)}, Dialer: reviewDialerOnce})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ds.Close() }()
	held, _, err := ds.State(ctx, inv)
	if err != nil {
		t.Fatal(err)
	}
	last := h.entries[len(h.entries)-1]
	if len(held) != 2 {
		t.Errorf("the database the Secret now names holds %v; the live set is {x, y} (status: %s, itemCount %d)", held, last.Outcome, last.ItemCount)
	}
}

// A file sink's client rebuilt by age (--sink-client-max-age; every run
// here) still finds the document it wrote in place: the due re-exports
// write nothing, and the document stays the same file. A sink edited to
// another place is written there, knowing nothing of the old one.
func TestReviewRebuiltFileClientLeavesTheDocument(t *testing.T) {
	ctx := reviewCtx(t)
	h, v := spreadHost(t, 30*time.Second, 30*time.Second)
	h.maxAge = time.Nanosecond
	e := newExporter(h, exporterKey{inv: plumbing.InventoryKey{Namespace: "ns", Name: "inv"}, family: v1alpha1.SinkFamilySnapshot, namespace: "ns", name: "files"}, v)
	defer func() { e.sub.close(); e.closeClient() }()
	e.runOnce(ctx)
	doc := filepath.Join(h.root, "ns", "a", "east", "ns", "inv.json")
	first, err := os.Stat(doc)
	if err != nil {
		t.Fatalf("the first export: %v", err)
	}
	for i := range 3 {
		built := e.client
		e.lastExport = time.Now().Add(-time.Minute) // the re-export is due
		e.runOnce(ctx)
		en := h.entries[len(h.entries)-1]
		if e.client == built {
			t.Fatalf("re-export %d: the client was not rebuilt (max age %s)", i, h.maxAge)
		}
		if en.Outcome != v1alpha1.OutcomeExported || en.Message != exportMessage(actFull, false) {
			t.Errorf("re-export %d after a rebuild: %s %q; want Exported %q", i, en.Outcome, en.Message, exportMessage(actFull, false))
		}
		if now, err := os.Stat(doc); err != nil || !os.SameFile(first, now) || !now.ModTime().Equal(first.ModTime()) {
			t.Errorf("re-export %d after a rebuild replaced the document (%v)", i, err)
		}
	}
}
