package git

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
)

var (
	nsInv      = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "apps"}
	clusterInv = sink.Inventory{Cluster: "east", Kind: "ClusterInventory", Name: "nodes"}
	exportedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

// item builds an exported item whose hash depends on its content.
func item(ns, name, content string) *sink.Item {
	attrs := fmt.Sprintf(`{"content":%q}`, content)
	sum := sha256.Sum256([]byte(attrs))
	return &sink.Item{
		Namespace:  ns,
		Name:       name,
		Target:     "deployments",
		Profile:    "default",
		Source:     sink.Source{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: name},
		Attributes: []byte(attrs),
		Hash:       hex.EncodeToString(sum[:]),
	}
}

// envelope builds a snapshot of items in canonical order.
func envelope(inv sink.Inventory, generation int64, at time.Time, items ...*sink.Item) *sink.Envelope {
	sort.Slice(items, func(i, j int) bool { return items[i].Key() < items[j].Key() })
	return &sink.Envelope{
		SchemaVersion: sink.SchemaVersion,
		Checksum:      sink.ChecksumOf(items),
		Generation:    generation,
		ItemCount:     len(items),
		ExportedAt:    at,
		Cluster:       inv.Cluster,
		Inventory:     inv,
		Items:         items,
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// gitEnv isolates the git CLI from the machine's configuration.
func gitEnv(home string) []string {
	return append(os.Environ(),
		"HOME="+home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_AUTHOR_NAME=Someone Else",
		"GIT_AUTHOR_EMAIL=else@example.com",
		"GIT_COMMITTER_NAME=Someone Else",
		"GIT_COMMITTER_EMAIL=else@example.com",
	)
}

// git runs the git CLI in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := runGit(dir, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runGit is git for goroutines other than the test's, which may not call
// t.Fatal.
func runGit(dir string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// newBare creates an empty bare repository with default branch main.
func newBare(t *testing.T, parent, name string) string {
	t.Helper()
	git(t, parent, "init", "--quiet", "--bare", "-b", "main", name)
	return filepath.Join(parent, name)
}

func fileURL(p string) string { return (&url.URL{Scheme: "file", Path: p}).String() }

func commitCount(t *testing.T, bare, branch string) int {
	t.Helper()
	n, err := strconv.Atoi(git(t, bare, "--git-dir="+bare, "rev-list", "--count", branch))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func show(t *testing.T, bare, rev string) string {
	t.Helper()
	return git(t, bare, "--git-dir="+bare, "show", rev)
}

func lsTree(t *testing.T, bare, branch string) []string {
	t.Helper()
	out := git(t, bare, "--git-dir="+bare, "ls-tree", "-r", "--name-only", branch)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// pushForeign commits a file to branch of the bare repository through a
// CLI clone in work, as another writer would.
func pushForeign(bare, branch, name, work string) error {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if _, err := runGit(work, "clone", "--quiet", "--branch", branch, bare, "w"); err != nil {
		return err
	}
	w := filepath.Join(work, "w")
	if err := os.WriteFile(filepath.Join(w, name), []byte(name+"\n"), 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"add", name},
		{"commit", "--quiet", "-m", "foreign " + name},
		{"push", "--quiet", "origin", branch},
	} {
		if _, err := runGit(w, args...); err != nil {
			return err
		}
	}
	return nil
}

// loopbackDialer allows the test servers' loopback addresses, as
// --allow-private-sink-endpoints does.
var loopbackDialer, _ = netguard.New(netguard.Config{Policy: netguard.Policy{AllowPrivate: true}})

func newSink(t *testing.T, spec *v1alpha1.SnapshotSinkSpec, secret sink.Secret, workDir string) *Sink {
	t.Helper()
	s, err := New(spec, secret, workDir, loopbackDialer)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func mustWrite(t *testing.T, ctx context.Context, s *Sink, inv sink.Inventory, env *sink.Envelope, want bool) {
	t.Helper()
	written, err := s.Write(ctx, inv, env)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	if written != want {
		t.Fatalf("Write written = %v, want %v", written, want)
	}
}

func encode(t *testing.T, env *sink.Envelope, f sink.Format) string {
	t.Helper()
	doc, err := sink.Encode(env, f)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(doc))
}
