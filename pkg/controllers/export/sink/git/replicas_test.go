package git

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// headOf returns the commit the sink's local branch points at: after a
// Write that returned true, the commit it pushed.
func headOf(t *testing.T, s *Sink) string {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	ref, err := s.repo.Storer.Reference(s.branch)
	if err != nil {
		t.Fatal(err)
	}
	return ref.Hash().String()
}

func revParse(t *testing.T, bare, rev string) string {
	t.Helper()
	return git(t, bare, "--git-dir="+bare, "rev-parse", rev)
}

// isAncestor reports whether commit is in the history of branch.
func isAncestor(bare, commit, branch string) bool {
	_, err := runGit(bare, "--git-dir="+bare, "merge-base", "--is-ancestor", commit, branch)
	return err == nil
}

// TestStaleReplicaDoesNotOverwrite: two sinks with their own clones (two
// replicas of the server) on one repository. The second builds a commit on
// the head it fetched before the first pushed: its push is refused and the
// branch keeps the first one's commit; its next Write fetches, builds on
// top, and both documents and the whole history survive.
func TestStaleReplicaDoesNotOverwrite(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	a := newSink(t, localSpec(bare), nil, filepath.Join(base, "replica-a"))
	b := newSink(t, localSpec(bare), nil, filepath.Join(base, "replica-b"))
	other := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-b", Name: "web"}

	mustWrite(t, ctx, a, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)
	first := revParse(t, bare, "main")

	// b fetches; then a pushes a new commit.
	b.mu.Lock()
	staleHead, err := b.fetch(ctx)
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if staleHead.String() != first {
		t.Fatalf("b fetched %s, want %s", staleHead, first)
	}
	envA := envelope(nsInv, 2, exportedAt, item("team-a", "x", "2"))
	mustWrite(t, ctx, a, nsInv, envA, true)
	pushedByA := revParse(t, bare, "main")

	// b commits on the stale head and pushes: refused, nothing moves.
	envB := envelope(other, 1, exportedAt, item("team-b", "y", "1"))
	doc := []byte(encode(t, envB, sink.JSON))
	b.mu.Lock()
	changed, err := b.commit(staleHead, "east/team-b/web.json", doc, "stale", exportedAt)
	if err == nil && changed {
		err = b.push(ctx)
	} else if err == nil {
		err = errors.New("the commit changed nothing")
	}
	b.mu.Unlock()
	if err == nil || !isRejected(err) {
		t.Fatalf("push from the stale clone = %v, want a rejection", err)
	}
	t.Logf("stale push: %v", err)
	if got := revParse(t, bare, "main"); got != pushedByA {
		t.Fatalf("main moved to %s after the refused push, want %s", got, pushedByA)
	}

	// The sink's own Write fetches first and builds on a's commit.
	mustWrite(t, ctx, b, other, envB, true)
	if !isAncestor(bare, pushedByA, "main") || !isAncestor(bare, first, "main") {
		t.Errorf("a's commits are not in the history of main")
	}
	if n := commitCount(t, bare, "main"); n != 3 {
		t.Errorf("commits = %d, want 3", n)
	}
	if got := show(t, bare, "main:east/team-a/apps.json"); got != encode(t, envA, sink.JSON) {
		t.Errorf("a's document = %s", got)
	}
	if got := show(t, bare, "main:east/team-b/web.json"); got != encode(t, envB, sink.JSON) {
		t.Errorf("b's document = %s", got)
	}
	git(t, bare, "--git-dir="+bare, "fsck", "--strict")
}

// TestRaceAtTheServer: the branch moves after the sink read the remote's
// refs and before the server updates the ref (a pre-receive hook moves it,
// as another replica's push landing in between would). git-receive-pack
// refuses the update because the branch is no longer at the old value the
// push names (compare-and-swap); the sink starts over from the new head.
func TestRaceAtTheServer(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	s := newSink(t, localSpec(bare), nil, filepath.Join(base, "work"))
	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)

	// The other writer's commit, on top of the current head, waits on
	// another branch until the hook moves main to it.
	work := filepath.Join(base, "other")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, work, "clone", "--quiet", "--branch", "main", bare, "w")
	w := filepath.Join(work, "w")
	if err := os.WriteFile(filepath.Join(w, "other.txt"), []byte("other\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, w, "add", "other.txt")
	git(t, w, "commit", "--quiet", "-m", "other replica")
	git(t, w, "push", "--quiet", "origin", "HEAD:refs/heads/pending")
	pending := revParse(t, bare, "refs/heads/pending")

	// The hook runs before receive-pack takes the ref lock. It counts the
	// pushes and, on the first, moves main outside the push's quarantine.
	marker := filepath.Join(base, "hook-ran")
	hook := fmt.Sprintf(`#!/bin/sh
echo push >> %[1]q
[ "$(wc -l < %[1]q)" -gt 1 ] && exit 0
unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES
exec git --git-dir=%[2]q update-ref refs/heads/main refs/heads/pending
`, marker, bare)
	if err := os.WriteFile(filepath.Join(bare, "hooks", "pre-receive"), []byte(hook), 0o755); err != nil {
		t.Fatal(err)
	}

	env := envelope(nsInv, 2, exportedAt, item("team-a", "x", "2"))
	mustWrite(t, ctx, s, nsInv, env, true)
	runs, err := os.ReadFile(marker)
	if err != nil {
		t.Fatalf("the hook did not run: %v", err)
	}
	// One push refused by the server, one accepted on top of the new head.
	if n := strings.Count(string(runs), "push"); n != 2 {
		t.Errorf("pushes that reached the server = %d, want 2", n)
	}
	if !isAncestor(bare, pending, "main") {
		t.Fatalf("the other writer's commit %s was overwritten", pending)
	}
	if n := commitCount(t, bare, "main"); n != 3 {
		t.Errorf("commits = %d, want 3", n)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/team-a/apps.json", "other.txt"}) {
		t.Errorf("files = %v", files)
	}
	if got := show(t, bare, "main:east/team-a/apps.json"); got != encode(t, env, sink.JSON) {
		t.Errorf("document = %s", got)
	}
}

// TestReplicasWriteConcurrently: two sinks on one repository write at the
// same time. A Write that lost the race more often than its retries allow
// fails and is tried again, as the exporter does. Every commit either sink
// pushed stays in the history of main (nothing is force-pushed) and every
// document holds its last write.
func TestReplicasWriteConcurrently(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	const generations = 6
	replicas := []struct {
		s    *Sink
		invs []sink.Inventory
	}{
		{s: newSink(t, localSpec(bare), nil, filepath.Join(base, "a"))},
		{s: newSink(t, localSpec(bare), nil, filepath.Join(base, "b"))},
	}
	for i := range replicas {
		for j := range 2 {
			replicas[i].invs = append(replicas[i].invs, sink.Inventory{
				Cluster: "east", Kind: "Inventory", Namespace: fmt.Sprintf("ns-%d", i), Name: fmt.Sprintf("inv-%d", j),
			})
		}
	}

	var (
		mu       sync.Mutex
		pushed   []string
		failures int
		wg       sync.WaitGroup
	)
	errs := make(chan error, len(replicas))
	for _, r := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := int64(1); gen <= generations; gen++ {
				for _, inv := range r.invs {
					env := envelope(inv, gen, exportedAt, item(inv.Namespace, "x", fmt.Sprint(gen)))
					for attempt := 1; ; attempt++ {
						written, err := r.s.Write(ctx, inv, env)
						if err == nil {
							if !written {
								errs <- fmt.Errorf("%s generation %d: no commit", inv.Name, gen)
								return
							}
							r.s.mu.Lock()
							ref, rerr := r.s.repo.Storer.Reference(r.s.branch)
							r.s.mu.Unlock()
							if rerr != nil {
								errs <- rerr
								return
							}
							mu.Lock()
							pushed = append(pushed, ref.Hash().String())
							mu.Unlock()
							break
						}
						if attempt == 10 || !strings.Contains(err.Error(), "branch moved") {
							errs <- fmt.Errorf("%s/%s generation %d: %w", inv.Namespace, inv.Name, gen, err)
							return
						}
						mu.Lock()
						failures++
						mu.Unlock()
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d commits pushed by two replicas, %d Writes failed after %d push attempts and were repeated", len(pushed), failures, 1+maxPushRetries)

	want := 2 * 2 * generations
	if len(pushed) != want {
		t.Fatalf("%d commits pushed, want %d", len(pushed), want)
	}
	if n := commitCount(t, bare, "main"); n != want {
		t.Errorf("main has %d commits, want %d", n, want)
	}
	for _, c := range pushed {
		if !isAncestor(bare, c, "main") {
			t.Errorf("pushed commit %s is not in the history of main: it was overwritten", c)
		}
	}
	var files []string
	for _, r := range replicas {
		for _, inv := range r.invs {
			p := "east/" + inv.Namespace + "/" + inv.Name + ".json"
			files = append(files, p)
			header, err := sink.Header([]byte(show(t, bare, "main:"+p)), sink.JSON)
			if err != nil || header.Generation != generations {
				t.Errorf("%s: header %+v, %v; want generation %d", p, header, err, generations)
			}
		}
	}
	slices.Sort(files)
	if got := lsTree(t, bare, "main"); !slices.Equal(got, files) {
		t.Errorf("files = %v, want %v", got, files)
	}
	git(t, bare, "--git-dir="+bare, "fsck", "--strict")
}

// TestClustersShareARepository: two clusters export same-named
// inventories to one branch with the default settings. Each writes its
// own document, which names its cluster, and removing one leaves the
// other.
func TestClustersShareARepository(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	east := newSink(t, localSpec(bare), nil, filepath.Join(base, "east"))
	west := newSink(t, localSpec(bare), nil, filepath.Join(base, "west"))
	eastInv, westInv := nsInv, nsInv
	westInv.Cluster = "west"
	eastEnv := envelope(eastInv, 1, exportedAt, item("team-a", "x", "east"))
	westEnv := envelope(westInv, 1, exportedAt, item("team-a", "x", "west"), item("team-a", "y", "west"))

	mustWrite(t, ctx, east, eastInv, eastEnv, true)
	mustWrite(t, ctx, west, westInv, westEnv, true)
	// The same checksum and generation from the other cluster is not "the
	// same document": each cluster's path is its own.
	mustWrite(t, ctx, east, eastInv, eastEnv, false)

	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/team-a/apps.json", "west/team-a/apps.json"}) {
		t.Fatalf("files = %v", files)
	}
	for cluster, env := range map[string]*sink.Envelope{"east": eastEnv, "west": westEnv} {
		doc := show(t, bare, "main:"+cluster+"/team-a/apps.json")
		if doc != encode(t, env, sink.JSON) {
			t.Errorf("%s's document = %s", cluster, doc)
		}
		header, err := sink.Header([]byte(doc), sink.JSON)
		if err != nil || header.Cluster != cluster || header.Inventory.Cluster != cluster {
			t.Errorf("%s's document names cluster %q / %q (%v)", cluster, header.Cluster, header.Inventory.Cluster, err)
		}
	}
	if got := git(t, bare, "--git-dir="+bare, "log", "--format=%s", "main"); got !=
		"kollect: west/team-a/apps (2 items, "+westEnv.Checksum+")\n"+
			"kollect: east/team-a/apps (1 items, "+eastEnv.Checksum+")" {
		t.Errorf("commit messages, newest first:\n%s", got)
	}

	if err := east.Delete(ctx, eastInv); err != nil {
		t.Fatal(err)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"west/team-a/apps.json"}) {
		t.Errorf("files after east's Delete = %v, want only west's", files)
	}
}

// TestClusterNameIsOneElement: a cluster name that is not one plain path
// element is refused before anything is committed.
func TestClusterNameIsOneElement(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	s := newSink(t, localSpec(bare), nil, filepath.Join(base, "work"))
	for _, cluster := range []string{"", ".", "..", ".git", "a/b", `a\b`, "a\x00b"} {
		inv := nsInv
		inv.Cluster = cluster
		_, err := s.Write(ctx, inv, envelope(inv, 1, exportedAt))
		if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "cluster name") {
			t.Errorf("Write with cluster %q = %v, want a permanent error about the cluster name", cluster, err)
		}
	}
	if out := git(t, bare, "--git-dir="+bare, "for-each-ref"); out != "" {
		t.Errorf("refs = %q, want none", out)
	}
}

// TestRegistered: the git type is built through sink.Snapshots; file://
// repositories need AllowLocal (--allow-local-git-sinks), and the clone
// lives in StateDir.
func TestRegistered(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	stateDir := filepath.Join(base, "state")
	spec := localSpec(bare)

	s, err := sink.Snapshots.Build(ctx, string(v1alpha1.SnapshotSinkGit), spec, sink.Params{StateDir: stateDir})
	if !errors.Is(err, ErrLocalDisabled) || !errors.Is(err, sink.ErrPermanent) || s != nil ||
		err.Error() != "git repositories on the server's file system (file://) are disabled: the server runs without --allow-local-git-sinks: permanent sink error" {
		t.Errorf("Build of a file:// sink without AllowLocal = %v, %v", s, err)
	}
	if _, err := os.Stat(stateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused sink touched its state directory: %v", err)
	}

	s, err = sink.Snapshots.Build(ctx, string(v1alpha1.SnapshotSinkGit), spec, sink.Params{StateDir: stateDir, AllowLocal: true})
	if err != nil {
		t.Fatalf("Build with AllowLocal: %v", err)
	}
	defer func() { _ = s.Close() }()
	mustWriteAny(t, s, envelope(nsInv, 1, exportedAt))
	if _, err := os.Stat(filepath.Join(stateDir, "config")); err != nil {
		t.Errorf("no clone in the state directory: %v", err)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/team-a/apps.json"}) {
		t.Errorf("files = %v", files)
	}
}

func mustWriteAny(t *testing.T, s sink.SnapshotSink, env *sink.Envelope) {
	t.Helper()
	if written, err := s.Write(testContext(t), env.Inventory, env); err != nil || !written {
		t.Fatalf("Write = %v, %v", written, err)
	}
}
