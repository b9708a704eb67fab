package export

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/test/eventfold"
)

// natsServer is a private nats-server with JetStream on 127.0.0.1 and a
// store directory of its own, for the faults that stop the server or count
// its connections: the machine's server is shared with other tests.
type natsServer struct {
	bin, dir, conf string
	port, httpPort int

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// noInheritedFDs marks the descriptors this process inherited (above
// stderr) close-on-exec: a server the test starts and that outlives it
// (PostgreSQL, started by pg_ctlcluster) must not keep them. A lock file
// the command running the tests holds would otherwise stay locked for as
// long as that server runs.
func noInheritedFDs() {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
			syscall.CloseOnExec(fd)
		}
	}
}

// freePort returns a loopback port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "picking a free port")
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNATSServer starts a private server; it is stopped when the test ends.
// KOLLECT_TEST_NATS_SERVER overrides the binary (default /usr/sbin/nats-server).
func startNATSServer(ctx context.Context, t *testing.T) *natsServer {
	t.Helper()
	bin := env("KOLLECT_TEST_NATS_SERVER", "/usr/sbin/nats-server")
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("nats-server"); err != nil {
			t.Fatalf("no nats-server binary at /usr/sbin/nats-server or on PATH; set KOLLECT_TEST_NATS_SERVER")
		}
	}
	s := &natsServer{bin: bin, dir: t.TempDir(), port: freePort(t), httpPort: freePort(t)}
	s.conf = filepath.Join(s.dir, "nats.conf")
	conf := fmt.Sprintf("listen: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n}\n",
		s.port, s.httpPort, filepath.Join(s.dir, "jetstream"))
	must(t, os.WriteFile(s.conf, []byte(conf), 0o600), "writing nats.conf")
	t.Cleanup(func() {
		if err := s.stop(); err != nil {
			t.Errorf("stopping the private nats-server: %v", err)
		}
	})
	must(t, s.start(ctx), "starting the private nats-server")
	return s
}

func (s *natsServer) url() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server (again, on the same port and store) and waits
// until its JetStream answers healthy.
func (s *natsServer) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("already running (pid %d)", s.cmd.Process.Pid)
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "nats-server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	noInheritedFDs()
	cmd := exec.Command(s.bin, "-c", s.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, and SIGKILL when the test binary dies: the
	// server never outlives the test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done = cmd, done
	health := "http://127.0.0.1:" + strconv.Itoa(s.httpPort) + "/healthz?js-enabled-only=true"
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, health, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "nats-server.log"))
			s.cmd = nil
			return fmt.Errorf("nats-server exited at start:\n%s", log)
		case <-ctx.Done():
			return fmt.Errorf("nats-server not healthy at %s: %w", health, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the server (SIGTERM, SIGKILL after 10s) and waits for it.
func (s *natsServer) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd, done := s.cmd, s.done
	s.cmd = nil
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return fmt.Errorf("nats-server ignored SIGTERM for 10s; killed")
	}
}

// totalConnections is the number of client connections the server has
// accepted since it started (/varz total_connections).
func (s *natsServer) totalConnections(ctx context.Context) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(s.httpPort)+"/varz", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var v struct {
		TotalConnections int `json:"total_connections"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, fmt.Errorf("/varz: %w", err)
	}
	return v.TotalConnections, nil
}

// forwarder is a second TCP listener in front of a server: another
// endpoint with the same data behind it. It counts the connections it
// accepted, which shows an endpoint is in use.
type forwarder struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	total  int
	closed bool
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "forwarder listen")
	f := &forwarder{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go f.serve()
	t.Cleanup(f.close)
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

func (f *forwarder) accepted() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}

func (f *forwarder) serve() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.total++
		f.mu.Unlock()
		go f.pipe(c)
	}
}

func (f *forwarder) pipe(c net.Conn) {
	u, err := net.DialTimeout("tcp", f.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	f.conns[c], f.conns[u] = struct{}{}, struct{}{}
	f.mu.Unlock()
	go func() { _, _ = io.Copy(u, c); u.Close() }()
	_, _ = io.Copy(c, u)
	c.Close()
	f.mu.Lock()
	delete(f.conns, c)
	delete(f.conns, u)
	f.mu.Unlock()
}

func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	for c := range f.conns {
		c.Close()
	}
}

// relay is a TLS endpoint in front of an eventfold.Webhook: it forwards
// each request and answers what the receiver answered, and records the
// events the receiver accepted (2xx) in order: the raw sequence the
// receiver's fold was built from. It counts the TCP connections opened to
// it; a rebuilt sink client opens new ones.
type relay struct {
	srv      *httptest.Server
	upstream string
	client   *http.Client

	mu       sync.Mutex
	events   []sink.Event
	conns    int
	requests int
}

func startRelay(t *testing.T, w *eventfold.Webhook) *relay {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(w.CA) {
		t.Fatal("relay: the webhook's CA is not PEM")
	}
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	r := &relay{upstream: w.URL, client: &http.Client{Transport: transport}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "relay listen")
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Listener = ln
	r.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
		}
	}
	r.srv.StartTLS()
	t.Cleanup(func() {
		// Requests held by a hanging receiver must not block Close.
		r.srv.CloseClientConnections()
		r.srv.Close()
		transport.CloseIdleConnections()
	})
	return r
}

// url is the relay's endpoint; its certificate is httptest's, like the
// receiver's, so the same caBundle verifies both.
func (r *relay) url() string { return r.srv.URL }

func (r *relay) serve(rw http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(rw, "relay: reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if req.Method == http.MethodPost {
		r.mu.Lock()
		r.requests++
		r.mu.Unlock()
	}
	out, err := http.NewRequestWithContext(req.Context(), req.Method, r.upstream+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(rw, "relay: "+err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = req.Header.Clone()
	resp, err := r.client.Do(out)
	if err != nil {
		http.Error(rw, "relay: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	if req.Method == http.MethodPost && resp.StatusCode/100 == 2 {
		var ev sink.Event
		if json.Unmarshal(body, &ev) == nil {
			r.mu.Lock()
			r.events = append(r.events, ev)
			r.mu.Unlock()
		}
	}
	for k, v := range resp.Header {
		rw.Header()[k] = v
	}
	rw.WriteHeader(resp.StatusCode)
	_, _ = rw.Write(answer)
}

// accepted returns the events the receiver accepted through the relay.
func (r *relay) accepted() []sink.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sink.Event(nil), r.events...)
}

// counts returns the connections opened to the relay and its POSTs.
func (r *relay) counts() (conns, requests int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns, r.requests
}
