package export

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	kollectv1alpha1 "kollect.dev/kollect/pkg/generated/clientset/versioned/typed/kollect/v1alpha1"
	"kollect.dev/kollect/test/eventfold"
)

// rigOptions shape a delivery rig.
type rigOptions struct {
	// inventories to create, all exporting to the rig's three sinks;
	// default one, "inv".
	inventories []string
	// privateNATS publishes to a private nats-server (one the test may
	// stop, and whose connections it can count) instead of the machine's.
	privateNATS bool
	// requester creates the Inventories as the ServiceAccount "exporter",
	// holding exactly the grants an export needs, in three RoleBindings
	// the test may delete: manage-inventories, use-sinks, read-items.
	requester bool
}

// rig is one namespace's export under test: ConfigMaps labelled app=web
// collected by the Target "web", and Inventories exporting them to three
// sinks: the webhook "hook" (an eventfold receiver, reached through a
// recording relay), the NATS sink "stream" (a stream of its own, followed
// by eventfold) and the Postgres sink "portal" (a schema of its own).
type rig struct {
	ns   string
	invs []string

	hook  *eventfold.Webhook
	relay *relay

	natsSrv    *natsServer // nil: the machine's server
	natsURL    string
	js         jetstream.JetStream
	streamName string
	subjects   string
	stream     jetstream.Stream
	natsFold   *eventfold.Fold

	schema string

	// want is what the live item set must describe: the ConfigMaps that
	// exist and carry the label, by name, to their data.value.
	want map[string]string
	next int
}

const (
	rigHook   = "hook"
	rigStream = "stream"
	rigPortal = "portal"
)

// newRig builds the rig in namespace ns and waits until every sink holds
// the live set.
func newRig(ctx context.Context, t *testing.T, ns string, o rigOptions) *rig {
	t.Helper()
	if len(o.inventories) == 0 {
		o.inventories = []string{"inv"}
	}
	r := &rig{ns: ns, invs: o.inventories, want: map[string]string{}}
	namespace(ctx, t, ns)
	api := kollect.KollectV1alpha1()
	for range 6 {
		r.create(ctx, t)
	}
	_, err := api.Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "value", Path: "{.data.value}"}}},
	}, metav1.CreateOptions{})
	must(t, err, "profile")
	_, err = api.Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, "target")

	// The webhook receiver, and the relay in front of it the sink uses.
	hmacKey := "hmac-" + randomSuffix()
	r.hook = eventfold.StartWebhook(t, hmacKey)
	r.relay = startRelay(t, r.hook)

	// The stream, on the machine's server or a private one.
	conn := nc
	r.natsURL = natsURL
	if o.privateNATS {
		r.natsSrv = startNATSServer(ctx, t)
		r.natsURL = r.natsSrv.url()
		// Reconnect for as long as it takes: the test restarts the server.
		c, err := nats.Connect(r.natsURL, nats.MaxReconnects(-1), nats.ReconnectWait(200*time.Millisecond))
		must(t, err, "connecting to the private nats-server")
		t.Cleanup(c.Close)
		conn = c
	}
	r.js, err = jetstream.New(conn)
	must(t, err, "jetstream")
	prefix := "kd" + randomSuffix()
	r.streamName, r.subjects = strings.ToUpper(prefix), prefix+".>"
	r.stream, err = r.js.CreateStream(ctx, jetstream.StreamConfig{Name: r.streamName, Subjects: []string{r.subjects}, Duplicates: 2 * time.Minute})
	must(t, err, "creating stream "+r.streamName)
	if !o.privateNATS {
		t.Cleanup(func() { _ = r.js.DeleteStream(context.Background(), r.streamName) })
	}
	r.natsFold = eventfold.New()
	eventfold.Follow(ctx, t, r.js, r.streamName, r.natsFold)

	r.schema = pgSchema(t, "e2e_delivery")
	secret(ctx, t, ns, "hook-key", map[string]string{"hmacKey": hmacKey})
	secret(ctx, t, ns, "portal-db", map[string]string{"dsn": postgresDSN})
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: rigHook},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: r.relay.url() + "/events",
			SecretRef: &v1alpha1.LocalObjectReference{Name: "hook-key"},
			TLS:       &v1alpha1.TLSConfig{CABundle: r.hook.CA},
			// Short: the hang fault must time out well within a case.
			Webhook: &v1alpha1.WebhookSinkConfig{Timeout: &metav1.Duration{Duration: 2 * time.Second}, MaxAttempts: 2}},
	}, metav1.CreateOptions{})
	must(t, err, "webhook sink")
	_, err = api.EventSinks(ns).Create(ctx, &v1alpha1.EventSink{
		ObjectMeta: metav1.ObjectMeta{Name: rigStream},
		Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: r.natsURL,
			NATS: &v1alpha1.NATSSinkConfig{Stream: r.streamName, Subject: prefix + ".{namespace}.{inventory}"}},
	}, metav1.CreateOptions{})
	must(t, err, "nats sink")
	_, err = api.DatabaseSinks(ns).Create(ctx, &v1alpha1.DatabaseSink{
		ObjectMeta: metav1.ObjectMeta{Name: rigPortal},
		Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres, SecretRef: &v1alpha1.LocalObjectReference{Name: "portal-db"},
			Postgres: &v1alpha1.PostgresSinkConfig{Schema: r.schema, Table: "inventory"}},
	}, metav1.CreateOptions{})
	must(t, err, "postgres sink")

	invAPI := api
	if o.requester {
		invAPI = r.requester(ctx, t)
	}
	for _, name := range r.invs {
		_, err = invAPI.Inventories(ns).Create(ctx, &v1alpha1.Inventory{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1alpha1.InventorySpec{
				// No anti-drift resync: every event after the first
				// resync is a change the exporter owed.
				ExportMinInterval: &metav1.Duration{Duration: time.Hour},
				EventSinkRefs:     []v1alpha1.SinkReference{{Name: rigHook}, {Name: rigStream}},
				DatabaseSinkRefs:  []v1alpha1.SinkReference{{Name: rigPortal}},
			},
		}, metav1.CreateOptions{})
		must(t, err, "inventory "+name)
	}
	r.converge(ctx, t, "first export")
	return r
}

// requester creates the ServiceAccount "exporter", its grants, and returns
// a client acting as it.
func (r *rig) requester(ctx context.Context, t *testing.T) kollectv1alpha1.KollectV1alpha1Interface {
	t.Helper()
	token, err := cluster.ServiceAccountToken(ctx, r.ns, "exporter", time.Hour)
	must(t, err, "the exporter's token")
	role(ctx, t, r.ns, "manage-inventories", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"inventories"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}})
	role(ctx, t, r.ns, "use-sinks", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"eventsinks", "databasesinks"},
		Verbs: []string{"use"}}})
	role(ctx, t, r.ns, "read-items", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupName}, Resources: []string{"inventoryitems"},
		Verbs: []string{"list"}}})
	for _, b := range []string{"manage-inventories", "use-sinks", "read-items"} {
		bind(ctx, t, r.ns, b, "exporter")
	}
	user := "system:serviceaccount:" + r.ns + ":exporter"
	waitAllowed(ctx, t, user, r.ns, "create", "inventories", v1alpha1.GroupName, "", true)
	waitAllowed(ctx, t, user, r.ns, "use", "eventsinks", v1alpha1.GroupName, rigHook, true)
	waitAllowed(ctx, t, user, r.ns, "use", "databasesinks", v1alpha1.GroupName, rigPortal, true)
	waitAllowed(ctx, t, user, r.ns, "list", "inventoryitems", v1alpha1.GroupName, "", true)
	cfg := rest.AnonymousClientConfig(cluster.RESTConfig())
	cfg.BearerToken = token
	return versioned.NewForConfigOrDie(cfg).KollectV1alpha1()
}

// path is the eventfold key of one of the rig's inventories.
func (r *rig) path(inv string) string {
	return sink.InventoryPath(sink.Inventory{Cluster: clusterName, Kind: "Inventory", Namespace: r.ns, Name: inv})
}

// create adds a labelled ConfigMap.
func (r *rig) create(ctx context.Context, t *testing.T) {
	t.Helper()
	name, value := fmt.Sprintf("cm-%03d", r.next), fmt.Sprintf("v%d", r.next)
	r.next++
	_, err := kube.CoreV1().ConfigMaps(r.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Data:       map[string]string{"value": value},
	}, metav1.CreateOptions{})
	must(t, err, "create ConfigMap "+name)
	r.want[name] = value
}

// edit changes a ConfigMap with a read-modify-write.
func (r *rig) edit(ctx context.Context, t *testing.T, name string, fn func(*corev1.ConfigMap)) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := kube.CoreV1().ConfigMaps(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(cm)
		_, err = kube.CoreV1().ConfigMaps(r.ns).Update(ctx, cm, metav1.UpdateOptions{})
		return err
	})
	must(t, err, "update ConfigMap "+name)
}

// churn makes one round of changes of every kind: two creates, an update,
// a deletion, and an object leaving the target's selector (unlabelled,
// not deleted). The set's size stays the same.
func (r *rig) churn(ctx context.Context, t *testing.T) {
	t.Helper()
	names := slices.Sorted(maps.Keys(r.want))
	if len(names) < 3 {
		t.Fatalf("churn needs 3 selected ConfigMaps, have %d", len(names))
	}
	updated, deleted, unlabelled := names[0], names[1], names[2]
	value := fmt.Sprintf("u%d", r.next)
	r.next++
	r.edit(ctx, t, updated, func(cm *corev1.ConfigMap) { cm.Data["value"] = value })
	r.want[updated] = value
	must(t, kube.CoreV1().ConfigMaps(r.ns).Delete(ctx, deleted, metav1.DeleteOptions{}), "delete ConfigMap "+deleted)
	delete(r.want, deleted)
	r.edit(ctx, t, unlabelled, func(cm *corev1.ConfigMap) { delete(cm.Labels, "app") })
	delete(r.want, unlabelled)
	r.create(ctx, t)
	r.create(ctx, t)
}

// live reads the items through the kollect client: item key to hash. It
// reports false until they describe exactly the ConfigMaps of want, so
// that a sink is never compared with a set the collector has not caught
// up with.
func (r *rig) live(ctx context.Context) (map[string]string, bool, string) {
	list, err := kollect.KollectV1alpha1().InventoryItems(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, false, err.Error()
	}
	set, seen := map[string]string{}, map[string]string{}
	for _, it := range list.Items {
		var v string
		if a, ok := it.Attributes["value"]; ok {
			_ = json.Unmarshal(a.Raw, &v)
		}
		seen[it.Source.Name] = v
		set[it.Namespace+"/"+it.Name] = it.Hash
	}
	if !maps.Equal(seen, r.want) {
		return nil, false, fmt.Sprintf("items describe %v; want %v", seen, r.want)
	}
	return set, true, ""
}

// rowsEqual compares the Postgres rows of an inventory with live.
func (r *rig) rowsEqual(ctx context.Context, inv string, live map[string]string) error {
	rows, err := pgRows(ctx, r.schema, "inventory", r.ns, inv) // fails on a duplicate item uid
	if err != nil {
		return err
	}
	got := map[string]string{}
	for uid, row := range rows {
		if _, dup := got[row.key]; dup {
			return fmt.Errorf("two rows for item %s (one is uid %s)", row.key, uid)
		}
		got[row.key] = row.hash
	}
	if !maps.Equal(got, live) {
		return fmt.Errorf("%d rows %v; want %d %v", len(got), got, len(live), live)
	}
	return nil
}

// converge waits until, for every inventory, the NATS stream and the
// webhook folded by eventfold and the Postgres rows hold exactly the live
// set, and the Inventory says Synced at its checksum.
func (r *rig) converge(ctx context.Context, t *testing.T, what string) {
	t.Helper()
	var live map[string]string
	eventually(ctx, t, what+": every sink holds the live set", func(ctx context.Context) (bool, string) {
		var ok bool
		var why string
		if live, ok, why = r.live(ctx); !ok {
			return false, why
		}
		for _, inv := range r.invs {
			if err := r.natsFold.Equal(r.path(inv), live); err != nil {
				return false, "nats: " + err.Error()
			}
			if err := r.hook.Fold.Equal(r.path(inv), live); err != nil {
				return false, "webhook: " + err.Error()
			}
			if err := r.rowsEqual(ctx, inv, live); err != nil {
				return false, "postgres " + inv + ": " + err.Error()
			}
		}
		return true, ""
	})
	var c sink.Checksum
	for k, h := range live {
		c.Add(k, h)
	}
	for _, inv := range r.invs {
		waitSynced(ctx, t, r.ns, inv, c.String(), 3)
	}
}

// foldStats are the eventfold figures of every (sink, inventory).
type foldStats map[string]eventfold.Stats

func (r *rig) stats() foldStats {
	s := foldStats{}
	for _, inv := range r.invs {
		s["nats/"+inv] = r.natsFold.Stats(r.path(inv))
		s["webhook/"+inv] = r.hook.Fold.Stats(r.path(inv))
	}
	return s
}

// verify checks, once the sinks converged, what the folds and the raw
// event sequences say about how they got there, and logs the figures:
// no event a consumer could not fold, no stale epoch, every resync
// complete with its checksum, no resync since base (a running exporter
// delivers what it owes instead of starting over), and every id naming
// one event only, so that each duplicate is a re-delivery.
func (r *rig) verify(ctx context.Context, t *testing.T, base foldStats) {
	t.Helper()
	if err := r.natsFold.Err(); err != nil {
		t.Errorf("nats: events eventfold could not fold: %v", err)
	}
	if err := r.hook.Fold.Err(); err != nil {
		t.Errorf("webhook: events eventfold could not fold: %v", err)
	}
	now := r.stats()
	for _, k := range slices.Sorted(maps.Keys(now)) {
		s := now[k]
		t.Logf("%s: %d events, %d duplicates (re-deliveries), %d stale, resyncs %d started/%d completed, %d checksum mismatches",
			k, s.Events, s.Duplicates, s.Stale, s.ResyncsStarted, s.ResyncsCompleted, s.ChecksumMismatches)
		switch {
		case s.Pending:
			t.Errorf("%s: a resync is still pending", k)
		case s.ChecksumMismatches != 0:
			t.Errorf("%s: %d resyncs completed with a checksum other than announced", k, s.ChecksumMismatches)
		case s.Stale != 0:
			t.Errorf("%s: %d events of a stale epoch, with one leader", k, s.Stale)
		}
		if base != nil && s.ResyncsStarted != base[k].ResyncsStarted {
			t.Errorf("%s: %d resyncs started during the fault; the exporter should deliver what it owes, not start over", k, s.ResyncsStarted-base[k].ResyncsStarted)
		}
	}
	raw := streamEvents(ctx, t, r.stream)
	checkIDs(t, "nats", raw)
	checkIDs(t, "webhook", r.relay.accepted())
	conns, posts := r.relay.counts()
	t.Logf("nats stream: %d messages; webhook: %d requests at the receiver, %d POSTs over %d connections at the relay",
		len(raw), r.hook.Requests(), posts, conns)
}

// checkIDs fails when one event id carries two different events: then a
// "duplicate" would not be a re-delivery. It also checks that every event
// names the suite's cluster.
func checkIDs(t *testing.T, what string, events []sink.Event) {
	t.Helper()
	type meaning struct {
		typ, uid, rv, hash, resync, cluster string
		epoch                               int64
	}
	byID := map[string]meaning{}
	for _, ev := range events {
		m := meaning{typ: ev.Type, uid: ev.Data.ItemUID, rv: ev.Data.ItemResourceVersion, resync: ev.Resync, cluster: ev.Cluster, epoch: ev.Epoch}
		if ev.Data.Item != nil {
			m.hash = ev.Data.Item.Hash
		}
		if ev.Data.Resync != nil {
			m.hash = ev.Data.Resync.Checksum
		}
		if ev.Cluster != clusterName || !strings.HasPrefix(ev.ID, clusterName+"/Inventory/") {
			t.Errorf("%s: event %s names cluster %q; want %q", what, ev.ID, ev.Cluster, clusterName)
		}
		if prev, ok := byID[ev.ID]; ok && prev != m {
			t.Errorf("%s: id %s carries two events: %+v and %+v", what, ev.ID, prev, m)
		}
		byID[ev.ID] = m
	}
}

// entryOf returns the status entry of sink name in inventory inv (nil
// while there is none).
func (r *rig) entryOf(ctx context.Context, inv string, family v1alpha1.SinkFamily, name string) *v1alpha1.SinkExportStatus {
	got, err := kollect.KollectV1alpha1().Inventories(r.ns).Get(ctx, inv, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return entry(got, family, name)
}

// failing reports whether the entry of a sink says Failed (with reason,
// when reason is not empty) in every inventory.
func (r *rig) failing(ctx context.Context, family v1alpha1.SinkFamily, name, reason string) (bool, string) {
	for _, inv := range r.invs {
		e := r.entryOf(ctx, inv, family, name)
		if e == nil {
			return false, inv + ": no entry for " + name
		}
		if e.Outcome != v1alpha1.OutcomeFailed || (reason != "" && e.Reason != reason) {
			return false, fmt.Sprintf("%s/%s: outcome %s reason %s: %s", inv, name, e.Outcome, e.Reason, e.Message)
		}
	}
	return true, ""
}

// editEventSink changes an EventSink's spec with a read-modify-write.
func (r *rig) editEventSink(ctx context.Context, t *testing.T, name string, fn func(*v1alpha1.EventSinkSpec)) {
	t.Helper()
	api := kollect.KollectV1alpha1().EventSinks(r.ns)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		fn(&s.Spec)
		_, err = api.Update(ctx, s, metav1.UpdateOptions{})
		return err
	})
	must(t, err, "edit EventSink "+name)
}
