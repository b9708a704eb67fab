package file

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
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
		Cluster:       inv.Cluster,
		Inventory:     inv,
		Items:         items,
	}
}

var (
	nsInv      = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "apps"}
	clusterInv = sink.Inventory{Cluster: "east", Kind: "ClusterInventory", Name: "nodes"}
	exportedAt = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
)

// newSink returns the sink of namespace team-a under the file sink root
// root, at endpoint file:///out, and the directory its files land in.
func newSink(t *testing.T, root string, format v1alpha1.SerializationFormat, tmpl string) (*Sink, string) {
	t.Helper()
	return newSinkAt(t, root, "team-a", "file:///out", format, tmpl), filepath.Join(root, "team-a", "out")
}

func newSinkAt(t *testing.T, root, namespace, endpoint string, format v1alpha1.SerializationFormat, tmpl string) *Sink {
	t.Helper()
	spec := &v1alpha1.SnapshotSinkSpec{
		Type:          v1alpha1.SnapshotSinkFile,
		Endpoint:      endpoint,
		Serialization: v1alpha1.Serialization{Format: format},
	}
	if tmpl != "" {
		spec.File = &v1alpha1.FileSinkConfig{PathTemplate: tmpl}
	}
	s, err := New(spec, Location{Root: root, Namespace: namespace})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

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
			root := t.TempDir()
			s, dir := newSink(t, root, format, "") // dir is created by the sink
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
				got, err := os.ReadFile(filepath.Join(dir, "east", ns, inv.Name+"."+ext))
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
			want := []string{"team-a/out/east/_cluster/nodes." + ext, "team-a/out/east/team-a/apps." + ext}
			if got := listFiles(t, root); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("files = %v, want %v (no temp files)", got, want)
			}
		})
	}
}

func TestOverwrite(t *testing.T) {
	ctx := context.Background()
	s, dir := newSink(t, t.TempDir(), "", "")
	if _, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt, item("a", "x", "1"))); err != nil {
		t.Fatal(err)
	}
	env := envelope(nsInv, 2, exportedAt.Add(time.Minute), item("a", "x", "2"))
	if _, err := s.Write(ctx, nsInv, env); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "east", "team-a", "apps.json"))
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
	info, err := os.Stat(filepath.Join(dir, "east", "team-a", "apps.json"))
	if err != nil {
		t.Fatal(err)
	}
	if perm := info.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("document mode %v is readable by others", perm)
	}
}

// TestRewriteAfterDirectoryRemoved: the sink creates a document's
// directory only when a write finds it missing; one removed after the
// first write (by hand, or by a Delete of the last document in it) is
// created again, and the same payload is written again there, while an
// unchanged payload whose document is in place leaves it.
func TestRewriteAfterDirectoryRemoved(t *testing.T) {
	// The document's directory, and the sink's own directory (the one the
	// sink keeps open between writes).
	for _, removed := range []string{"east", "."} {
		t.Run(removed, func(t *testing.T) {
			ctx := context.Background()
			s, dir := newSink(t, t.TempDir(), "", "")
			doc := filepath.Join(dir, "east", "team-a", "apps.json")
			at := func(i int) time.Time { return exportedAt.Add(time.Duration(i) * time.Minute) }
			// Write i is a due re-export of the same payload; the
			// document holds the exportedAt of the write that put it there.
			for i, want := range []struct {
				written bool
				holds   int
			}{{true, 0}, {false, 0}, {true, 2}, {false, 2}} {
				if i == 2 {
					if err := os.RemoveAll(filepath.Join(dir, removed)); err != nil {
						t.Fatal(err)
					}
				}
				written, err := s.Write(ctx, nsInv, envelope(nsInv, 1, at(i), item("a", "x", "1")))
				if err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
				if written != want.written {
					t.Errorf("write %d: written = %v, want %v", i, written, want.written)
				}
				got, err := os.ReadFile(doc)
				if err != nil {
					t.Fatalf("after write %d: %v", i, err)
				}
				if !strings.Contains(string(got), at(want.holds).Format(time.RFC3339)) {
					t.Errorf("after write %d the document does not say exportedAt %s", i, at(want.holds).Format(time.RFC3339))
				}
			}
		})
	}
}

// TestReexportRestoresDrift: a due re-export of an unchanged payload
// leaves the document it finds as it was written (same file, same
// modification time), and writes it again, as a full export, when anything
// changed it since: an edit of the same length, a truncation, a removal,
// a symlink in its place, an identical copy in its place, a new mode (or
// one set back), a hard link, its directory moved away (the sink holds
// that directory open), or another writer's document. The rewrite restores
// the sink's mode.
func TestReexportRestoresDrift(t *testing.T) {
	ctx := context.Background()
	other := sink.Inventory{Cluster: nsInv.Cluster, Kind: nsInv.Kind, Namespace: nsInv.Namespace, Name: "other"}
	for _, tc := range []struct {
		name  string
		drift func(t *testing.T, s *Sink, doc string)
	}{
		{"untouched", nil},
		{"edited in place, same length", func(t *testing.T, _ *Sink, doc string) {
			b, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			i := bytes.Index(b, []byte(`"x"`))
			b[i+1] = 'z'
			if err := os.WriteFile(doc, b, 0o640); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, _ *Sink, doc string) {
			if err := os.Truncate(doc, 0); err != nil {
				t.Fatal(err)
			}
		}},
		{"removed", func(t *testing.T, _ *Sink, doc string) {
			if err := os.Remove(doc); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symlink to an identical copy", func(t *testing.T, _ *Sink, doc string) {
			copyPath := filepath.Join(filepath.Dir(doc), "copy.json")
			b, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(copyPath, b, 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(doc); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("copy.json", doc); err != nil {
				t.Fatal(err)
			}
		}},
		{"an identical copy with another mode", func(t *testing.T, _ *Sink, doc string) {
			b, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			tmp := doc + ".copy"
			if err := os.WriteFile(tmp, b, 0o400); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, doc); err != nil {
				t.Fatal(err)
			}
		}},
		{"its mode changed in place", func(t *testing.T, _ *Sink, doc string) {
			if err := os.Chmod(doc, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"its mode changed and set back", func(t *testing.T, _ *Sink, doc string) {
			for _, mode := range []fs.FileMode{0o600, fileMode} {
				if err := os.Chmod(doc, mode); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"a hard link to it", func(t *testing.T, _ *Sink, doc string) {
			if err := os.Link(doc, doc+".link"); err != nil {
				t.Fatal(err)
			}
		}},
		{"its endpoint directory moved away", func(t *testing.T, _ *Sink, doc string) {
			out := filepath.Dir(filepath.Dir(filepath.Dir(doc)))
			if err := os.Rename(out, out+".old"); err != nil {
				t.Fatal(err)
			}
		}},
		{"its namespace directory moved away", func(t *testing.T, _ *Sink, doc string) {
			ns := filepath.Dir(filepath.Dir(filepath.Dir(filepath.Dir(doc))))
			if err := os.Rename(ns, ns+".old"); err != nil {
				t.Fatal(err)
			}
		}},
		{"another inventory's document at the same path", func(t *testing.T, s *Sink, _ string) {
			if _, err := s.Write(ctx, other, envelope(other, 1, exportedAt, item("a", "x", "1"))); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// One document for every inventory of the namespace: a second
			// inventory writes the same path.
			s, dir := newSink(t, t.TempDir(), "", "{cluster}/{namespace}/all.{ext}")
			doc := filepath.Join(dir, "east", "team-a", "all.json")
			first := envelope(nsInv, 1, exportedAt, item("a", "x", "1"))
			if written, err := s.Write(ctx, nsInv, first); err != nil || !written {
				t.Fatalf("first write = %v, %v", written, err)
			}
			want, err := sink.Encode(first, sink.JSON)
			if err != nil {
				t.Fatal(err)
			}
			if tc.drift != nil {
				tc.drift(t, s, doc)
			}
			before, _ := os.Lstat(doc)
			again := envelope(nsInv, 1, exportedAt.Add(time.Minute), item("a", "x", "1"))
			written, err := s.Write(ctx, nsInv, again)
			if err != nil {
				t.Fatal(err)
			}
			after, err := os.Lstat(doc)
			if err != nil {
				t.Fatal(err)
			}
			if !after.Mode().IsRegular() {
				t.Fatalf("after the re-export the document is %v, not a regular file", after.Mode())
			}
			got, err := os.ReadFile(doc)
			if err != nil {
				t.Fatal(err)
			}
			if tc.drift == nil {
				if written || !os.SameFile(before, after) || !before.ModTime().Equal(after.ModTime()) || !bytes.Equal(got, want) {
					t.Errorf("re-export of an untouched document: written = %v, same file %v, same time %v, same bytes %v; want false, and the document left as it was",
						written, os.SameFile(before, after), before.ModTime().Equal(after.ModTime()), bytes.Equal(got, want))
				}
				return
			}
			if !written {
				t.Errorf("written = false after the document was %s; want it written again", tc.name)
			}
			if rewritten, err := sink.Encode(again, sink.JSON); err != nil || !bytes.Equal(got, rewritten) {
				t.Errorf("document after the re-export = %s; want the re-export's (%v)", got, err)
			}
			if after.Mode().Perm() != fileMode {
				t.Errorf("document mode after the re-export %v, want %v", after.Mode().Perm(), fileMode)
			}
		})
	}
}

// TestVersionCoversEveryItemField: a payload that differs from the last
// one only in what the checksum leaves out (an item's target or profile,
// the generation, the inventory) is written, not taken for the same.
func TestVersionCoversEveryItemField(t *testing.T) {
	ctx := context.Background()
	base := func() *sink.Envelope { return envelope(nsInv, 1, exportedAt, item("a", "x", "1")) }
	for _, tc := range []struct {
		name   string
		change func(env *sink.Envelope)
	}{
		{"target", func(env *sink.Envelope) { env.Items[0].Target = "other-target" }},
		{"profile", func(env *sink.Envelope) { env.Items[0].Profile = "other-profile" }},
		{"generation", func(env *sink.Envelope) { env.Generation = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, dir := newSink(t, t.TempDir(), "", "")
			if _, err := s.Write(ctx, nsInv, base()); err != nil {
				t.Fatal(err)
			}
			env := base()
			tc.change(env)
			if env.Checksum != base().Checksum {
				t.Fatalf("the change moved the checksum: not the case under test")
			}
			written, err := s.Write(ctx, nsInv, env)
			if err != nil || !written {
				t.Fatalf("Write after a change of the %s = %v, %v; want written", tc.name, written, err)
			}
			got, err := os.ReadFile(filepath.Join(dir, "east", "team-a", "apps.json"))
			if err != nil {
				t.Fatal(err)
			}
			if want, _ := sink.Encode(env, sink.JSON); !bytes.Equal(got, want) {
				t.Errorf("document = %s; want %s", got, want)
			}
		})
	}
}

// TestSucceed: a sink built again for the same place (a client rebuilt by
// age) still finds the documents its predecessor wrote, and leaves them;
// one for another place, or format, starts knowing nothing.
func TestSucceed(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	old := newSinkAt(t, root, "team-a", "file:///out", "", "")
	if _, err := old.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt, item("a", "x", "1"))); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		next     *Sink
		wantKept bool
	}{
		{"same place", newSinkAt(t, root, "team-a", "file:///out", "", ""), true},
		{"another endpoint", newSinkAt(t, root, "team-a", "file:///elsewhere", "", ""), false},
		{"another format", newSinkAt(t, root, "team-a", "file:///out", v1alpha1.SerializationYAML, ""), false},
		{"another namespace", newSinkAt(t, root, "team-b", "file:///out", "", ""), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.next.Succeed(old)
			if kept := len(tc.next.docs) > 0; kept != tc.wantKept {
				t.Fatalf("after Succeed the sink knows %d documents; want them kept: %v", len(tc.next.docs), tc.wantKept)
			}
			if !tc.wantKept {
				return
			}
			_ = old.Close()
			written, err := tc.next.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt.Add(time.Minute), item("a", "x", "1")))
			if err != nil || written {
				t.Errorf("re-export through the successor = %v, %v; want the document left (false, nil)", written, err)
			}
		})
	}
}

// TestOpenDocumentDoesNotWaitOnAFIFO: the read-back opens without waiting
// for a writer, so a FIFO swapped in where the document goes cannot stop
// the sink with its lock held. (holds looks before it opens; the swap
// comes between the two.)
func TestOpenDocumentDoesNotWaitOnAFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "apps.json")
	if err := syscall.Mkfifo(fifo, 0o640); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	_ = callBesideFIFO(t, fifo, "opening a FIFO", func() error {
		f, err := openDocument(root, "apps.json")
		if err == nil {
			_ = f.Close()
		}
		return err
	})
}

// callBesideFIFO runs call and returns its error. Should call still wait
// after 10 s (on the FIFO at fifo, for a writer), it lets it go, by opening
// the FIFO for writing, and fails the test saying what waited.
func callBesideFIFO(t *testing.T, fifo, what string, call func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = w.Close()
		}
		<-done
		t.Fatalf("%s waited for a writer", what)
		return nil
	}
}

// TestFIFOInsteadOfADirectory: a FIFO where a directory of the path goes
// fails the write at once instead of making it wait for a writer with the
// sink's lock held.
func TestFIFOInsteadOfADirectory(t *testing.T) {
	for _, planted := range []string{
		"out/east/team-a", // the document's directory
		"out",             // the endpoint's directory, before the first write
		".",               // the namespace's directory
	} {
		t.Run(planted, func(t *testing.T) {
			root := t.TempDir()
			fifo := filepath.Join(root, "team-a", planted)
			if err := os.MkdirAll(filepath.Dir(fifo), 0o750); err != nil {
				t.Fatal(err)
			}
			if err := syscall.Mkfifo(fifo, 0o640); err != nil {
				t.Fatal(err)
			}
			s, _ := newSink(t, root, "", "")
			err := callBesideFIFO(t, fifo, "Write through a FIFO at "+planted, func() error {
				_, err := s.Write(context.Background(), nsInv, envelope(nsInv, 1, exportedAt, item("a", "x", "1")))
				return err
			})
			if err == nil {
				t.Errorf("Write through a FIFO at %s succeeded", planted)
			}
		})
	}
}

func TestPathTemplate(t *testing.T) {
	ctx := context.Background()
	s, dir := newSink(t, t.TempDir(), v1alpha1.SerializationYAML, "snapshots/{namespace}-{inventory}.{ext}")
	if _, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snapshots", "team-a-apps.yaml")); err != nil {
		t.Error(err)
	}
}

// TestEndpointIsRelative: an endpoint path names a directory under
// DIR/<namespace>, whatever its form; sinks admitted before
// --file-sink-root named absolute directories of the server and now write
// under the namespace's directory, never at the old place.
func TestEndpointIsRelative(t *testing.T) {
	legacy := filepath.Join(t.TempDir(), "legacy")
	for endpoint, want := range map[string]string{
		"file:///":                           "team-a/east/team-a/apps.json",
		"file:///reports":                    "team-a/reports/east/team-a/apps.json",
		"file:////reports//./daily/":         "team-a/reports/daily/east/team-a/apps.json",
		"file:///reports/%2Fdaily":           "team-a/reports/daily/east/team-a/apps.json",
		"file://" + filepath.ToSlash(legacy): "team-a" + filepath.ToSlash(legacy) + "/east/team-a/apps.json",
	} {
		t.Run(endpoint, func(t *testing.T) {
			root := t.TempDir()
			s := newSinkAt(t, root, "team-a", endpoint, "", "")
			if _, err := s.Write(context.Background(), nsInv, envelope(nsInv, 1, exportedAt)); err != nil {
				t.Fatal(err)
			}
			if got := listFiles(t, root); len(got) != 1 || got[0] != want {
				t.Errorf("files = %v, want [%s]", got, want)
			}
		})
	}
	if _, err := os.Stat(legacy); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the legacy absolute directory was touched: %v", err)
	}
}

func TestDisabledWithoutRoot(t *testing.T) {
	spec := &v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///reports"}
	_, err := New(spec, Location{Namespace: "team-a"})
	if !errors.Is(err, ErrDisabled) || !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "--file-sink-root") {
		t.Errorf("New without a root = %v, want ErrDisabled naming the flag", err)
	}
}

func TestRejectedEndpointsAndTemplates(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct{ namespace, endpoint, tmpl string }{
		{endpoint: "file://relative/dir"},
		{endpoint: "file:relative"},
		{endpoint: "https://example.com/dir"},
		{endpoint: "/absolute/dir"},
		{endpoint: "file:///dir?x=1"},
		{endpoint: "file:///../team-b"},
		{endpoint: "file:///reports/../../team-b"},
		{endpoint: "file:///%2e%2e/team-b"},
		{endpoint: "file:///reports%00"},
		{endpoint: `file:///reports\..\..\team-b`},
		{endpoint: "file:///out", tmpl: "../{inventory}.{ext}"},
		{endpoint: "file:///out", tmpl: "{namespace}/../../{inventory}.{ext}"},
		{endpoint: "file:///out", tmpl: "/etc/{inventory}.{ext}"},
		{endpoint: "file:///out", tmpl: "{namespace}/"},
		{endpoint: "file:///out", tmpl: "."},
		{namespace: "..", endpoint: "file:///out"},
		{namespace: "", endpoint: "file:///out"},
		{namespace: "team-a/../team-b", endpoint: "file:///out"},
		{namespace: "/etc", endpoint: "file:///out"},
	} {
		spec := &v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: tc.endpoint}
		if tc.tmpl != "" {
			spec.File = &v1alpha1.FileSinkConfig{PathTemplate: tc.tmpl}
		}
		ns := tc.namespace
		if ns == "" && tc.endpoint != "file:///out" {
			ns = "team-a"
		}
		_, err := New(spec, Location{Root: root, Namespace: ns})
		if !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("New(%q, %q, namespace %q) = %v, want a permanent error", tc.endpoint, tc.tmpl, ns, err)
		}
	}
	_, err := New(&v1alpha1.SnapshotSinkSpec{Endpoint: "file:///out", Serialization: v1alpha1.Serialization{Format: "xml"}}, Location{Root: root, Namespace: "team-a"})
	if !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("unknown format: %v", err)
	}
	if got := listFiles(t, root); len(got) != 0 {
		t.Errorf("files = %v, want none", got)
	}
}

// An inventory name is not checked by New; a value that turns the path
// into ".." at write time must be refused as well.
func TestWriteRejectsEscapingValues(t *testing.T) {
	root := t.TempDir()
	s, _ := newSink(t, root, "", "{inventory}/x.{ext}")
	inv := sink.Inventory{Kind: "Inventory", Namespace: "ns", Name: ".."}
	if _, err := s.Write(context.Background(), inv, envelope(inv, 1, exportedAt)); !errors.Is(err, sink.ErrPermanent) {
		t.Errorf("Write = %v, want a permanent error", err)
	}
	if got := listFiles(t, filepath.Dir(root)); len(got) != 0 {
		t.Errorf("files = %v, want none", got)
	}
}

// tree records every entry under dirs without following symlinks: its
// type, mode, size, modification time and content or link target.
func tree(t *testing.T, dirs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			desc := fmt.Sprintf("%v %d %d", info.Mode(), info.Size(), info.ModTime().UnixNano())
			switch {
			case info.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				desc += " -> " + target
			case info.Mode().IsRegular():
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				desc += " " + string(b)
			}
			out[p] = desc
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestConfinement: whatever is planted in DIR, a sink of team-a writes and
// deletes in DIR/team-a only. Each case plants symlinks (relative ones
// staying inside DIR, absolute ones, to / and to another namespace's
// directory), writes and deletes a document, and compares everything
// outside DIR/team-a (team-b's directory, a directory outside DIR) with
// what was there before.
func TestConfinement(t *testing.T) {
	type env struct{ root, outside string }
	tests := []struct {
		name      string
		namespace string
		endpoint  string
		tmpl      string
		plant     func(t *testing.T, e env)
		// written is the document's path under DIR when the write must
		// succeed; empty when it must fail.
		written string
		// probeOK: the endpoint's directory is fine, only the template's
		// path is not.
		probeOK bool
	}{
		{name: "symlink to another namespace's directory", endpoint: "file:///to-b",
			plant: func(t *testing.T, e env) { symlink(t, "../team-b", e.root, "team-a/to-b") }},
		{name: "symlink to /", endpoint: "file:///to-root/tmp",
			plant: func(t *testing.T, e env) { symlink(t, "/", e.root, "team-a/to-root") }},
		{name: "absolute symlink to a directory outside", endpoint: "file:///away",
			plant: func(t *testing.T, e env) { symlink(t, e.outside, e.root, "team-a/away") }},
		{name: "relative symlink climbing out of DIR", endpoint: "file:///up",
			plant: func(t *testing.T, e env) {
				rel, err := filepath.Rel(filepath.Join(e.root, "team-a"), e.outside)
				if err != nil {
					t.Fatal(err)
				}
				symlink(t, rel, e.root, "team-a/up")
			}},
		{name: "symlinked parent directory", endpoint: "file:///nested/link/deeper",
			plant: func(t *testing.T, e env) { symlink(t, "../../team-b", e.root, "team-a/nested/link") }},
		{name: "symlink where the template's directory goes", endpoint: "file:///reports",
			plant: func(t *testing.T, e env) { symlink(t, "../../../team-b", e.root, "team-a/reports/east/team-a") }, probeOK: true},
		{name: "symlink where the cluster's directory goes", endpoint: "file:///reports",
			plant: func(t *testing.T, e env) { symlink(t, "../../team-b", e.root, "team-a/reports/east") }, probeOK: true},
		{name: "symlink where the document goes is replaced, not followed", endpoint: "file:///reports",
			plant: func(t *testing.T, e env) {
				symlink(t, "../../../../team-b/sentinel.json", e.root, "team-a/reports/east/team-a/apps.json")
			},
			written: "team-a/reports/east/team-a/apps.json"},
		{name: "symlink inside the namespace's directory is fine", endpoint: "file:///alias",
			plant: func(t *testing.T, e env) {
				mkdir(t, e.root, "team-a/real")
				symlink(t, "real", e.root, "team-a/alias")
			},
			written: "team-a/real/east/team-a/apps.json"},
		{name: "template naming another namespace stays inside", endpoint: "file:///", tmpl: "team-b/{inventory}.{ext}",
			written: "team-a/team-b/apps.json"},
		{name: "namespace directory replaced by a symlink to another namespace's", namespace: "team-c", endpoint: "file:///",
			plant: func(t *testing.T, e env) { symlink(t, "team-b", e.root, "team-c") }},
		{name: "namespace directory replaced by a symlink to DIR itself", namespace: "team-c", endpoint: "file:///team-b",
			plant: func(t *testing.T, e env) { symlink(t, ".", e.root, "team-c") }},
		{name: "namespace directory replaced by an absolute symlink", namespace: "team-c", endpoint: "file:///",
			plant: func(t *testing.T, e env) { symlink(t, e.outside, e.root, "team-c") }},
		{name: "namespace directory replaced by a regular file", namespace: "team-c", endpoint: "file:///",
			plant: func(t *testing.T, e env) { writeFile(t, e.root, "team-c", "not a directory") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := env{root: t.TempDir(), outside: t.TempDir()}
			mkdir(t, e.root, "team-a")
			writeFile(t, e.root, "team-b/sentinel.json", "team-b's document")
			writeFile(t, e.outside, "sentinel.json", "outside")
			if tc.plant != nil {
				tc.plant(t, e)
			}
			before := tree(t, filepath.Join(e.root, "team-b"), e.outside)
			ns := tc.namespace
			if ns == "" {
				ns = "team-a"
			}
			s := newSinkAt(t, e.root, ns, tc.endpoint, "", tc.tmpl)
			inv := sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "apps"}
			_, err := s.Write(context.Background(), inv, envelope(inv, 1, exportedAt, item("a", "x", "1")))
			switch {
			case tc.written == "" && err == nil:
				t.Errorf("Write succeeded, want a refusal")
			case tc.written != "" && err != nil:
				t.Errorf("Write: %v", err)
			case tc.written != "":
				info, err := os.Lstat(filepath.Join(e.root, tc.written))
				if err != nil || !info.Mode().IsRegular() {
					t.Errorf("%s: %v, want a regular file", tc.written, err)
				}
			}
			t.Logf("write: %v", err)
			if err != nil && strings.Contains(err.Error(), e.root) {
				t.Errorf("the error shows the server's path: %v", err)
			}
			perr := s.Probe(context.Background())
			if (perr == nil) != (tc.written != "" || tc.probeOK) {
				t.Errorf("Probe = %v", perr)
			}
			if err := s.Delete(context.Background(), inv); (err == nil) != (tc.written != "") {
				t.Errorf("Delete = %v", err)
			}
			if after := tree(t, filepath.Join(e.root, "team-b"), e.outside); fmt.Sprint(after) != fmt.Sprint(before) {
				t.Errorf("outside DIR/team-a changed:\nbefore %v\nafter  %v", before, after)
			}
			if entries, err := os.ReadDir(e.root); err != nil {
				t.Fatal(err)
			} else {
				for _, d := range entries {
					if n := d.Name(); n != "team-a" && n != "team-b" && n != "team-c" {
						t.Errorf("DIR holds %s", n)
					}
				}
			}
		})
	}
}

func symlink(t *testing.T, target, root, name string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, root, name string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, name), 0o750); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, root, name, content string) {
	t.Helper()
	p := filepath.Join(root, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
}

// An error about DIR itself names the flag, not the server's path.
func TestRootErrorHidesPath(t *testing.T) {
	root := filepath.Join(t.TempDir(), "missing-root")
	s := newSinkAt(t, root, "team-a", "file:///", "", "")
	err := s.Probe(context.Background())
	if err == nil || strings.Contains(err.Error(), root) || !strings.Contains(err.Error(), "--file-sink-root") {
		t.Errorf("Probe = %v, want an error naming the flag and not %s", err, root)
	}
}

func TestDelete(t *testing.T) {
	ctx := context.Background()
	s, dir := newSink(t, t.TempDir(), "", "deep/{namespace}/{inventory}.{ext}")
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
	s, dir := newSink(t, t.TempDir(), v1alpha1.SerializationNDJSON, "")
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
	for i, name := range []string{"east/team-a/apps.ndjson", "east/_cluster/nodes.ndjson"} {
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
	root := t.TempDir()
	s := newSinkAt(t, root, "team-a", "file:///a/b", "", "")
	if err := s.Probe(ctx); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	info, err := os.Stat(filepath.Join(root, "team-a", "a", "b"))
	if err != nil || !info.IsDir() {
		t.Fatalf("the probe did not create the directory: %v", err)
	}
	if got := listFiles(t, root); len(got) != 0 {
		t.Errorf("probe left %v", got)
	}

	// A path that cannot become a directory fails the probe.
	writeFile(t, root, "team-a/file", "")
	bad := newSinkAt(t, root, "team-a", "file:///file/dir", "", "")
	if err := bad.Probe(ctx); err == nil {
		t.Error("Probe under a regular file succeeded")
	}
}

// A failed write leaves no temp file behind: here the rename fails because
// a directory occupies the target path.
func TestFailedWriteLeavesNoTempFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "team-a", "out")
	occupied := filepath.Join(dir, "east", "team-a", "apps.json")
	if err := os.MkdirAll(occupied, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(occupied, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _ := newSink(t, root, "", "")
	if _, err := s.Write(context.Background(), nsInv, envelope(nsInv, 1, exportedAt)); err == nil {
		t.Fatal("Write over a directory succeeded")
	}
	if got := listFiles(t, dir); len(got) != 1 || got[0] != "east/team-a/apps.json/keep" {
		t.Errorf("files = %v, want only the pre-existing one", got)
	}
}

// TestClustersShareADirectory: the default template puts each cluster's
// document in its own directory, so two clusters exporting same-named
// inventories into one directory keep both documents, and deleting one
// leaves the other.
func TestClustersShareADirectory(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	// Two servers (two sinks, as on two clusters) on one directory.
	east, dir := newSink(t, root, "", "")
	west, _ := newSink(t, root, "", "")
	eastInv := nsInv
	westInv := nsInv
	westInv.Cluster = "west"
	eastEnv := envelope(eastInv, 1, exportedAt, item("team-a", "x", "east"))
	westEnv := envelope(westInv, 1, exportedAt, item("team-a", "x", "west"), item("team-a", "y", "west"))
	if _, err := east.Write(ctx, eastInv, eastEnv); err != nil {
		t.Fatal(err)
	}
	if _, err := west.Write(ctx, westInv, westEnv); err != nil {
		t.Fatal(err)
	}
	if got, want := listFiles(t, dir), []string{"east/team-a/apps.json", "west/team-a/apps.json"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("files = %v, want %v", got, want)
	}
	for cluster, env := range map[string]*sink.Envelope{"east": eastEnv, "west": westEnv} {
		doc, err := os.ReadFile(filepath.Join(dir, cluster, "team-a", "apps.json"))
		if err != nil {
			t.Fatal(err)
		}
		header, err := sink.Header(doc, sink.JSON)
		if err != nil {
			t.Fatal(err)
		}
		if header.Checksum != env.Checksum || header.ItemCount != env.ItemCount || header.Cluster != cluster {
			t.Errorf("%s's document: header %+v, want checksum %s, %d items, cluster %s", cluster, header, env.Checksum, env.ItemCount, cluster)
		}
	}
	if err := east.Delete(ctx, eastInv); err != nil {
		t.Fatal(err)
	}
	if got := listFiles(t, dir); len(got) != 1 || got[0] != "west/team-a/apps.json" {
		t.Errorf("files after east's Delete = %v, want only west's", got)
	}
}

// TestClusterNameIsOneElement: a cluster name that is not one plain path
// element is refused before anything is written; a template without
// {cluster} does not need one.
func TestClusterNameIsOneElement(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	s, dir := newSink(t, root, "", "")
	for _, cluster := range []string{"", ".", "..", "a/b", `a\b`, "a\x00b"} {
		inv := nsInv
		inv.Cluster = cluster
		_, err := s.Write(ctx, inv, envelope(inv, 1, exportedAt))
		if !errors.Is(err, sink.ErrPermanent) || !strings.Contains(err.Error(), "cluster name") {
			t.Errorf("Write with cluster %q = %v, want a permanent error about the cluster name", cluster, err)
		}
		if err := s.Delete(ctx, inv); !errors.Is(err, sink.ErrPermanent) {
			t.Errorf("Delete with cluster %q = %v, want a permanent error", cluster, err)
		}
	}
	if got := listFiles(t, root); len(got) != 0 {
		t.Errorf("files = %v, want none", got)
	}

	plain := newSinkAt(t, root, "team-a", "file:///out", "", "{namespace}/{inventory}.{ext}")
	inv := nsInv
	inv.Cluster = ""
	if _, err := plain.Write(ctx, inv, envelope(inv, 1, exportedAt)); err != nil {
		t.Fatalf("Write without {cluster} and without a cluster name: %v", err)
	}
	if got := listFiles(t, dir); len(got) != 1 || got[0] != "team-a/apps.json" {
		t.Errorf("files = %v, want [team-a/apps.json]", got)
	}
}

// TestRegistered: the file type is built through sink.Snapshots from the
// server's --file-sink-root and the sink's namespace.
func TestRegistered(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	spec := &v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///out"}
	s, err := sink.Snapshots.Build(ctx, string(v1alpha1.SnapshotSinkFile), spec, sink.Params{Namespace: "team-b", FileSinkRoot: root})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.Write(ctx, nsInv, envelope(nsInv, 1, exportedAt)); err != nil {
		t.Fatal(err)
	}
	if got := listFiles(t, root); len(got) != 1 || got[0] != "team-b/out/east/team-a/apps.json" {
		t.Errorf("files = %v, want [team-b/out/east/team-a/apps.json]", got)
	}
	disabled, err := sink.Snapshots.Build(ctx, string(v1alpha1.SnapshotSinkFile), spec, sink.Params{Namespace: "team-b"})
	if !errors.Is(err, ErrDisabled) || disabled != nil {
		t.Errorf("Build without --file-sink-root = %v, %v; want ErrDisabled and no sink", disabled, err)
	}
}
