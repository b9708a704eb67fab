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

func (s *fiveSinks) observe(ctx context.Context, t *testing.T) observed {
	t.Helper()
	var o observed
	var err error
	if o.file, err = readFileEnvelope(filepath.Join(s.fileDir, s.ns, s.inventory+".json")); err != nil {
		t.Fatalf("file sink: %v", err)
	}
	if doc := gitFile(s.gitDir, s.ns+"/"+s.inventory+".json"); doc != nil {
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

// checkAll fails unless every sink holds exactly the item set of checksum.
func (o observed) checkAll(t *testing.T, checksum string, count int) {
	t.Helper()
	if o.file.Checksum != checksum || sink.ChecksumOf(o.file.Items) != checksum || o.file.ItemCount != count {
		t.Errorf("file: checksum %s (recomputed %s), %d items; want %s, %d", o.file.Checksum, sink.ChecksumOf(o.file.Items), o.file.ItemCount, checksum, count)
	}
	if o.git == nil || o.git.Checksum != checksum || sink.ChecksumOf(o.git.Items) != checksum {
		t.Errorf("git: document %+v; want checksum %s", o.git, checksum)
	}
	if got := checksumOfRows(o.rows); got != checksum || len(o.rows) != count {
		t.Errorf("postgres: %d rows, checksum %s; want %d, %s", len(o.rows), got, count, checksum)
	}
	if got := checksumOfEvents(o.natsEvents); got != checksum {
		t.Errorf("nats: events fold to %s; want %s", got, checksum)
	}
	if got := checksumOfEvents(o.webhookEvents); got != checksum {
		t.Errorf("webhook: events fold to %s; want %s", got, checksum)
	}
}

// TestExportToAllSinks is issue 5's acceptance points 1 and 2, and the
// Delete deletion policy: one Inventory exports to a file, git, Postgres,
// NATS and a webhook; every sink holds the same item set and checksum; a
// change to one object changes exactly one row, one event per event sink,
// one commit and the file; a deletion removes it everywhere.
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
	_, sum := itemSet(ctx, t, ns)
	inv := waitSynced(ctx, t, ns, s.inventory, sum, 5)
	if inv.Status.SinksSynced != "5/5" || inv.Status.ItemCount != 6 {
		t.Errorf("sinksSynced %q, itemCount %d; want 5/5, 6", inv.Status.SinksSynced, inv.Status.ItemCount)
	}
	before := s.observe(ctx, t)
	before.checkAll(t, sum, 6)
	if before.gitCommits != 1 || len(before.natsEvents) != 6 || len(before.webhookEvents) != 6 {
		t.Errorf("first export: %d commits, %d NATS events, %d webhook deliveries; want 1, 6, 6",
			before.gitCommits, len(before.natsEvents), len(before.webhookEvents))
	}
	if before.file.Cluster != "e2e" || before.file.SchemaVersion != sink.SchemaVersion || before.file.Generation != inv.Generation {
		t.Errorf("envelope header %+v", before.file)
	}

	// 2. One change: exactly one row, one event each, one commit, the file.
	items, _ := itemSet(ctx, t, ns)
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
	_, sum2 := itemSet(ctx, t, ns)
	waitSynced(ctx, t, ns, s.inventory, sum2, 5)
	time.Sleep(2 * watchdog) // anything extra would arrive now
	after := s.observe(ctx, t)
	after.checkAll(t, sum2, 6)
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
		if ev := a[len(a)-1]; ev.Data.Op != op || ev.Data.Item.Key() != changedKey {
			t.Errorf("%s: new event %s of %s; want %s of %s", what, ev.Data.Op, ev.Data.Item.Key(), op, changedKey)
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
	_, sum3 := itemSet(ctx, t, ns)
	waitSynced(ctx, t, ns, s.inventory, sum3, 5)
	time.Sleep(2 * watchdog)
	after = s.observe(ctx, t)
	after.checkAll(t, sum3, 5)
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
	if _, err := os.Stat(filepath.Join(s.fileDir, ns, s.inventory+".json")); !os.IsNotExist(err) {
		t.Errorf("file sink (Delete): document still there: %v", err)
	}
	if rows, err := pgRows(ctx, s.schema, "inventory", ns, s.inventory); err != nil || len(rows) != 0 {
		t.Errorf("postgres (Delete): %d rows left, %v", len(rows), err)
	}
	final := streamEvents(ctx, t, s.stream)
	if got := checksumOfEvents(final); got != (sink.Checksum{}).String() || len(final) != len(after.natsEvents)+5 {
		t.Errorf("nats (Delete): %d delete events, fold %s; want 5 and the empty set", len(final)-len(after.natsEvents), got)
	}
	if gitFile(s.gitDir, ns+"/"+s.inventory+".json") == nil {
		t.Errorf("git (Retain): the document was removed")
	}
}
