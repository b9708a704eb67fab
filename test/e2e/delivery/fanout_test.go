package delivery

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/test/eventfold"
)

// fanout is one namespace's Inventory "inv" exporting to a Postgres table,
// a NATS stream and a webhook receiver of its own, and the reference
// consumer folding each event sink.
type fanout struct {
	c      *kcluster
	ns     string
	schema string
	stream string
	nats   *eventfold.Fold
	hook   *eventfold.Webhook
}

const table = "inventory"

// newFanout creates the sinks (not the Inventory) in ns.
func (c *kcluster) newFanout(ctx context.Context, t *testing.T, ns string) *fanout {
	t.Helper()
	f := &fanout{c: c, ns: ns, schema: pgSchema(t, "delivery"), nats: eventfold.New()}
	api := c.kollect.KollectV1alpha1()

	c.secret(ctx, t, ns, "db", map[string]string{"dsn": postgresDSN})
	_, err := api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: "portal"},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres,
			SecretRef: &v1alpha1.LocalObjectReference{Name: "db"},
			Postgres:  &v1alpha1.PostgresSinkConfig{Schema: f.schema, Table: table}},
	}, metav1.CreateOptions{})
	must(t, err, "database sink")

	// The default subject, kollect.{cluster}.{namespace}.{inventory}.
	f.stream = natsStream(ctx, t, "kollect."+c.name+"."+ns+".>")
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "changes"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: natsURL,
			NATS: &v1alpha1.NATSSinkConfig{Stream: f.stream}},
	}, metav1.CreateOptions{})
	must(t, err, "nats sink")
	eventfold.Follow(ctx, t, js, f.stream, f.nats)

	key := "hmac-" + randomSuffix()
	f.hook = eventfold.StartWebhook(t, key)
	c.secret(ctx, t, ns, "hook-key", map[string]string{"hmacKey": key})
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: "hook"},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: f.hook.URL + "/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-key"},
			TLS:       &v1alpha1.TLSConfig{CABundle: f.hook.CA},
			Webhook:   &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 5 * time.Second}}},
	}, metav1.CreateOptions{})
	must(t, err, "webhook sink")
	return f
}

// createInventory creates the Inventory "inv" over the three sinks. Its
// interval is an hour: no anti-drift re-export adds to what the test
// observes.
func (f *fanout) createInventory(ctx context.Context, t *testing.T) {
	t.Helper()
	_, err := f.c.kollect.KollectV1alpha1().Inventories(f.ns).Create(ctx, &v1alpha1.Inventory{
		ObjectMeta: metav1.ObjectMeta{Name: "inv"},
		Spec: v1alpha1.InventorySpec{
			ExportMinInterval: &metav1.Duration{Duration: time.Hour},
			DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: "portal"}},
			EventSinkRefs:     []v1alpha1.SinkReference{{Name: "changes"}, {Name: "hook"}},
		},
	}, metav1.CreateOptions{})
	must(t, err, "inventory")
}

func (f *fanout) path() string { return inventoryPath(f.c.name, f.ns, "inv") }

func (f *fanout) checks() []check {
	return []check{
		pgCheck(f.schema, table, f.c.name, f.ns, "inv"),
		foldCheck("nats", f.nats, f.path()),
		foldCheck("webhook", f.hook.Fold, f.path()),
	}
}

// streamCount is how many messages the stream holds.
func (f *fanout) streamCount(ctx context.Context) int {
	s, err := js.Stream(ctx, f.stream)
	if err != nil {
		return -1
	}
	info, err := s.Info(ctx)
	if err != nil {
		return -1
	}
	return int(info.State.Msgs)
}

// rowCount is how many rows the table holds, -1 before it exists.
func (f *fanout) rowCount(ctx context.Context) int {
	rows, err := pgRows(ctx, f.schema, table, "", "", "")
	if err != nil {
		return -1
	}
	return len(rows)
}

// foldsSound fails the test on what no correct exporter produces: an
// event the consumer could not fold, or a completed resync whose items do
// not add up to the checksum it announced; and it logs the figures.
func (f *fanout) foldsSound(t *testing.T) (nats, hook eventfold.Stats) {
	t.Helper()
	nats, hook = f.nats.Stats(f.path()), f.hook.Fold.Stats(f.path())
	for _, s := range []struct {
		name  string
		fold  *eventfold.Fold
		stats eventfold.Stats
	}{{"nats", f.nats, nats}, {"webhook", f.hook.Fold, hook}} {
		t.Logf("%s fold: %d events, %d duplicates (re-deliveries of an id already applied), %d stale, resyncs %d started / %d completed, %d checksum mismatches",
			s.name, s.stats.Events, s.stats.Duplicates, s.stats.Stale, s.stats.ResyncsStarted, s.stats.ResyncsCompleted, s.stats.ChecksumMismatches)
		if err := s.fold.Err(); err != nil {
			t.Errorf("%s: events the consumer cannot fold: %v", s.name, err)
		}
		if s.stats.ChecksumMismatches != 0 || s.stats.Pending {
			t.Errorf("%s: %d resyncs ended with items that do not add up to the announced checksum (pending now: %v)", s.name, s.stats.ChecksumMismatches, s.stats.Pending)
		}
	}
	return nats, hook
}
