package eventfold

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

const natsServerBin = "/usr/sbin/nats-server"

// connect reaches a real JetStream server; without one the test fails.
func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := natsgo.Connect(url, natsgo.Timeout(3*time.Second),
		// Through a server restart the connection comes back by itself.
		natsgo.MaxReconnects(-1), natsgo.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatalf("cannot connect to NATS at %s (set KOLLECT_TEST_NATS_URL, or run `make services`): %v", url, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func natsURL() string {
	if u := os.Getenv("KOLLECT_TEST_NATS_URL"); u != "" {
		return u
	}
	return "nats://127.0.0.1:4222"
}

func randHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 5)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// stream creates a stream for "<prefix>.>", deleted when the test ends.
func stream(t *testing.T, js jetstream.JetStream, storage jetstream.StorageType) (name, prefix string) {
	t.Helper()
	r := randHex(t)
	name, prefix = "eventfold_"+r, "ef_"+r
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{prefix + ".>"}, Storage: storage}); err != nil {
		t.Fatalf("creating stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
	})
	return name, prefix
}

// publish sends events as the nats sink does: the event JSON, with the
// event id as Nats-Msg-Id unless bare. It returns how many JetStream
// stored (not dropped as repeats).
func publish(t *testing.T, js jetstream.JetStream, subject string, bare bool, evs ...sink.Event) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stored := 0
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var opts []jetstream.PublishOpt
		if !bare {
			opts = append(opts, jetstream.WithMsgID(ev.ID))
		}
		ack, err := js.Publish(ctx, subject, b, opts...)
		if err != nil {
			t.Fatalf("publishing %s: %v", ev.ID, err)
		}
		if !ack.Duplicate {
			stored++
		}
	}
	return stored
}

// Two inventories and a second cluster on one real stream: Follow folds
// what was published before it started and what comes after, each
// inventory apart; a repeat JetStream drops never reaches the fold, one
// it stored is counted as a re-delivery.
func TestFollowFoldsARealStream(t *testing.T) {
	js := connect(t, natsURL())
	name, prefix := stream(t, js, jetstream.MemoryStorage)
	other := eastApp
	other.Name = "other"
	west := eastApp
	west.Cluster = "west"
	a, b, c := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"), item("c", "uid-c", "12", "c1")
	b2 := item("b", "uid-b", "13", "b2")

	subj := prefix + ".team-a.apps"
	stored := publish(t, js, subj, false, resync(eastApp, "t1", 1, a, b, c)...)
	stored += publish(t, js, subj, false, up(eastApp, b2, 1, ""), del(eastApp, a, 1))
	stored += publish(t, js, subj, false, up(eastApp, b2, 1, "")) // same id: JetStream drops it
	stored += publish(t, js, subj, true, del(eastApp, a, 1))      // a repeat past the window: stored
	stored += publish(t, js, prefix+".team-a.other", false, up(other, a, 1, ""), up(other, c, 1, ""))
	stored += publish(t, js, prefix+".west.apps", false, up(west, c, 7, ""))
	if stored != 10 {
		t.Fatalf("JetStream stored %d of 11 messages, want 10 (one dropped as a repeat)", stored)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f := New()
	Follow(ctx, t, js, name, f)
	for path, want := range map[string][]*sink.Item{
		sink.InventoryPath(eastApp): {b2, c},
		sink.InventoryPath(other):   {a, c},
		sink.InventoryPath(west):    {c},
	} {
		if err := f.WaitEqual(ctx, path, live(want...)); err != nil {
			t.Fatal(err)
		}
	}
	wantStats(t, f, sink.InventoryPath(eastApp), Stats{Events: 7, Duplicates: 1, ResyncsStarted: 1, ResyncsCompleted: 1})

	// Live: a new leader (epoch 2) resyncs east's apps; then the former
	// leader's late delete of c arrives and is ignored.
	publish(t, js, subj, false, resync(eastApp, "t2", 2, a, c)...)
	publish(t, js, subj, false, del(eastApp, c, 1), up(eastApp, b, 2, ""))
	if err := f.WaitEqual(ctx, sink.InventoryPath(eastApp), live(a, b, c)); err != nil {
		t.Fatal(err)
	}
	wantStats(t, f, sink.InventoryPath(eastApp), Stats{Events: 12, Duplicates: 1, Stale: 1, ResyncsStarted: 2, ResyncsCompleted: 2})
	if err := f.Err(); err != nil {
		t.Fatal(err)
	}
}

// Follow goes on folding through a restart of the NATS server (a file
// stream survives it): messages published after the restart are folded.
func TestFollowSurvivesANATSServerRestart(t *testing.T) {
	srv := startNATS(t)
	js := connect(t, srv.url)
	name, prefix := stream(t, js, jetstream.FileStorage)
	subj := prefix + ".team-a.apps"
	a, b, c := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"), item("c", "uid-c", "12", "c1")
	publish(t, js, subj, false, resync(eastApp, "t1", 1, a, b)...)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := New()
	Follow(ctx, t, js, name, f)
	p := sink.InventoryPath(eastApp)
	if err := f.WaitEqual(ctx, p, live(a, b)); err != nil {
		t.Fatal(err)
	}

	srv.restart(t)
	// The publisher's connection is back once a publish succeeds.
	publish(t, js, subj, false, del(eastApp, a, 1), up(eastApp, c, 1, ""))
	if err := f.WaitEqual(ctx, p, live(b, c)); err != nil {
		t.Fatal(err)
	}
	wantStats(t, f, p, Stats{Events: 5, ResyncsStarted: 1, ResyncsCompleted: 1})
}

// natsServer is a private JetStream server on a loopback port, with a
// store that survives its restarts.
type natsServer struct {
	url, addr, dir string
	cmd            *exec.Cmd
	exited         chan struct{}
	out            *bytes.Buffer
}

func startNATS(t *testing.T) *natsServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &natsServer{url: "nats://" + addr, addr: addr, dir: t.TempDir()}
	s.start(t)
	t.Cleanup(func() { s.stop() })
	return s
}

func (s *natsServer) start(t *testing.T) {
	t.Helper()
	host, port, _ := net.SplitHostPort(s.addr)
	s.out = &bytes.Buffer{}
	s.cmd = exec.Command(natsServerBin, "-a", host, "-p", port, "-js", "-sd", s.dir)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", natsServerBin, err)
	}
	exited := make(chan struct{})
	s.exited = exited
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		close(exited)
	}(s.cmd)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-exited:
			t.Fatalf("nats-server exited: %s\n%s", s.cmd.ProcessState, s.out.String())
		case <-ctx.Done():
			t.Fatalf("nats-server did not listen on %s: %v\n%s", s.addr, err, s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stop ends the server (SIGTERM: it flushes its store) and waits for it.
func (s *natsServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *natsServer) restart(t *testing.T) {
	t.Helper()
	s.stop()
	s.start(t)
}
