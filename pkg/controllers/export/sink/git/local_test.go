package git

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

func localSpec(bare string) *v1alpha1.SnapshotSinkSpec {
	return &v1alpha1.SnapshotSinkSpec{
		Type:     v1alpha1.SnapshotSinkGit,
		Endpoint: fileURL(bare),
		Git:      &v1alpha1.GitSinkConfig{},
	}
}

func TestLocalRepository(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	workDir := filepath.Join(base, "work")
	s := newSink(t, localSpec(bare), nil, workDir)

	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe of the empty repository: %v", err)
	}

	// The first write creates the branch.
	env1 := envelope(nsInv, 1, exportedAt, item("team-a", "x", "1"), item("team-a", "y", "1"))
	mustWrite(t, ctx, s, nsInv, env1, true)
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Fatalf("commits = %d, want 1", n)
	}
	if got, want := show(t, bare, "main:east/team-a/apps.json"), encode(t, env1, sink.JSON); got != want {
		t.Errorf("committed document\n%s\nwant\n%s", got, want)
	}

	// Same checksum and generation, new exportedAt: no commit.
	again := envelope(nsInv, 1, exportedAt.Add(time.Hour), item("team-a", "x", "1"), item("team-a", "y", "1"))
	mustWrite(t, ctx, s, nsInv, again, false)
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Fatalf("commits after an unchanged write = %d, want 1", n)
	}

	// A new generation with the same items is a change.
	gen2 := envelope(nsInv, 2, exportedAt.Add(time.Hour), item("team-a", "x", "1"), item("team-a", "y", "1"))
	mustWrite(t, ctx, s, nsInv, gen2, true)

	// A changed item set: exactly one commit, by the default author, with
	// the default message, at exportedAt.
	at := exportedAt.Add(2 * time.Hour)
	env2 := envelope(nsInv, 2, at, item("team-a", "x", "2"))
	mustWrite(t, ctx, s, nsInv, env2, true)
	if n := commitCount(t, bare, "main"); n != 3 {
		t.Fatalf("commits = %d, want 3", n)
	}
	got := git(t, bare, "--git-dir="+bare, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%at|%s", "main")
	want := "Kollect <kollect@kollect.dev>|Kollect <kollect@kollect.dev>|" + strconv.FormatInt(at.Unix(), 10) +
		"|kollect: east/team-a/apps (1 items, " + env2.Checksum + ")"
	if got != want {
		t.Errorf("commit = %q, want %q", got, want)
	}

	// A second sink with a fresh clone sees the content: no commit for the
	// same document, and its own write lands on top.
	other := newSink(t, localSpec(bare), nil, filepath.Join(base, "work2"))
	mustWrite(t, ctx, other, nsInv, env2, false)
	cluster := envelope(clusterInv, 1, at, item("", "node-1", "1"))
	mustWrite(t, ctx, other, clusterInv, cluster, true)

	// The first sink's clone is now behind; its write fetches first and
	// keeps the other sink's commit.
	env3 := envelope(nsInv, 3, at, item("team-a", "x", "3"))
	mustWrite(t, ctx, s, nsInv, env3, true)
	if n := commitCount(t, bare, "main"); n != 5 {
		t.Fatalf("commits = %d, want 5", n)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/_cluster/nodes.json", "east/team-a/apps.json"}) {
		t.Errorf("files = %v", files)
	}

	// Delete makes a removal commit, and nothing when the file is gone.
	if err := s.Delete(ctx, nsInv); err != nil {
		t.Fatal(err)
	}
	if got := git(t, bare, "--git-dir="+bare, "log", "-1", "--format=%s", "main"); got != "kollect: remove east/team-a/apps" {
		t.Errorf("removal commit message = %q", got)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"east/_cluster/nodes.json"}) {
		t.Errorf("files after Delete = %v", files)
	}
	if err := s.Delete(ctx, nsInv); err != nil {
		t.Fatal(err)
	}
	if n := commitCount(t, bare, "main"); n != 6 {
		t.Fatalf("commits = %d, want 6", n)
	}
	// Removing the last file leaves an empty tree, which git accepts.
	if err := other.Delete(ctx, clusterInv); err != nil {
		t.Fatal(err)
	}
	if files := lsTree(t, bare, "main"); len(files) != 0 {
		t.Errorf("files = %v, want none", files)
	}
	// The repository is valid for the CLI.
	git(t, bare, "--git-dir="+bare, "fsck", "--strict")
}

func TestWorkDirReuse(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	workDir := filepath.Join(base, "work")

	first := newSink(t, localSpec(bare), nil, workDir)
	mustWrite(t, ctx, first, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// A marker shows whether New kept or wiped the directory.
	marker := filepath.Join(workDir, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// Same endpoint, as after a restart: the clone is reused.
	again := newSink(t, localSpec(bare), nil, workDir)
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("clone of the same endpoint was not reused: %v", err)
	}
	mustWrite(t, ctx, again, nsInv, envelope(nsInv, 1, exportedAt.Add(time.Minute), item("team-a", "x", "1")), false)
	mustWrite(t, ctx, again, nsInv, envelope(nsInv, 2, exportedAt, item("team-a", "x", "2")), true)
	if n := commitCount(t, bare, "main"); n != 2 {
		t.Fatalf("commits = %d, want 2", n)
	}
	_ = again.Close()

	// Another endpoint: the directory is wiped and cloned afresh.
	bare2 := newBare(t, base, "other.git")
	moved := newSink(t, localSpec(bare2), nil, workDir)
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("clone of another endpoint was kept: %v", err)
	}
	mustWrite(t, ctx, moved, nsInv, envelope(nsInv, 2, exportedAt, item("team-a", "x", "2")), true)
	if n := commitCount(t, bare2, "main"); n != 1 {
		t.Fatalf("commits in the new remote = %d, want 1", n)
	}

	// Junk that is not a repository is wiped too.
	junkDir := filepath.Join(base, "junk")
	if err := os.MkdirAll(filepath.Join(junkDir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	junk := newSink(t, localSpec(bare), nil, junkDir)
	if _, err := os.Stat(filepath.Join(junkDir, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("junk was kept: %v", err)
	}
	mustWrite(t, ctx, junk, nsInv, envelope(nsInv, 2, exportedAt, item("team-a", "x", "2")), false)
}

func TestBranchTemplateAndAuthor(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	// The repository has history on main; the sink's branch does not exist.
	pushFirst(t, bare)

	spec := localSpec(bare)
	spec.Serialization.Format = v1alpha1.SerializationYAML
	spec.Git = &v1alpha1.GitSinkConfig{
		Branch:        "snapshots",
		PathTemplate:  "inventories/{namespace}/{inventory}.{ext}",
		CommitMessage: "export {inventory} in {namespace} ({itemCount})",
		AuthorName:    "Export Bot",
		AuthorEmail:   "bot@example.com",
	}
	s := newSink(t, spec, nil, filepath.Join(base, "work"))
	env := envelope(clusterInv, 1, exportedAt, item("", "node-1", "1"), item("", "node-2", "1"))
	mustWrite(t, ctx, s, clusterInv, env, true)

	if n := commitCount(t, bare, "snapshots"); n != 1 {
		t.Errorf("commits on snapshots = %d, want 1 (a new root)", n)
	}
	if n := commitCount(t, bare, "main"); n != 1 {
		t.Errorf("commits on main = %d, want 1 (untouched)", n)
	}
	if got := git(t, bare, "--git-dir="+bare, "log", "-1", "--format=%an <%ae>|%s", "snapshots"); got != "Export Bot <bot@example.com>|export nodes in _cluster (2)" {
		t.Errorf("commit = %q", got)
	}
	doc := show(t, bare, "snapshots:inventories/_cluster/nodes.yaml")
	if doc != encode(t, env, sink.YAML) {
		t.Errorf("document = %s", doc)
	}
	header, err := sink.Header([]byte(doc), sink.YAML)
	if err != nil || header.Checksum != env.Checksum {
		t.Errorf("header = %+v, %v", header, err)
	}
	mustWrite(t, ctx, s, clusterInv, envelope(clusterInv, 1, exportedAt.Add(time.Hour), item("", "node-1", "1"), item("", "node-2", "1")), false)
}

// pushFirst gives the bare repository one commit on main.
func pushFirst(t *testing.T, bare string) {
	t.Helper()
	work := t.TempDir()
	git(t, work, "init", "--quiet", "-b", "main", "w")
	w := filepath.Join(work, "w")
	if err := os.WriteFile(filepath.Join(w, "README"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, w, "add", "README")
	git(t, w, "commit", "--quiet", "-m", "initial")
	git(t, w, "push", "--quiet", bare, "main")
}

func TestForeignContentIsKept(t *testing.T) {
	ctx := testContext(t)
	base := t.TempDir()
	bare := newBare(t, base, "remote.git")
	pushFirst(t, bare)
	s := newSink(t, localSpec(bare), nil, filepath.Join(base, "work"))

	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 1, exportedAt, item("team-a", "x", "1")), true)
	// Another writer commits between two writes; the next write fetches
	// it and builds on it.
	if err := pushForeign(bare, "main", "team-a-notes.txt", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, ctx, s, nsInv, envelope(nsInv, 2, exportedAt, item("team-a", "x", "2")), true)
	if n := commitCount(t, bare, "main"); n != 4 {
		t.Errorf("commits = %d, want 4", n)
	}
	if files := lsTree(t, bare, "main"); !slices.Equal(files, []string{"README", "east/team-a/apps.json", "team-a-notes.txt"}) {
		t.Errorf("files = %v", files)
	}
	// A file where the sink needs a directory is an error, not data loss.
	blocked := newSink(t, func() *v1alpha1.SnapshotSinkSpec {
		spec := localSpec(bare)
		spec.Git.PathTemplate = "README/{inventory}.{ext}"
		return spec
	}(), nil, filepath.Join(base, "work2"))
	if _, err := blocked.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt)); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Write below a file = %v", err)
	}
}

func TestRejectedConfiguration(t *testing.T) {
	base := t.TempDir()
	bare := fileURL(filepath.Join(base, "remote.git"))
	for name, spec := range map[string]*v1alpha1.SnapshotSinkSpec{
		"dotdot":         {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "../{inventory}.{ext}"}},
		"inner dotdot":   {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "{namespace}/../../x"}},
		"dot git":        {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: ".git/hooks/{inventory}"}},
		"inner dot git":  {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "a/.GIT/{inventory}"}},
		"absolute":       {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "/{inventory}.{ext}"}},
		"empty element":  {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "{namespace}//{inventory}"}},
		"bad branch":     {Endpoint: bare, Git: &v1alpha1.GitSinkConfig{Branch: "a..b"}},
		"scheme":         {Endpoint: "ftp://example.com/repo.git"},
		"scp form":       {Endpoint: "git@example.com:repo.git"},
		"file host":      {Endpoint: "file://host/repo.git"},
		"password":       {Endpoint: "https://user:secret@example.com/repo.git"},
		"format":         {Endpoint: bare, Serialization: v1alpha1.Serialization{Format: "xml"}},
		"server name":    {Endpoint: "https://example.com/repo.git", TLS: &v1alpha1.TLSConfig{ServerName: "other"}},
		"bad ca bundle":  {Endpoint: "https://example.com/repo.git", TLS: &v1alpha1.TLSConfig{CABundle: []byte("nope")}},
		"ssh without id": {Endpoint: "ssh://git@example.com/repo.git"},
	} {
		_, err := New(spec, nil, filepath.Join(base, "work"), loopbackDialer)
		if !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("%s: New = %v, want a permanent error", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error shows the password: %v", name, err)
		}
	}

	// An inventory name that turns the path into ".." is refused at write.
	s := newSink(t, &v1alpha1.SnapshotSinkSpec{Endpoint: bare, Git: &v1alpha1.GitSinkConfig{PathTemplate: "{inventory}/x"}}, nil, filepath.Join(base, "work"))
	inv := sink.Inventory{Namespace: "ns", Name: ".."}
	if _, err := s.Write(testContext(t), inv, envelope(inv, 1, exportedAt)); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Write = %v, want a permanent error", err)
	}
}

func TestSSHSecretChecks(t *testing.T) {
	base := t.TempDir()
	spec := &v1alpha1.SnapshotSinkSpec{Endpoint: "ssh://git@example.com:2222/repo.git"}
	key := "-----BEGIN OPENSSH PRIVATE KEY-----\nTHISISNOTAREALKEYBUTITMUSTNOTLEAK\n-----END OPENSSH PRIVATE KEY-----\n"

	_, err := New(spec, sink.Secret{"ssh-privatekey": []byte(key)}, filepath.Join(base, "a"), loopbackDialer)
	if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "known_hosts") {
		t.Errorf("missing known_hosts: %v", err)
	}
	_, err = New(spec, sink.Secret{"ssh-privatekey": []byte(key), "known_hosts": []byte("example.com ssh-ed25519 AAAA\n")}, filepath.Join(base, "b"), loopbackDialer)
	if !errors.Is(err, sink.ErrPermanent) || strings.Contains(err.Error(), "THISISNOTAREALKEY") {
		t.Errorf("unusable key: %v", err)
	}
	// A token does not fit an ssh endpoint, nor a key an https one.
	_, err = New(&v1alpha1.SnapshotSinkSpec{Endpoint: "https://example.com/repo.git"}, sink.Secret{"ssh-privatekey": []byte(key)}, filepath.Join(base, "c"), loopbackDialer)
	if !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("key with https: %v", err)
	}
}
