package nats

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/test/eventfold"
)

const natsServerBin = "/usr/sbin/nats-server"

// testURL is the shared JetStream-enabled server the tests use.
func testURL() string {
	if u := os.Getenv("KOLLECT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

// admin connects to the test server for setting up and reading streams.
// The tests need a real server: they fail, never skip, without one.
func admin(t *testing.T, url string, opts ...natsgo.Option) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url, append(opts, natsgo.Timeout(3*time.Second))...)
	if err != nil {
		t.Fatalf("cannot connect to the NATS test server at %s (set KOLLECT_TEST_NATS_URL, or start one with "+
			"`start-stop-daemon --start --oknodo --background --exec %s -- -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log`): %v",
			url, natsServerBin, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Fatalf("the NATS test server at %s has no JetStream (start it with -js): %v", url, err)
	}
	return js
}

func randSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// newStream creates a memory stream capturing "<prefix>.>", named after the
// test, and deletes it when the test ends. It returns the stream and the
// subject prefix.
func newStream(t *testing.T, js jetstream.JetStream) (jetstream.Stream, string) {
	t.Helper()
	r := randSuffix(t)
	name := nonName.ReplaceAllString(t.Name(), "_") + "_" + r
	prefix := "kt_" + r
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{prefix + ".>"},
		Storage:  jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("creating stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("deleting stream %s: %v", name, err)
		}
	})
	return st, prefix
}

func newSink(t *testing.T, url, stream, subject string, secret sink.Secret) *Sink {
	t.Helper()
	s, err := New(&v1alpha1.EventSinkSpec{
		Type:     v1alpha1.EventSinkNATS,
		Endpoint: url,
		NATS:     &v1alpha1.NATSSinkConfig{Stream: stream, Subject: subject},
	}, secret, loopbackDialer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

var teamInv = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "web.prod", UID: "inv-uid"}

// testEpoch is the leadership epoch of the tests' events.
const testEpoch = 7

// events builds the events of changes, as the exporter does outside a
// resync.
func events(inv sink.Inventory, cs []sink.Change) []sink.Event {
	out := make([]sink.Event, len(cs))
	now := time.Now()
	for i, c := range cs {
		out[i] = sink.NewEvent(inv, c, testEpoch, "", now)
	}
	return out
}

// changes makes n changes with fresh item UIDs; every third is a delete.
func changes(t *testing.T, n int, kinds ...string) []sink.Change {
	t.Helper()
	if len(kinds) == 0 {
		kinds = []string{"Deployment"}
	}
	out := make([]sink.Change, n)
	for i := range out {
		op := sink.Upsert
		if i%3 == 2 {
			op = sink.Delete
		}
		kind := kinds[i%len(kinds)]
		out[i] = sink.Change{Op: op, Item: &sink.Item{
			Namespace:       "team-a",
			Name:            fmt.Sprintf("item-%d", i),
			Target:          "apps",
			Profile:         "basic",
			Source:          sink.Source{APIVersion: "apps/v1", Kind: kind, Namespace: "team-a", Name: fmt.Sprintf("obj-%d", i)},
			Attributes:      json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
			Hash:            fmt.Sprintf("%064x", i),
			UID:             randSuffix(t),
			ResourceVersion: fmt.Sprint(100 + i),
		}}
	}
	return out
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func msgCount(t *testing.T, st jetstream.Stream) uint64 {
	t.Helper()
	info, err := st.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// checkMsg reads message seq and checks it is the event of c.
func checkMsg(t *testing.T, st jetstream.Stream, seq uint64, subject string, inv sink.Inventory, c sink.Change) {
	t.Helper()
	m, err := st.GetMsg(ctxT(t), seq)
	if err != nil {
		t.Fatalf("message %d: %v", seq, err)
	}
	id := sink.NewEvent(inv, c, testEpoch, "", time.Time{}).ID
	if m.Subject != subject {
		t.Errorf("message %d: subject %q, want %q", seq, m.Subject, subject)
	}
	if got := m.Header.Get("Nats-Msg-Id"); got != id {
		t.Errorf("message %d: Nats-Msg-Id %q, want %q", seq, got, id)
	}
	if got := m.Header.Get("Content-Type"); got != ContentType {
		t.Errorf("message %d: Content-Type %q", seq, got)
	}
	var ev sink.Event
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatalf("message %d: body is not an event: %v", seq, err)
	}
	wantType := sink.EventTypeUpserted
	if c.Op == sink.Delete {
		wantType = sink.EventTypeDeleted
	}
	if ev.SpecVersion != "1.0" || ev.ID != id || ev.Type != wantType || ev.Source != sink.EventSource(inv) ||
		ev.Cluster != inv.Cluster || ev.Epoch != testEpoch || ev.Resync != "" ||
		ev.Subject != c.Item.Key() || ev.Time.IsZero() || ev.Data.Op != c.Op || ev.Data.ItemUID != c.Item.UID ||
		ev.Data.Inventory.Name != inv.Name || ev.Data.Item == nil || ev.Data.Item.Name != c.Item.Name ||
		!bytes.Equal(ev.Data.Item.Attributes, c.Item.Attributes) {
		t.Errorf("message %d: event %+v does not match change %s %+v", seq, ev, c.Op, *c.Item)
	}
}

func TestPublishInOrder(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{namespace}.{inventory}.{kind}.{name}", nil)

	cs := changes(t, 7, "Deployment", "Service")
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, cs)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := msgCount(t, st); n != uint64(len(cs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(cs))
	}
	for i, c := range cs {
		// The inventory name's dot is not a subject separator.
		want := fmt.Sprintf("%s.team-a.web_prod.%s.item-%d", prefix, c.Item.Source.Kind, i)
		checkMsg(t, st, uint64(i+1), want, teamInv, c)
	}

	// A cluster inventory's {namespace} token.
	clusterInv := sink.Inventory{Cluster: "east", Kind: "ClusterInventory", Name: "nodes"}
	c := changes(t, 1, "Node")
	c[0].Item.Namespace = ""
	if err := s.Publish(ctxT(t), clusterInv, events(clusterInv, c)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	checkMsg(t, st, uint64(len(cs)+1), prefix+"._cluster.nodes.Node.item-0", clusterInv, c[0])
}

// More events than the in-flight window still arrive complete and in order.
func TestPublishManyInOrder(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{namespace}.{inventory}", nil)

	cs := changes(t, 3*maxInFlight+17)
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, cs)); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if n := msgCount(t, st); n != uint64(len(cs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(cs))
	}
	for i, c := range cs {
		m, err := st.GetMsg(ctxT(t), uint64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := m.Header.Get("Nats-Msg-Id"), sink.NewEvent(teamInv, c, testEpoch, "", time.Time{}).ID; got != want {
			t.Fatalf("message %d is %s, want %s", i+1, got, want)
		}
	}
}

func TestPublishTwiceIsDeduplicated(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{namespace}.{inventory}", nil)

	cs := changes(t, 5)
	evs := events(teamInv, cs)
	for range 2 {
		// The second time every ack says Duplicate: delivered all the same.
		if err := s.Publish(ctxT(t), teamInv, evs); err != nil {
			t.Fatalf("Publish: %v", err)
		}
	}
	if n := msgCount(t, st); n != uint64(len(cs)) {
		t.Fatalf("stream holds %d messages after publishing %d events twice, want %d", n, len(cs), len(cs))
	}
	// What the stream answers to such a repeat: an ack with Duplicate set.
	ack, err := js.PublishMsg(ctxT(t), &natsgo.Msg{Subject: prefix + ".team-a.web_prod", Data: []byte("{}")}, jetstream.WithMsgID(evs[0].ID))
	if err != nil || !ack.Duplicate {
		t.Fatalf("publishing event %s again: ack %+v, %v; want a duplicate ack", evs[0].ID, ack, err)
	}
	// A new revision of an item is a new event.
	next := *cs[0].Item
	next.ResourceVersion = "999"
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, []sink.Change{{Op: sink.Upsert, Item: &next}})); err != nil {
		t.Fatal(err)
	}
	if n := msgCount(t, st); n != uint64(len(cs)+1) {
		t.Fatalf("stream holds %d messages, want %d", n, len(cs)+1)
	}
}

func TestSubjectNotCaptured(t *testing.T) {
	js := admin(t, testURL())

	t.Run("by any stream", func(t *testing.T) {
		st, prefix := newStream(t, js)
		// The stream captures Deployments only: the third event's subject
		// goes nowhere.
		name := st.CachedInfo().Config.Name
		if _, err := js.UpdateStream(ctxT(t), jetstream.StreamConfig{
			Name: name, Subjects: []string{prefix + ".Deployment"}, Storage: jetstream.MemoryStorage,
		}); err != nil {
			t.Fatal(err)
		}
		s := newSink(t, testURL(), name, prefix+".{kind}", nil)
		cs := changes(t, 4, "Deployment", "Deployment", "Service", "Deployment")
		err := s.Publish(ctxT(t), teamInv, events(teamInv, cs))
		if err == nil {
			t.Fatal("Publish succeeded for a subject no stream captures")
		}
		t.Log(err)
		if !strings.Contains(err.Error(), "delivered 2 of 4 events") || !strings.Contains(err.Error(), prefix+".Service") {
			t.Errorf("error does not say 2 of 4 were delivered and which subject failed: %v", err)
		}
		for i := range 2 {
			checkMsg(t, st, uint64(i+1), prefix+".Deployment", teamInv, cs[i])
		}
	})

	t.Run("by the configured stream", func(t *testing.T) {
		mine, _ := newStream(t, js)
		other, otherPrefix := newStream(t, js)
		s := newSink(t, testURL(), mine.CachedInfo().Config.Name, otherPrefix+".{inventory}", nil)
		err := s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 2)))
		if err == nil {
			t.Fatal("Publish succeeded to a subject of another stream")
		}
		t.Log(err)
		if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "delivered 0 of 2 events") {
			t.Errorf("want a permanent error saying 0 of 2 were delivered, got %v", err)
		}
		if n := msgCount(t, other); n != 0 {
			t.Errorf("the other stream stored %d messages", n)
		}
	})
}

func TestPublishStopsWhenContextEnds(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{inventory}", nil)
	if err := s.Probe(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.Publish(ctx, teamInv, events(teamInv, changes(t, 3)))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "delivered 0 of 3") {
		t.Errorf("Publish with a cancelled context: %v", err)
	}
	if n := msgCount(t, st); n != 0 {
		t.Errorf("stream holds %d messages", n)
	}
}

func TestProbe(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)

	if err := newSink(t, testURL(), st.CachedInfo().Config.Name, "", nil).Probe(ctxT(t)); err != nil {
		t.Errorf("Probe of an existing stream: %v", err)
	}

	missing := "KT_MISSING_" + randSuffix(t)
	err := newSink(t, testURL(), missing, prefix+".x", nil).Probe(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), missing) || !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe of a missing stream: want a permanent error naming %s, got %v", missing, err)
	}
	if c := sink.Classify(err); c.Outcome != sink.OutcomeProtocol || !strings.Contains(c.Detail, missing) {
		t.Errorf("Probe of a missing stream: classified %+v, want Protocol naming the stream", c)
	}

	// Nothing listens on a closed port.
	err = newSink(t, "nats://"+freeAddr(t), "S", "", nil).Probe(ctxT(t))
	if err == nil || errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe of a server that is down: want a transient error, got %v", err)
	}
	if c := sink.Classify(err); c.Outcome != sink.OutcomeRefused {
		t.Errorf("Probe of a server that is down: classified %+v, want Refused", c)
	}
}

// The sink connects again after its connection was closed.
func TestReconnectAfterClose(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{inventory}", nil)

	if err := s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 1))); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	first := s.nc
	s.mu.Unlock()
	first.Close()
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 1))); err != nil {
		t.Fatalf("Publish after the connection closed: %v", err)
	}
	if s.nc == first {
		t.Error("the sink kept its closed connection")
	}
	if n := msgCount(t, st); n != 2 {
		t.Errorf("stream holds %d messages, want 2", n)
	}

	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Probe(ctxT(t)); err == nil {
		t.Error("Probe after Close succeeded")
	}
}

func TestTokenAuth(t *testing.T) {
	const token = "s3cret-T0ken-value"
	url := startServer(t, "--auth", token)
	js := admin(t, url, natsgo.Token(token))
	st, prefix := newStream(t, js)
	name := st.CachedInfo().Config.Name

	s := newSink(t, url, name, prefix+".{inventory}", sink.Secret{"token": []byte(token + "\n")})
	if err := s.Probe(ctxT(t)); err != nil {
		t.Fatalf("Probe with the right token: %v", err)
	}
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 2))); err != nil {
		t.Fatalf("Publish with the right token: %v", err)
	}

	const wrong = "wr0ng-T0ken-value"
	bad := newSink(t, url, name, prefix+".{inventory}", sink.Secret{"token": []byte(wrong)})
	for op, err := range map[string]error{
		"Probe":   bad.Probe(ctxT(t)),
		"Publish": bad.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 1))),
	} {
		if err == nil {
			t.Fatalf("%s with a wrong token succeeded", op)
		}
		t.Logf("%s: %v", op, err)
		if strings.Contains(err.Error(), wrong) {
			t.Errorf("%s error shows the token: %v", op, err)
		}
		if !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("%s error for a rejected token is not permanent: %v", op, err)
		}
		if c := sink.Classify(err); c.Outcome != sink.OutcomeAuth {
			t.Errorf("%s error for a rejected token: classified %+v, want Auth", op, c)
		}
	}

	// No credential at all.
	if err := newSink(t, url, name, "", nil).Probe(ctxT(t)); err == nil {
		t.Error("Probe without a token succeeded")
	}
}

func TestUserPasswordAuth(t *testing.T) {
	const user, pass = "kollect", "pa55-w0rd-value"
	url := startServer(t, "--user", user, "--pass", pass)
	js := admin(t, url, natsgo.UserInfo(user, pass))
	st, prefix := newStream(t, js)
	name := st.CachedInfo().Config.Name

	s := newSink(t, url, name, prefix+".{inventory}", sink.Secret{"username": []byte(user), "password": []byte(pass)})
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 1))); err != nil {
		t.Fatalf("Publish with the right password: %v", err)
	}
	const wrong = "wr0ng-pa55-value"
	err := newSink(t, url, name, "", sink.Secret{"username": []byte(user), "password": []byte(wrong)}).Probe(ctxT(t))
	if err == nil || strings.Contains(err.Error(), wrong) || !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Probe with a wrong password: want a permanent error without the password, got %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		endpoint, stream, subject string
		secret                    sink.Secret
	}{
		"no stream":          {"nats://127.0.0.1:4222", "", "", nil},
		"http endpoint":      {"http://127.0.0.1:4222", "S", "", nil},
		"not a URL":          {"127.0.0.1:4222", "S", "", nil},
		"credentials in URL": {"nats://tok-in-url@127.0.0.1:4222", "S", "", nil},
		"wildcard subject":   {"nats://127.0.0.1:4222", "S", "a.*.{name}", nil},
		"full wildcard":      {"nats://127.0.0.1:4222", "S", "a.{name}.>", nil},
		"empty token":        {"nats://127.0.0.1:4222", "S", "a..{name}", nil},
		"username only":      {"nats://127.0.0.1:4222", "S", "", sink.Secret{"username": []byte("u")}},
		"bad creds":          {"nats://127.0.0.1:4222", "S", "", sink.Secret{"creds": []byte("not-a-creds-file")}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(&v1alpha1.EventSinkSpec{
				Type: v1alpha1.EventSinkNATS, Endpoint: tc.endpoint,
				NATS: &v1alpha1.NATSSinkConfig{Stream: tc.stream, Subject: tc.subject},
			}, tc.secret, loopbackDialer)
			if !errors.Is(err, sink.ErrPermanent) {
				t.Fatalf("want a permanent error, got %v", err)
			}
			for _, secret := range []string{"tok-in-url", "not-a-creds-file"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error shows %q: %v", secret, err)
				}
			}
		})
	}
}

func TestToken(t *testing.T) {
	for in, want := range map[string]string{
		"team-a":         "team-a",
		"web.prod":       "web_prod",
		"a b*c>d\te\x00": "a_b_c_d_e_",
		"":               "_",
		"\u00a0x\u200by": "_x_y",
		"naïve":          "naïve",
	} {
		if got := Token(in); got != want {
			t.Errorf("Token(%q) = %q, want %q", in, got, want)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return addr
}

// startServer runs a private JetStream nats-server on a free loopback port
// with the extra arguments, stops it when the test ends, and returns its URL.
func startServer(t *testing.T, args ...string) string {
	t.Helper()
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)
	var out bytes.Buffer
	cmd := exec.Command(natsServerBin, append([]string{"-a", host, "-p", port, "-js", "-sd", t.TempDir()}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", natsServerBin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return "nats://" + addr
		}
		select {
		case <-exited:
			t.Fatalf("nats-server exited: %s\n%s", cmd.ProcessState, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not listen on %s: %v\n%s", addr, err, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// msgAt reads message seq of the stream.
func msgAt(t *testing.T, st jetstream.Stream, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	m, err := st.GetMsg(ctxT(t), seq)
	if err != nil {
		t.Fatalf("message %d: %v", seq, err)
	}
	return m
}

// TestInventoriesShareAStream: two inventories of one namespace publish
// the same item revisions (the same item UIDs and resourceVersions) to one
// stream. Their ids name the inventory, so JetStream keeps every event of
// both; before, the second inventory's were dropped as duplicates.
func TestInventoriesShareAStream(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{cluster}.{namespace}.{inventory}", nil)

	first := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "apps"}
	second := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "audit"}
	cs := changes(t, 6)
	for _, inv := range []sink.Inventory{first, second} {
		if err := s.Publish(ctxT(t), inv, events(inv, cs)); err != nil {
			t.Fatalf("Publish for %s: %v", inv.Name, err)
		}
	}
	if n := msgCount(t, st); n != uint64(2*len(cs)) {
		t.Fatalf("stream holds %d messages, want %d (every event of both inventories)", n, 2*len(cs))
	}
	for j, inv := range []sink.Inventory{first, second} {
		for i, c := range cs {
			checkMsg(t, st, uint64(j*len(cs)+i+1), prefix+".east.team-a."+inv.Name, inv, c)
		}
	}
}

// TestClustersShareAStream: the default subject names the cluster, and so
// do the ids: two clusters' same-named inventories both arrive, on
// subjects a consumer can tell apart. A private server keeps the default
// "kollect." subjects off the shared one.
func TestClustersShareAStream(t *testing.T) {
	url := startServer(t)
	js := admin(t, url)
	name := "KOLLECT"
	st, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: name, Subjects: []string{"kollect.>"}, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink(t, url, name, "", nil) // the default subject
	east := teamInv
	west := teamInv
	west.Cluster = "west"
	cs := changes(t, 3)
	for _, inv := range []sink.Inventory{east, west} {
		if err := s.Publish(ctxT(t), inv, events(inv, cs)); err != nil {
			t.Fatalf("Publish for %s: %v", inv.Cluster, err)
		}
	}
	if n := msgCount(t, st); n != uint64(2*len(cs)) {
		t.Fatalf("stream holds %d messages, want %d", n, 2*len(cs))
	}
	for j, inv := range []sink.Inventory{east, west} {
		for i, c := range cs {
			checkMsg(t, st, uint64(j*len(cs)+i+1), "kollect."+inv.Cluster+".team-a.web_prod", inv, c)
		}
	}
}

// TestResyncPassesThrough: a resync (the resynced event, then the live
// set's upserts tagged with its token) arrives as built: one message
// each, ids as Nats-Msg-Id, the extension attributes kollectcluster,
// kollectepoch and kollectresync and data.resync in the body. The
// resynced event has no item: its {kind} and {name} are "_".
func TestResyncPassesThrough(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{cluster}.{inventory}.{kind}.{name}", nil)

	now := time.Now()
	live := changes(t, 3)
	for i := range live {
		live[i].Op = sink.Upsert
	}
	items := make([]*sink.Item, len(live))
	for i, c := range live {
		items[i] = c.Item
	}
	token := "tok-" + randSuffix(t)
	evs := []sink.Event{sink.NewResyncEvent(teamInv, token, len(live), sink.ChecksumOf(items), testEpoch, now)}
	for _, c := range live {
		evs = append(evs, sink.NewEvent(teamInv, c, testEpoch, token, now))
	}
	// The same items outside the resync, published before it: different
	// ids, so the resync's upserts are not dropped as repeats.
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, live)); err != nil {
		t.Fatal(err)
	}
	if err := s.Publish(ctxT(t), teamInv, evs); err != nil {
		t.Fatalf("Publish of the resync: %v", err)
	}
	if n := msgCount(t, st); n != uint64(len(live)+len(evs)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(live)+len(evs))
	}
	for i, ev := range evs {
		m := msgAt(t, st, uint64(len(live)+i+1))
		want := prefix + ".east.web_prod._._"
		if ev.Data.Item != nil {
			want = prefix + ".east.web_prod.Deployment." + ev.Data.Item.Name
		}
		if m.Subject != want {
			t.Errorf("event %d: subject %q, want %q", i, m.Subject, want)
		}
		if got := m.Header.Get("Nats-Msg-Id"); got != ev.ID {
			t.Errorf("event %d: Nats-Msg-Id %q, want %q", i, got, ev.ID)
		}
		wantBody, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(m.Data, wantBody) {
			t.Errorf("event %d: body\n%s\nwant\n%s", i, m.Data, wantBody)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(m.Data, &raw); err != nil {
			t.Fatal(err)
		}
		if string(raw["kollectcluster"]) != `"east"` || string(raw["kollectepoch"]) != "7" {
			t.Errorf("event %d: kollectcluster %s, kollectepoch %s", i, raw["kollectcluster"], raw["kollectepoch"])
		}
		if i == 0 {
			var data struct {
				Resync sink.Resync `json:"resync"`
			}
			if err := json.Unmarshal(raw["data"], &data); err != nil || data.Resync.Token != token || data.Resync.ItemCount != len(live) || data.Resync.Checksum != sink.ChecksumOf(items) {
				t.Errorf("resynced event: data.resync %+v (%v)", data.Resync, err)
			}
			if string(raw["type"]) != `"`+sink.EventTypeResynced+`"` {
				t.Errorf("resynced event: type %s", raw["type"])
			}
		} else if string(raw["kollectresync"]) != `"`+token+`"` || !strings.HasSuffix(ev.ID, "/resync/"+token) {
			t.Errorf("upsert %d: kollectresync %s, id %s", i, raw["kollectresync"], ev.ID)
		}
	}
}

// TestRegistered: the nats type is built through sink.Events, from the
// Secret and the dialer of the parameters.
func TestRegistered(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	spec := &v1alpha1.EventSinkSpec{
		Type:     v1alpha1.EventSinkNATS,
		Endpoint: testURL(),
		NATS:     &v1alpha1.NATSSinkConfig{Stream: st.CachedInfo().Config.Name, Subject: prefix + ".{cluster}.{inventory}"},
	}
	s, err := sink.Events.Build(ctxT(t), string(v1alpha1.EventSinkNATS), spec, sink.Params{Dialer: loopbackDialer})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cs := changes(t, 1)
	if err := s.Publish(ctxT(t), teamInv, events(teamInv, cs)); err != nil {
		t.Fatal(err)
	}
	checkMsg(t, st, 1, prefix+".east.web_prod", teamInv, cs[0])
	if s, err := sink.Events.Build(ctxT(t), string(v1alpha1.EventSinkNATS), spec, sink.Params{}); !errors.Is(err, sink.ErrPermanent) || s != nil {
		t.Errorf("Build without a dialer = %v, %v; want a permanent error", s, err)
	}
}

// An event without an id would be stored without deduplication: refused.
func TestEventWithoutID(t *testing.T) {
	js := admin(t, testURL())
	st, prefix := newStream(t, js)
	s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{inventory}", nil)
	evs := events(teamInv, changes(t, 2))
	evs[1].ID = ""
	err := s.Publish(ctxT(t), teamInv, evs)
	if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "no id") {
		t.Errorf("Publish of an event without an id = %v, want a permanent error", err)
	}
	if n := msgCount(t, st); n != 0 {
		t.Errorf("stream holds %d messages, want 0", n)
	}
}

// TestFormerLeaderDoesNotShadowItsSuccessor: a former leader that resumes
// after a pause can publish a change its successor publishes too (an item
// write both saw). The stream must store the successor's event whatever
// came first, so ids differ by epoch: with one id per change, JetStream
// dropped the successor's event as a repeat, and the consumer kept the
// item's previous content until the next resync. Two orders:
//   - after the successor's resync: the consumer ignores the former
//     leader's copy (older epoch);
//   - before it, when the resync's snapshot predates the change: the
//     resync restates the previous content over the former leader's copy,
//     and only the successor's own event brings the change.
func TestFormerLeaderDoesNotShadowItsSuccessor(t *testing.T) {
	const former, successor = testEpoch, testEpoch + 1
	for _, tc := range []struct {
		name       string
		copyFirst  bool
		wantStale  int
		wantStored uint64
	}{
		{name: "former leader's copy after the successor's resync", wantStale: 1, wantStored: 4},
		{name: "former leader's copy before the successor's resync", copyFirst: true, wantStale: 0, wantStored: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			js := admin(t, testURL())
			st, prefix := newStream(t, js)
			s := newSink(t, testURL(), st.CachedInfo().Config.Name, prefix+".{namespace}.{inventory}", nil)
			now := time.Now()

			before := changes(t, 1)[0]
			before.Op = sink.Upsert
			token := fmt.Sprintf("%d.%d", successor, now.UnixNano())
			resync := []sink.Event{
				sink.NewResyncEvent(teamInv, token, 1, sink.ChecksumOf([]*sink.Item{before.Item}), successor, now),
				sink.NewEvent(teamInv, before, successor, token, now),
			}
			after := sink.Change{Op: sink.Upsert, Item: new(*before.Item)}
			after.Item.ResourceVersion, after.Item.Hash = "200", fmt.Sprintf("%064x", 200)
			formerCopy := []sink.Event{sink.NewEvent(teamInv, after, former, "", now)}
			steps := [][]sink.Event{resync, formerCopy}
			if tc.copyFirst {
				steps = [][]sink.Event{formerCopy, resync}
			}
			steps = append(steps, []sink.Event{sink.NewEvent(teamInv, after, successor, "", now)})
			for i, evs := range steps {
				if err := s.Publish(ctxT(t), teamInv, evs); err != nil {
					t.Fatalf("Publish, step %d: %v", i, err)
				}
			}

			fold := eventfold.New()
			n := msgCount(t, st)
			for seq := uint64(1); seq <= n; seq++ {
				if err := fold.ApplyJSON(msgAt(t, st, seq).Data); err != nil {
					t.Fatal(err)
				}
			}
			path := sink.InventoryPath(teamInv)
			if got := fold.Items(path)[after.Item.Key()]; n != tc.wantStored || got == nil || got.Hash != after.Item.Hash {
				t.Errorf("stream of %d messages (want %d) folds to %+v; want the successor's upsert of revision %s", n, tc.wantStored, got, after.Item.ResourceVersion)
			}
			if s := fold.Stats(path); s.Stale != tc.wantStale || s.Duplicates != 0 {
				t.Errorf("fold stats %+v: want %d stale, no duplicates", s, tc.wantStale)
			}
		})
	}
}
