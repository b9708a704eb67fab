package isolation

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cgi"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/ssh"
)

// counter accepts connections on a listener, counts them and closes them
// at once: the stand-in for an internal service no sink may reach.
type counter struct {
	addr string
	n    atomic.Int64
}

func listenCounting(t *testing.T, network, addr string) (*counter, error) {
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = l.Close() })
	c := &counter{addr: l.Addr().String()}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.n.Add(1)
			_ = conn.Close()
		}
	}()
	return c, nil
}

// forbidden are the listeners that must never see a connection: TCP on
// 127.0.0.1, [::1] and 127.0.0.2 at one port, and a Unix socket named as
// PostgreSQL names its own. 127.0.0.2 is allowed, but only the cases that
// mix it with a forbidden address use that port, and they are refused
// whole.
type forbidden struct {
	port       string
	v4, v6, v2 *counter
	socketDir  string
	socket     *counter
}

func startForbidden(t *testing.T) *forbidden {
	t.Helper()
	for range 20 {
		v4, err := listenCounting(t, "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(v4.addr)
		v6, err6 := listenCounting(t, "tcp", "[::1]:"+port)
		v2, err2 := listenCounting(t, "tcp", "127.0.0.2:"+port)
		if err6 != nil || err2 != nil {
			continue // the port is taken on another address: pick again
		}
		dir := t.TempDir()
		socket, err := listenCounting(t, "unix", filepath.Join(dir, ".s.PGSQL.5432"))
		if err != nil {
			t.Fatal(err)
		}
		return &forbidden{port: port, v4: v4, v6: v6, v2: v2, socketDir: dir, socket: socket}
	}
	t.Fatal("no port free on 127.0.0.1, [::1] and 127.0.0.2 at once")
	return nil
}

func (f *forbidden) check(t *testing.T) {
	t.Helper()
	for what, c := range map[string]*counter{"127.0.0.1": f.v4, "[::1]": f.v6, "127.0.0.2 (refused mixes)": f.v2, "the Unix socket": f.socket} {
		if n := c.n.Load(); n != 0 {
			t.Errorf("the listener on %s accepted %d connections", what, n)
		}
	}
}

// serveHTTP serves h on 127.0.0.2 at a free port.
func serveHTTP(t *testing.T, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// webhookReceiver answers on 127.0.0.2: /hook with 200, the /redirect
// paths with a 302 to a forbidden address or name. It counts requests.
func webhookReceiver(t *testing.T, f *forbidden) (string, *atomic.Int64) {
	var hits atomic.Int64
	addr := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "http://127.0.0.1:"+f.port+"/hook", http.StatusFound)
		case "/redirect-name":
			http.Redirect(w, r, "http://loop.test:"+f.port+"/hook", http.StatusTemporaryRedirect)
		}
	}))
	return addr, &hits
}

const httpBackend = "/usr/lib/git-core/git-http-backend"

// gitServer serves an empty bare repository repo.git on 127.0.0.2 with git
// http-backend; /redirect.git and /redirect-name.git answer with a redirect
// to a forbidden address or name. It counts requests.
func gitServer(t *testing.T, f *forbidden) (string, *atomic.Int64) {
	t.Helper()
	if _, err := os.Stat(httpBackend); err != nil {
		t.Fatalf("git http-backend is missing (%v): install git, which ships it", err)
	}
	root := t.TempDir()
	if out, err := exec.Command("git", "init", "--bare", "--quiet", filepath.Join(root, "repo.git")).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v: %s", err, out)
	}
	backend := &cgi.Handler{Path: httpBackend, Env: []string{
		"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1", "HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	}}
	var hits atomic.Int64
	addr := serveHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		rest := r.URL.RequestURI()
		switch {
		case strings.HasPrefix(r.URL.Path, "/redirect.git/"):
			http.Redirect(w, r, "http://127.0.0.1:"+f.port+strings.Replace(rest, "/redirect.git/", "/repo.git/", 1), http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/redirect-name.git/"):
			http.Redirect(w, r, "http://loop.test:"+f.port+strings.Replace(rest, "/redirect-name.git/", "/repo.git/", 1), http.StatusMovedPermanently)
		default:
			backend.ServeHTTP(w, r)
		}
	}))
	return addr, &hits
}

// natsServer runs a JetStream nats-server on 127.0.0.2 with the stream the
// NATS sinks publish to.
func natsServer(ctx context.Context, t *testing.T, stream string) string {
	t.Helper()
	const bin = "/usr/sbin/nats-server"
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	_, port, _ := net.SplitHostPort(addr)
	var out bytes.Buffer
	cmd := exec.Command(bin, "-a", "127.0.0.2", "-p", port, "-js", "-sd", t.TempDir())
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var nc *nats.Conn
	deadline := time.Now().Add(20 * time.Second)
	for nc == nil {
		if nc, err = nats.Connect("nats://"+addr, nats.Timeout(time.Second)); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("nats-server on %s did not start: %v\n%s", addr, err, out.String())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"kollect.>"}}); err != nil {
		t.Fatalf("creating stream %s: %v", stream, err)
	}
	return addr
}

// advertisingNATS speaks just enough NATS on 127.0.0.2 to accept a client
// and tell it, in its INFO, about "another server" at a forbidden address
// (connect_urls); it then drops the connection so that the client looks for
// a server to reconnect to. It counts connections.
func advertisingNATS(t *testing.T, advertised string) (string, *atomic.Int64) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	info := fmt.Sprintf(`INFO {"server_id":"FAKE","version":"2.10.0","proto":1,"max_payload":1048576,"headers":true,"jetstream":true,"connect_urls":[%q]}`+"\r\n", advertised)
	var n atomic.Int64
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
						_, _ = c.Write([]byte("PONG\r\n" + info))
						time.Sleep(300 * time.Millisecond)
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String(), &n
}

// pgProxy forwards TCP connections from 127.0.0.2 to the machine's
// PostgreSQL, which listens on 127.0.0.1 only: the PostgreSQL the sinks may
// reach. It counts connections.
func pgProxy(t *testing.T, dsn string) (string, *atomic.Int64) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5432")
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go func() {
				defer func() { _ = c.Close() }()
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer func() { _ = up.Close() }()
				go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return l.Addr().String(), &n
}

// sshKeys returns a client private key (PEM) and a known_hosts line for
// hostPort, for git sinks over ssh (their spec is checked before anything
// connects, so the key must be real).
func sshKeys(t *testing.T, hostPort string) (string, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		t.Fatal(err)
	}
	_, hostPriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(hostPriv)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(hostPort)
	return string(pem.EncodeToMemory(block)), fmt.Sprintf("[%s]:%s %s", host, port, ssh.MarshalAuthorizedKey(signer.PublicKey()))
}
