package nats

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/netguard/netguardtest"
)

// loopbackDialer allows the test servers' loopback addresses, as
// --allow-private-sink-endpoints does.
var loopbackDialer, _ = netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})

// advertisingServer speaks just enough NATS to accept a client, tells it
// about another server (connect_urls), and drops every connection after a
// moment so that the client looks for a server to reconnect to.
func advertisingServer(t *testing.T, advertised string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var n atomic.Int64
	info := fmt.Sprintf(`INFO {"server_id":"FAKE","version":"2.10.0","proto":1,"max_payload":1048576,"headers":true,"connect_urls":[%q]}`+"\r\n", advertised)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write([]byte(info)); err != nil {
					return
				}
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						// Connected; say it again asynchronously, then go away.
						_, _ = c.Write([]byte("PONG\r\n" + info))
						time.Sleep(200 * time.Millisecond)
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String(), &n
}

// The servers a server advertises are never dialed, even where the
// address policy would allow them.
func TestAdvertisedServersIgnored(t *testing.T) {
	advertised, accepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	server, connects := advertisingServer(t, advertised)
	s := newSink(t, "nats://"+server, "S", "", nil)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_ = s.Probe(ctx)
	// Let the client see the connection drop and reconnect (to the
	// endpoint's server, the only one in its pool).
	deadline := time.Now().Add(10 * time.Second)
	for connects.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if connects.Load() < 2 {
		t.Fatalf("the client connected %d times, want a reconnect: the test proves nothing", connects.Load())
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the advertised server got %d connections", n)
	}
}

// Without --allow-private-sink-endpoints the real test server on loopback
// is not reached, and the error says why.
func TestLoopbackRefused(t *testing.T) {
	addr, accepted := netguardtest.Listen(t, "tcp", "127.0.0.1:0")
	strict, err := netguard.New(netguard.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, endpoint := range []string{"nats://" + addr, "nats://localhost:4222", "tls://[::1]:4222", "nats://[::ffff:127.0.0.1]:4222"} {
		s, err := New(&v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: endpoint, NATS: &v1alpha1.NATSSinkConfig{Stream: "S"}}, nil, strict)
		if err != nil {
			t.Fatal(err)
		}
		for op, err := range map[string]error{"Probe": s.Probe(ctxT(t)), "Publish": s.Publish(ctxT(t), teamInv, events(teamInv, changes(t, 1)))} {
			if c := sink.Classify(err); c == nil || c.Outcome != sink.OutcomeAddressForbidden {
				t.Errorf("%s %s: %v classified %+v, want AddressForbidden", endpoint, op, err, c)
			}
		}
		_ = s.Close()
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	if _, err := New(&v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkNATS, Endpoint: "nats://" + addr, NATS: &v1alpha1.NATSSinkConfig{Stream: "S"}}, nil, nil); err == nil {
		t.Error("New without a dialer succeeded")
	}
}
