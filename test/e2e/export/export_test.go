package export

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// fiveSinks are the sinks of TestExportToAllSinks and what observes them.
type fiveSinks struct {
	ns        string
	fileDir   string
	gitDir    string
	schema    string
	stream    jetstream.Stream
	webhook   *webhookReceiver
	inventory string
}

// createFiveSinks creates one sink of each type in ns, and their Secrets.
func createFiveSinks(ctx context.Context, t *testing.T, ns string) *fiveSinks {
	t.Helper()
	fileURL, fileDir := fileEndpoint(ns)
	s := &fiveSinks{ns: ns, fileDir: fileDir, schema: pgSchema(t, "e2e_all"), webhook: startWebhook(t)}
	gs := startGitServer(t)
	var gitURL string
	gitURL, s.gitDir = gs.repo(t, "inventory")
	prefix := "kx" + randomSuffix()
	s.stream = natsStream(ctx, t, prefix)

	secret(ctx, t, ns, "git-token", map[string]string{"username": gs.user, "token": gs.token})
	secret(ctx, t, ns, "portal-db", map[string]string{"dsn": postgresDSN})
	secret(ctx, t, ns, "hook-key", map[string]string{"hmacKey": s.webhook.key})

	api := kollect.KollectV1alpha1()
	_, err := api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: fileURL,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete},
	}, metav1.CreateOptions{})
	must(t, err, "file sink")
	_, err = api.SnapshotSinks(ns).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "audit"},
		Spec: v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkGit, Endpoint: gitURL,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "git-token"},
			TLS:       &v1alpha1.TLSConfig{CABundle: caBundle(gs.srv)},
			Git:       &v1alpha1.GitSinkConfig{Branch: "main"}},
	}, metav1.CreateOptions{})
	must(t, err, "git sink")
	_, err = api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			SecretRef:      &v1alpha1.LocalObjectReference{Name: "portal-db"},
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
			Postgres:       &v1alpha1.PostgresSinkConfig{Schema: s.schema, Table: "inventory"}},
	}, metav1.CreateOptions{})
	must(t, err, "database sink")
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "changes"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: natsURL,
			DeletionPolicy: v1alpha1.DeletionPolicyDelete,
			NATS:           &v1alpha1.NATSSinkConfig{Stream: strings.ToUpper(prefix), Subject: prefix + ".{namespace}.{inventory}"}},
	}, metav1.CreateOptions{})
	must(t, err, "nats sink")
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: s.webhook.srv.URL + "/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-key"},
			TLS:       &v1alpha1.TLSConfig{CABundle: caBundle(s.webhook.srv)},
			Webhook:   &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 5 * time.Second}}},
	}, metav1.CreateOptions{})
	must(t, err, "webhook sink")
	return s
}

// observed is what each sink holds, reduced to checksums and counters.
type observed struct {
	file, git     *sink.Envelope
	gitCommits    int
	rows          map[string]pgRow
	natsEvents    []sink.Event
	webhookEvents []sink.Event
}

// path is the inventory's name in the events (eventfold's key).
func (s *fiveSinks) path() string {
	return sink.InventoryPath(sink.Inventory{Cluster: clusterName, Kind: "Inventory", Namespace: s.ns, Name: s.inventory})
}

// document is where the file and git sinks' default pathTemplate,
// {cluster}/{namespace}/{inventory}.{ext}, puts the inventory's document.
func (s *fiveSinks) document() string {
	return clusterName + "/" + s.ns + "/" + s.inventory + ".json"
}

func (s *fiveSinks) observe(ctx context.Context, t *testing.T) observed {
	t.Helper()
	var o observed
	var err error
	if o.file, err = readFileEnvelope(filepath.Join(s.fileDir, filepath.FromSlash(s.document()))); err != nil {
		t.Fatalf("file sink: %v", err)
	}
	if doc := gitFile(s.gitDir, s.document()); doc != nil {
		if o.git, err = readEnvelope(doc); err != nil {
			t.Fatalf("git sink document: %v", err)
		}
	}
	o.gitCommits = commits(t, s.gitDir)
	if o.rows, err = pgRows(ctx, s.schema, "inventory", s.ns, s.inventory); err != nil {
		t.Fatalf("postgres rows: %v", err)
	}
	o.natsEvents = streamEvents(ctx, t, s.stream)
	o.webhookEvents = s.webhook.received()
	return o
}

// checkAll fails unless every sink holds exactly the item set live
// (item key to hash): the snapshot documents and the rows by checksum and
// count, each event sink's stream folded by the consumer contract.
func (o observed) checkAll(t *testing.T, path string, live map[string]string) {
	t.Helper()
	var c sink.Checksum
	for k, h := range live {
		c.Add(k, h)
	}
	checksum, count := c.String(), len(live)
	if o.file.Checksum != checksum || sink.ChecksumOf(o.file.Items) != checksum || o.file.ItemCount != count {
		t.Errorf("file: checksum %s (recomputed %s), %d items; want %s, %d", o.file.Checksum, sink.ChecksumOf(o.file.Items), o.file.ItemCount, checksum, count)
	}
	if o.git == nil || o.git.Checksum != checksum || sink.ChecksumOf(o.git.Items) != checksum {
		t.Errorf("git: document %+v; want checksum %s", o.git, checksum)
	}
	if got := checksumOfRows(o.rows); got != checksum || len(o.rows) != count {
		t.Errorf("postgres: %d rows, checksum %s; want %d, %s", len(o.rows), got, count, checksum)
	}
	for what, events := range map[string][]sink.Event{"nats": o.natsEvents, "webhook": o.webhookEvents} {
		f := foldEvents(t, what, events)
		if err := f.Equal(path, live); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		if st := f.Stats(path); st.Pending || st.ChecksumMismatches != 0 || st.Stale != 0 {
			t.Errorf("%s: fold %+v; want no pending resync, no checksum mismatch, no stale event", what, st)
		}
		if inv := f.Inventories(); len(inv) != 1 || inv[0] != path {
			t.Errorf("%s: events of inventories %q; want only %s", what, inv, path)
		}
		checkIDs(t, what, events)
	}
}

// checkFirstExport checks an event sink's events of the first export: the
// exporter's first run in a process does not know what the consumer
// holds, so it opens a resync (docs/export.md): one resynced event
// announcing the live set's count and checksum, then exactly that many
// upserts carrying its token, in item key order, and nothing else.
func checkFirstExport(t *testing.T, what, path string, events []sink.Event, live map[string]string) {
	t.Helper()
	var c sink.Checksum
	for k, h := range live {
		c.Add(k, h)
	}
	if len(events) != 1+len(live) {
		t.Errorf("%s: first export: %d events; want a resynced event and %d upserts", what, len(events), len(live))
		return
	}
	open := events[0]
	if open.Type != sink.EventTypeResynced || open.Data.Resync == nil ||
		open.Data.Resync.ItemCount != len(live) || open.Data.Resync.Checksum != c.String() {
		t.Errorf("%s: first event %s %s %+v; want %s of %d items, checksum %s", what, open.ID, open.Type, open.Data.Resync, sink.EventTypeResynced, len(live), c.String())
		return
	}
	wantSource := "/clusters/" + clusterName + "/apis/kollect.dev/v1alpha1/namespaces/" + open.Data.Inventory.Namespace + "/inventories/" + open.Data.Inventory.Name
	prev := ""
	for i, ev := range events {
		if ev.Source != wantSource || sink.InventoryPath(ev.Data.Inventory) != path {
			t.Errorf("%s: event %d: source %q, inventory %s; want %q, %s", what, i, ev.Source, sink.InventoryPath(ev.Data.Inventory), wantSource, path)
		}
		if i == 0 {
			continue
		}
		key := ""
		if ev.Data.Item != nil {
			key = ev.Data.Item.Key()
		}
		switch {
		case ev.Type != sink.EventTypeUpserted || ev.Resync != open.Data.Resync.Token:
			t.Errorf("%s: event %d: %s %s (resync %q); want an upsert of resync %q", what, i, ev.Type, ev.ID, ev.Resync, open.Data.Resync.Token)
		case live[key] == "" || ev.Data.Item.Hash != live[key]:
			t.Errorf("%s: event %d upserts %s, not a live item", what, i, key)
		case key <= prev:
			t.Errorf("%s: event %d upserts %s after %s; want item key order", what, i, key, prev)
		}
		prev = key
	}
}

// TestExportToAllSinks is issue 5's acceptance points 1 and 2, and the
// Delete deletion policy: one Inventory exports to a file, git, Postgres,
// NATS and a webhook; every sink holds the same item set and checksum (the
// event streams folded by the consumer contract, the first export being a
// resync); a change to one object changes exactly one row, one event per
// event sink, one commit and the file; a deletion removes it everywhere.
func TestExportToAllSinks(t *testing.T) {
	ctx := testContext(t, 4*time.Minute)
	ns := "export-all"
	namespace(ctx, t, ns)
	collectDeployments(ctx, t, ns, 6)
	s := createFiveSinks(ctx, t, ns)
	s.inventory = "team"
	_, err := kollect.KollectV1alpha1().Inventories(ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: s.inventory},
		Spec: v1alpha1.InventorySpec{
			// An hour: no anti-drift re-export interferes with the counts below.
			ExportMinInterval: &metav1.Duration{Duration: time.Hour},
			SnapshotSinkRefs:  []v1alpha1.SinkReference{{Name: "files"}, {Name: "audit"}},
			DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
			EventSinkRefs:     []v1alpha1.SinkReference{{Name: "changes"}, {Name: "hook"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "inventory")

	// 1. The same item set and checksum everywhere; Synced with five entries.
	items, sum := itemSet(ctx, t, ns)
	inv := waitSynced(ctx, t, ns, s.inventory, sum, 5)
	if inv.Status.SinksSynced != "5/5" || inv.Status.ItemCount != 6 {
		t.Errorf("sinksSynced %q, itemCount %d; want 5/5, 6", inv.Status.SinksSynced, inv.Status.ItemCount)
	}
	before := s.observe(ctx, t)
	before.checkAll(t, s.path(), items)
	if before.gitCommits != 1 {
		t.Errorf("first export: %d commits; want 1", before.gitCommits)
	}
	checkFirstExport(t, "nats", s.path(), before.natsEvents, items)
	checkFirstExport(t, "webhook", s.path(), before.webhookEvents, items)
	if n := s.webhook.rejectedCount(); n != 0 {
		t.Errorf("webhook: %d deliveries rejected (bad signature or body)", n)
	}
	if before.file.Cluster != "e2e" || before.file.SchemaVersion != sink.SchemaVersion || before.file.Generation != inv.Generation {
		t.Errorf("envelope header %+v", before.file)
	}

	// 2. One change: exactly one row, one event each, one commit, the file.
	setImage(ctx, t, ns, "app-02", "registry.example/app:2")
	var changedKey string
	eventually(ctx, t, "item of app-02 changes", func(ctx context.Context) (bool, string) {
		now, _ := itemSet(ctx, t, ns)
		for k, h := range now {
			if items[k] != h {
				changedKey = k
				return true, ""
			}
		}
		return false, "no item changed yet"
	})
	items2, sum2 := itemSet(ctx, t, ns)
	waitSynced(ctx, t, ns, s.inventory, sum2, 5)
	time.Sleep(2 * watchdog) // anything extra would arrive now
	after := s.observe(ctx, t)
	after.checkAll(t, s.path(), items2)
	var changedRows []string
	for uid, r := range after.rows {
		if b, ok := before.rows[uid]; !ok || b.hash != r.hash || !b.exportedAt.Equal(r.exportedAt) || b.attributes != r.attributes {
			changedRows = append(changedRows, r.key)
		}
	}
	if len(changedRows) != 1 || changedRows[0] != changedKey {
		t.Errorf("rows changed: %v; want exactly [%s]", changedRows, changedKey)
	}
	newEvents := func(what string, b, a []sink.Event, op sink.Op) {
		t.Helper()
		if len(a) != len(b)+1 {
			t.Errorf("%s: %d new events; want 1", what, len(a)-len(b))
			return
		}
		if ev := a[len(a)-1]; ev.Data.Op != op || ev.Data.Item == nil || ev.Data.Item.Key() != changedKey || ev.Resync != "" {
			t.Errorf("%s: new event %s (%s, resync %q); want %s of %s outside any resync", what, ev.ID, ev.Type, ev.Resync, op, changedKey)
		}
	}
	newEvents("nats", before.natsEvents, after.natsEvents, sink.Upsert)
	newEvents("webhook", before.webhookEvents, after.webhookEvents, sink.Upsert)
	if after.gitCommits != before.gitCommits+1 {
		t.Errorf("git: %d new commits; want 1", after.gitCommits-before.gitCommits)
	}
	if !after.file.ExportedAt.After(before.file.ExportedAt) && after.file.Checksum == before.file.Checksum {
		t.Errorf("file not rewritten")
	}

	// Deleting one object: its row goes, a delete event, git and file drop it.
	before = after
	must(t, kube.AppsV1().Deployments(ns).Delete(ctx, "app-04", metav1.DeleteOptions{}), "delete deployment")
	var gone string
	eventually(ctx, t, "item of app-04 deleted", func(ctx context.Context) (bool, string) {
		now, _ := itemSet(ctx, t, ns)
		for k := range items {
			if _, ok := now[k]; !ok {
				gone = k
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d items", len(now))
	})
	changedKey = gone
	items3, sum3 := itemSet(ctx, t, ns)
	waitSynced(ctx, t, ns, s.inventory, sum3, 5)
	time.Sleep(2 * watchdog)
	after = s.observe(ctx, t)
	after.checkAll(t, s.path(), items3)
	if len(items3) != 5 {
		t.Errorf("%d items after the deletion; want 5", len(items3))
	}
	newEvents("nats", before.natsEvents, after.natsEvents, sink.Delete)
	newEvents("webhook", before.webhookEvents, after.webhookEvents, sink.Delete)
	if after.gitCommits != before.gitCommits+1 {
		t.Errorf("git: %d new commits for the deletion; want 1", after.gitCommits-before.gitCommits)
	}

	// Deleting the Inventory: sinks with deletionPolicy Delete lose what it
	// exported (file, rows, a delete event per item); git (Retain) keeps it.
	must(t, kollect.KollectV1alpha1().Inventories(ns).Delete(ctx, s.inventory, metav1.DeleteOptions{}), "delete inventory")
	eventually(ctx, t, "inventory gone", func(ctx context.Context) (bool, string) {
		_, err := kollect.KollectV1alpha1().Inventories(ns).Get(ctx, s.inventory, metav1.GetOptions{})
		return err != nil, fmt.Sprint(err)
	})
	if _, err := os.Stat(filepath.Join(s.fileDir, filepath.FromSlash(s.document()))); !os.IsNotExist(err) {
		t.Errorf("file sink (Delete): document still there: %v", err)
	}
	if rows, err := pgRows(ctx, s.schema, "inventory", ns, s.inventory); err != nil || len(rows) != 0 {
		t.Errorf("postgres (Delete): %d rows left, %v", len(rows), err)
	}
	final := streamEvents(ctx, t, s.stream)
	if err := foldEvents(t, "nats (Delete)", final).Equal(s.path(), map[string]string{}); err != nil {
		t.Errorf("nats (Delete): %v", err)
	}
	checkIDs(t, "nats (Delete)", final)
	// One delete per remaining item, then an empty resync (adapter.remove):
	// a consumer also drops what deletions owed when the exporter stopped
	// would have removed.
	removal := final[len(after.natsEvents):]
	if len(removal) != len(items3)+1 {
		t.Errorf("nats (Delete): %d events after the Inventory's deletion; want %d deletes and an empty resync", len(removal), len(items3))
		for _, ev := range removal {
			t.Logf("  %s %s (epoch %d, resync %q)", ev.Type, ev.ID, ev.Epoch, ev.Resync)
		}
	} else {
		deleted := map[string]bool{}
		for _, ev := range removal[:len(items3)] {
			if ev.Type != sink.EventTypeDeleted || ev.Data.Item == nil || items3[ev.Data.Item.Key()] == "" || deleted[ev.Data.Item.Key()] {
				t.Errorf("nats (Delete): event %s (%s); want one delete per remaining item", ev.ID, ev.Type)
				continue
			}
			deleted[ev.Data.Item.Key()] = true
		}
		last := removal[len(items3)]
		if last.Type != sink.EventTypeResynced || last.Data.Resync == nil || last.Data.Resync.ItemCount != 0 || last.Data.Resync.Checksum != (sink.Checksum{}).String() {
			t.Errorf("nats (Delete): last event %s (%s, %+v); want a resync of 0 items", last.ID, last.Type, last.Data.Resync)
		}
	}
	if gitFile(s.gitDir, s.document()) == nil {
		t.Errorf("git (Retain): the document was removed")
	}
}
