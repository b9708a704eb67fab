package git

import (
	"encoding/pem"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

const httpBackend = "/usr/lib/git-core/git-http-backend"

// gitServer serves the repositories under root over HTTPS with git
// http-backend, behind HTTP basic auth.
type gitServer struct {
	*httptest.Server
	root string

	mu sync.Mutex
	// onRequest, when set, runs before an authenticated request reaches
	// the backend; tests use it to push in the middle of a push.
	onRequest func(r *http.Request)
	// receivePackAdverts counts GETs of info/refs for git-receive-pack:
	// one per push attempt.
	receivePackAdverts int
}

func newGitServer(t *testing.T, user, token string) *gitServer {
	t.Helper()
	if _, err := os.Stat(httpBackend); err != nil {
		t.Fatalf("git http-backend is missing (%v): install git (apt-get install git), which ships it", err)
	}
	gs := &gitServer{root: t.TempDir()}
	home := t.TempDir()
	backend := cgi.Handler{
		Path:   httpBackend,
		Stderr: testWriter{t},
		Env: []string{
			"GIT_PROJECT_ROOT=" + gs.root,
			"GIT_HTTP_EXPORT_ALL=1",
			"HOME=" + home,
			"GIT_CONFIG_NOSYSTEM=1",
			"GIT_CONFIG_GLOBAL=/dev/null",
		},
	}
	gs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != token {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		gs.mu.Lock()
		hook := gs.onRequest
		if r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-receive-pack" {
			gs.receivePackAdverts++
		}
		gs.mu.Unlock()
		if hook != nil {
			hook(r)
		}
		// http-backend enables receive-pack for authenticated users only.
		h := backend
		h.Env = append(slices.Clone(backend.Env), "REMOTE_USER="+u)
		h.ServeHTTP(w, r)
	}))
	// The untrusted-client case makes the server log a handshake error.
	gs.Config.ErrorLog = log.New(testWriter{t}, "", 0)
	gs.StartTLS()
	t.Cleanup(gs.Close)
	return gs
}

// testWriter sends the backend's stderr and the server's log to the test
// log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func (gs *gitServer) setHook(hook func(r *http.Request)) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.onRequest = hook
}

func (gs *gitServer) adverts() int {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.receivePackAdverts
}

// spec points at repo on the server and trusts its certificate.
func (gs *gitServer) spec(repo string) *v1alpha1.SnapshotSinkSpec {
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: gs.Certificate().Raw})
	return &v1alpha1.SnapshotSinkSpec{
		Type:     v1alpha1.SnapshotSinkGit,
		Endpoint: gs.URL + "/" + repo,
		TLS:      &v1alpha1.TLSConfig{CABundle: ca},
		Git:      &v1alpha1.GitSinkConfig{},
	}
}

const (
	rightToken = "ghp_right-token-0123456789"
	wrongToken = "ghp_wrong-token-9876543210"
)

func TestHTTPS(t *testing.T) {
	ctx := testContext(t)
	gs := newGitServer(t, "robot", rightToken)
	bare := newBare(t, gs.root, "repo.git")
	secret := sink.Secret{"token": []byte(rightToken), "username": []byte("robot")}
	s := newSink(t, gs.spec("repo.git"), secret, t.TempDir())

	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe of the empty repository: %v", err)
	}
	env := envelope(nsInv, 1, exportedAt, item("team-a", "x", "1"))
	mustWrite(t, ctx, s, nsInv, env, true)
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Fatalf("commits = %d, want 1", n)
	}
	if got := show(t, bare, "main:east/team-a/apps.json"); got != encode(t, env, sink.JSON) {
		t.Errorf("document = %s", got)
	}
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt.Add(1), item("team-a", "x", "1")), false)
	if err := s.Delete(ctx, nsInv); err != nil {
		t.Fatal(err)
	}
	if n := commitCount(t, bare, "main"); n != 2 {
		t.Fatalf("commits = %d, want 2", n)
	}

	// Without the CA the server is not trusted.
	untrusted := gs.spec("repo.git")
	untrusted.TLS = nil
	u := newSink(t, untrusted, secret, t.TempDir())
	if err := u.Probe(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Probe without the CA = %v, want a certificate error", err)
	}
}

func TestHTTPSWrongToken(t *testing.T) {
	ctx := testContext(t)
	gs := newGitServer(t, "kollect", rightToken)
	bare := newBare(t, gs.root, "repo.git")
	pushFirst(t, bare)

	// The username defaults to kollect, so only the token is wrong.
	s := newSink(t, gs.spec("repo.git"), sink.Secret{"token": []byte(wrongToken)}, t.TempDir())
	check := func(op string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s with a wrong token succeeded", op)
		}
		t.Logf("%s: %v", op, err)
		if !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("%s: %v is not permanent", op, err)
		}
		if c := sink.Classify(err); c.Outcome != sink.OutcomeAuth {
			t.Errorf("%s: classified %+v, want Auth", op, c)
		}
		for _, secret := range []string{wrongToken, rightToken, "wrong-token", "right-token"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: error %q contains %q", op, err, secret)
			}
		}
	}
	check("Probe", s.Probe(ctx))
	_, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt))
	check("Write", err)
	check("Delete", s.Delete(ctx, nsInv))
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Errorf("commits = %d, want 1", n)
	}

	// With the right token, the same sink configuration works.
	ok := newSink(t, gs.spec("repo.git"), sink.Secret{"token": []byte(rightToken)}, t.TempDir())
	if err := ok.Probe(ctx); err != nil {
		t.Fatal(err)
	}
}

// Another writer pushes while the sink pushes. The rejected push is
// rebuilt on the new head and retried; both writers' commits survive.
func TestHTTPSConcurrentPush(t *testing.T) {
	for _, tc := range []struct {
		name string
		// at picks the request before which the other writer pushes.
		at func(r *http.Request) bool
	}{
		{
			// go-git sees the moved branch in the advertisement and refuses
			// a non-fast-forward push itself.
			name: "before advertisement",
			at: func(r *http.Request) bool {
				return r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-receive-pack"
			},
		},
		{
			// The server refuses the ref update: the branch is no longer
			// at the old value the push names.
			name: "before update",
			at: func(r *http.Request) bool {
				return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			gs := newGitServer(t, "kollect", rightToken)
			bare := newBare(t, gs.root, "repo.git")
			s := newSink(t, gs.spec("repo.git"), sink.Secret{"token": []byte(rightToken)}, t.TempDir())
			mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)

			var once sync.Once
			work := t.TempDir()
			gs.setHook(func(r *http.Request) {
				if tc.at(r) {
					once.Do(func() {
						if err := pushForeign(bare, "main", "foreign.txt", work); err != nil {
							t.Error(err)
						}
					})
				}
			})
			before := gs.adverts()
			env := envelope(nsInv, 2, exportedAt, item("team-a", "x", "2"))
			mustWrite(t, ctx, s, nsInv, env, true)
			if n := gs.adverts() - before; n != 2 {
				t.Errorf("push attempts = %d, want 2 (one rejected, one retried)", n)
			}

			if n := commitCount(t, bare, "main"); n != 3 {
				t.Errorf("commits = %d, want 3", n)
			}
			if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/team-a/apps.json", "foreign.txt"}) {
				t.Errorf("files = %v", files)
			}
			// The sink's commit is on top of the foreign one.
			if got := git(t, bare, "--git-dir="+bare, "log", "--format=%an", "main"); got != "Kollect\nSomeone Else\nKollect" {
				t.Errorf("authors, newest first = %q", got)
			}
			if got := show(t, bare, "main:east/team-a/apps.json"); got != encode(t, env, sink.JSON) {
				t.Errorf("document = %s", got)
			}
		})
	}
}

// A remote whose branch keeps moving makes the write fail after the
// retries, without touching what the other writer pushed.
func TestHTTPSGivesUp(t *testing.T) {
	ctx := testContext(t)
	gs := newGitServer(t, "kollect", rightToken)
	bare := newBare(t, gs.root, "repo.git")
	pushFirst(t, bare)
	s := newSink(t, gs.spec("repo.git"), sink.Secret{"token": []byte(rightToken)}, t.TempDir())

	var mu sync.Mutex
	pushes := 0
	work := t.TempDir()
	gs.setHook(func(r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack") {
			mu.Lock()
			defer mu.Unlock()
			pushes++
			name := fmt.Sprintf("foreign%d.txt", pushes)
			if err := pushForeign(bare, "main", name, filepath.Join(work, name)); err != nil {
				t.Error(err)
			}
		}
	})
	_, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")))
	if err == nil || errors.Is(err, sink.ErrPermanent) {
		t.Fatalf("Write = %v, want a transient error", err)
	}
	t.Logf("Write: %v", err)
	mu.Lock()
	defer mu.Unlock()
	if pushes != 1+maxPushRetries {
		t.Errorf("push attempts = %d, want %d", pushes, 1+maxPushRetries)
	}
	if n := commitCount(t, bare, "main"); n != 1+pushes {
		t.Errorf("commits = %d, want %d", n, 1+pushes)
	}
}
