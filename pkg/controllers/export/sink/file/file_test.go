package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
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
func envelope(inv sink.Inventory, generation int64, exportedAt time.Time, items ...*sink.Item) *sink.Envelope {
	sort.Slice(items, func(i, j int) bool { return items[i].Key() < items[j].Key() })
	return &sink.Envelope{
		SchemaVersion: sink.SchemaVersion,
		Checksum:      sink.ChecksumOf(items),
		Generation:    generation,
		ItemCount:     len(items),
		ExportedAt:    exportedAt,
		Cluster:       "test",
		Inventory:     inv,
		Items:         items,
	}
}

var (
	nsInv      = sink.Inventory{Kind: "Inventory", Namespace: "team-a", Name: "apps"}
	clusterInv = sink.Inventory{Kind: "ClusterInventory", Name: "nodes"}
	exportedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

func newSink(t *testing.T, dir string, format v1alpha1.SerializationFormat, tmpl string) *Sink {
	t.Helper()
	spec := &v1alpha1.SnapshotSinkSpec{
		Type:          v1alpha1.SnapshotSinkFile,
		Endpoint:      fileURL(dir),
		Serialization: v1alpha1.Serialization{Format: format},
	}
	if tmpl != "" {
		spec.File = &v1alpha1.FileSinkConfig{PathTemplate: tmpl}
	}
	s, err := New(spec)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func fileURL(dir string) string { return (&url.URL{Scheme: "file", Path: dir}).String() }

// listFiles returns the regular files under dir, relative and sorted.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	return files
}

func TestWriteFormats(t *testing.T) {
	ctx := context.Background()
	for _, format := range []v1alpha1.SerializationFormat{"", v1alpha1.SerializationJSON, v1alpha1.SerializationYAML, v1alpha1.SerializationNDJSON} {
		t.Run("format="+string(format), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out") // created by the sink
			s := newSink(t, dir, format, "")
			ext := sink.Format(format).Ext()

			for _, inv := range []sink.Inventory{nsInv, clusterInv} {
				env := envelope(inv, 3, exportedAt, item("a", "x", "1"), item("b", "y", "2"))
				written, err := s.Write(ctx, inv, env)
				if err != nil || !written {
					t.Fatalf("Write(%s) = %v, %v", inv.Name, written, err)
				}
				want, err := sink.Encode(env, sink.Format(format))
				if err != nil {
					t.Fatal(err)
				}
				ns := inv.Namespace
				if ns == "" {
					ns = ClusterNamespace
				}
				got, err := os.ReadFile(filepath.Join(dir, ns, inv.Name+"."+ext))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("file holds\n%s\nwant\n%s", got, want)
				}
				header, err := sink.Header(got, sink.Format(format))
				if err != nil {
					t.Fatal(err)
				}
				if header.Checksum != env.Checksum || header.Generation != 3 || header.ItemCount != 2 {
					t.Errorf("header = %+v, want checksum %s", header, env.Checksum)
				}
			}
			want := []string{"_cluster/nodes." + ext, "team-a/apps." + ext}
			if got := listFiles(t, dir); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("files = %v, want %v (no temp files)", got, want)
			}
		})
	}
}

func TestOverwrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir, "", "")
	if _, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt, item("a", "x", "1"))); err != nil {
		t.Fatal(err)
	}
	env := envelope(nsInv, 2, exportedAt.Add(time.Minute), item("a", "x", "2"))
	if _, err := s.Write(ctx, nsInv, env); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "team-a", "apps.json"))
	if err != nil {
		t.Fatal(err)
	}
	header, err := sink.Header(got, sink.JSON)
	if err != nil {
		t.Fatal(err)
	}
	if header.Checksum != env.Checksum || header.Generation != 2 {
		t.Errorf("header = %+v, want the second write", header)
	}
	if got := listFiles(t, dir); len(got) != 1 {
		t.Errorf("files = %v, want one", got)
	}
}

func TestPathTemplate(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir, v1alpha1.SerializationYAML, "snapshots/{namespace}-{inventory}.{ext}")
	if _, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", "team-a-apps.yaml")); err != nil {
		t.Error(err)
	}
}

func TestRejectedEndpointsAndTemplates(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ endpoint, tmpl string }{
		{endpoint: "file://relative/dir"},
		{endpoint: "file:relative"},
		{endpoint: "https://example.com/dir"},
		{endpoint: dir},
		{endpoint: fileURL(dir) + "?x=1"},
		{endpoint: fileURL(dir), tmpl: "../{inventory}.{ext}"},
		{endpoint: fileURL(dir), tmpl: "{namespace}/../../{inventory}.{ext}"},
		{endpoint: fileURL(dir), tmpl: "/etc/{inventory}.{ext}"},
		{endpoint: fileURL(dir), tmpl: "{namespace}/"},
		{endpoint: fileURL(dir), tmpl: "."},
	} {
		spec := &v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: tc.endpoint}
		if tc.tmpl != "" {
			spec.File = &v1alpha1.FileSinkConfig{PathTemplate: tc.tmpl}
		}
		_, err := New(spec)
		if !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("New(%q, %q) = %v, want a permanent error", tc.endpoint, tc.tmpl, err)
		}
	}
	_, err := New(&v1alpha1.SnapshotSinkSpec{Endpoint: fileURL(dir), Serialization: v1alpha1.Serialization{Format: "xml"}})
	if !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("unknown format: %v", err)
	}
}

// An inventory name is not checked by New; a value that turns the path
// into ".." at write time must be refused as well.
func TestWriteRejectsEscapingValues(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, dir, "", "{inventory}/x.{ext}")
	inv := sink.Inventory{Kind: "Inventory", Namespace: "ns", Name: ".."}
	if _, err := s.Write(context.Background(), inv, envelope(inv, 1, exportedAt)); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Write = %v, want a permanent error", err)
	}
	if got := listFiles(t, filepath.Dir(dir)); len(got) != 0 {
		t.Errorf("files = %v, want none", got)
	}
}

// A symlink in the directory pointing outside cannot be followed.
func TestSymlinkEscape(t *testing.T) {
	base := t.TempDir()
	dir, outside := filepath.Join(base, "sink"), filepath.Join(base, "outside")
	for _, d := range []string{dir, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "team-a")); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, dir, "", "")
	if _, err := s.Write(context.Background(), nsInv, envelope(nsInv, 1, exportedAt)); err == nil {
		t.Fatal("Write through a symlink leaving the directory succeeded")
	}
	if got := listFiles(t, outside); len(got) != 0 {
		t.Errorf("files outside = %v, want none", got)
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir, "", "deep/{namespace}/{inventory}.{ext}")
	other := sink.Inventory{Kind: "Inventory", Namespace: "team-b", Name: "apps"}
	for _, inv := range []sink.Inventory{nsInv, other} {
		if _, err := s.Write(ctx, inv, envelope(inv, 1, exportedAt, item("a", "x", "1"))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delete(ctx, nsInv); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "deep", "team-a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("empty directory deep/team-a remains: %v", err)
	}
	if got := listFiles(t, dir); len(got) != 1 || got[0] != "deep/team-b/apps.json" {
		t.Errorf("files = %v, want only team-b's", got)
	}
	if err := s.Delete(ctx, other); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("the sink directory itself must remain: %v", err)
	}
	if len(entries) != 0 {
		t.Errorf("directory holds %v, want nothing", entries)
	}
	// Deleting what does not exist is fine.
	if err := s.Delete(ctx, other); err != nil {
		t.Errorf("second Delete: %v", err)
	}
}

func TestConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newSink(t, dir, v1alpha1.SerializationNDJSON, "")
	invs := []sink.Inventory{nsInv, clusterInv}
	last := make([]*sink.Envelope, len(invs))
	var wg sync.WaitGroup
	errs := make(chan error, 2*50)
	for i, inv := range invs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for gen := int64(1); gen <= 50; gen++ {
				env := envelope(inv, gen, exportedAt, item("a", "x", fmt.Sprint(gen)))
				if _, err := s.Write(ctx, inv, env); err != nil {
					errs <- err
				}
				last[i] = env
				// Deletes prune directories while the other inventory writes.
				if gen%10 == 0 {
					if err := s.Delete(ctx, inv); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, inv := range invs {
		// The last generation (50) was deleted; write once more to check.
		env := envelope(inv, 51, exportedAt, item("a", "x", "51"))
		if _, err := s.Write(ctx, inv, env); err != nil {
			t.Fatal(err)
		}
		last[i] = env
	}
	for i, name := range []string{"team-a/apps.ndjson", "_cluster/nodes.ndjson"} {
		doc, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		header, err := sink.Header(doc, sink.NDJSON)
		if err != nil {
			t.Fatal(err)
		}
		if header.Checksum != last[i].Checksum || header.Generation != 51 {
			t.Errorf("%s: header %+v, want generation 51", name, header)
		}
	}
	if got := listFiles(t, dir); len(got) != 2 {
		t.Errorf("files = %v, want two (no temp files)", got)
	}
}

func TestProbe(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "a", "b")
	s := newSink(t, dir, "", "")
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	if got := listFiles(t, dir); len(got) != 0 {
		t.Errorf("probe left %v", got)
	}

	// A path that cannot become a directory fails the probe.
	blocker := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	bad := newSink(t, filepath.Join(blocker, "dir"), "", "")
	if err := bad.Probe(ctx); err == nil {
		t.Error("Probe under a regular file succeeded")
	}
}

// A failed write leaves no temp file behind: here the rename fails because
// a directory occupies the target path.
func TestFailedWriteLeavesNoTempFile(t *testing.T) {
	dir := t.TempDir()
	occupied := filepath.Join(dir, "team-a", "apps.json")
	if err := os.MkdirAll(occupied, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(occupied, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSink(t, dir, "", "")
	if _, err := s.Write(context.Background(), nsInv, envelope(nsInv, 1, exportedAt)); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if got := listFiles(t, dir); len(got) != 1 || got[0] != "team-a/apps.json/keep" {
		t.Errorf("files = %v, want only the pre-existing one", got)
	}
}
