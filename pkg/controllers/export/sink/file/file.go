// Package file implements the file snapshot sink: one document per
// inventory under a local directory (endpoint file:///absolute/dir),
// replaced atomically on every write.
//
// All file operations go through an os.Root opened on the directory, so
// neither a path template nor a symlink planted in the directory can make
// the sink write outside it.
package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// DefaultPathTemplate places each inventory's document in a directory per
// namespace.
const DefaultPathTemplate = "{namespace}/{inventory}.{ext}"

// ClusterNamespace stands in for the namespace of a ClusterInventory in
// paths.
const ClusterNamespace = "_cluster"

const (
	dirMode  fs.FileMode = 0o755
	fileMode fs.FileMode = 0o644
)

// Sink writes snapshot documents to files under one directory.
type Sink struct {
	dir          string
	pathTemplate string
	format       sink.Format

	// mu serializes all operations: Delete prunes empty directories, which
	// would race with a Write creating a file in one of them. Writes are
	// small, so one lock costs little.
	mu sync.Mutex
	// root is opened on first use, so that New only validates the spec and a
	// directory that cannot be created yet shows up as a Probe failure.
	root *os.Root
}

var _ sink.SnapshotSink = (*Sink)(nil)

// New validates the spec and returns the sink. It does not touch the
// file system.
func New(spec *v1alpha1.SnapshotSinkSpec) (*Sink, error) {
	if spec == nil {
		return nil, fmt.Errorf("file sink: no spec: %w", sink.ErrPermanent)
	}
	dir, err := parseEndpoint(spec.Endpoint)
	if err != nil {
		return nil, err
	}
	format := sink.Format(spec.Serialization.Format)
	switch format {
	case "", sink.JSON, sink.YAML, sink.NDJSON:
	default:
		return nil, fmt.Errorf("file sink: unknown serialization format %q: %w", format, sink.ErrPermanent)
	}
	tmpl := DefaultPathTemplate
	if spec.File != nil && spec.File.PathTemplate != "" {
		tmpl = spec.File.PathTemplate
	}
	s := &Sink{dir: dir, pathTemplate: tmpl, format: format}
	// Catch a template that can never yield a valid path before the first
	// export, with sample values.
	if _, err := s.path(sink.Inventory{Namespace: "ns", Name: "name"}); err != nil {
		return nil, err
	}
	return s, nil
}

// parseEndpoint accepts file:///absolute/dir only and returns the cleaned
// directory.
func parseEndpoint(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("file sink: endpoint is not a URL: %w", sink.ErrPermanent)
	}
	if u.Scheme != "file" || u.Opaque != "" || u.User != nil || u.Host != "" ||
		u.RawQuery != "" || u.Fragment != "" || !path.IsAbs(u.Path) {
		return "", fmt.Errorf("file sink: endpoint %q must be file:///absolute/dir: %w", endpoint, sink.ErrPermanent)
	}
	return filepath.Clean(u.Path), nil
}

// path is the inventory's document path relative to the directory.
func (s *Sink) path(inv sink.Inventory) (string, error) {
	ns := inv.Namespace
	if ns == "" {
		ns = ClusterNamespace
	}
	p := sink.Expand(s.pathTemplate, map[string]string{
		"namespace": ns,
		"inventory": inv.Name,
		"ext":       s.format.Ext(),
	})
	if err := checkPath(p); err != nil {
		return "", fmt.Errorf("file sink: pathTemplate %q gives %q: %w: %w", s.pathTemplate, p, err, sink.ErrPermanent)
	}
	return path.Clean(p), nil
}

// checkPath rejects paths that could leave the directory. os.Root enforces
// this as well; checking here gives a clear error instead of a failed
// open.
func checkPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case strings.HasPrefix(p, "/") || filepath.IsAbs(p):
		return errors.New("path is absolute")
	case strings.ContainsRune(p, 0):
		return errors.New("path contains NUL")
	case strings.HasSuffix(p, "/"):
		return errors.New("path names a directory")
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return errors.New("path contains a .. element")
		}
	}
	if c := path.Clean(p); c == "." || !filepath.IsLocal(c) {
		return errors.New("path is not inside the directory")
	}
	return nil
}

// openRoot creates the directory if needed and opens the Root once.
// Callers hold mu.
func (s *Sink) openRoot() (*os.Root, error) {
	if s.root != nil {
		return s.root, nil
	}
	if err := os.MkdirAll(s.dir, dirMode); err != nil {
		return nil, fmt.Errorf("file sink: creating directory: %w", err)
	}
	root, err := os.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("file sink: opening directory: %w", err)
	}
	s.root = root
	return root, nil
}

// Write replaces the inventory's file with the encoded envelope: a temp
// file in the target's directory is written, synced and renamed over the
// target, so readers see the old or the new document, never a part.
func (s *Sink) Write(ctx context.Context, inv sink.Inventory, env *sink.Envelope) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p, err := s.path(inv)
	if err != nil {
		return false, err
	}
	doc, err := sink.Encode(env, s.format)
	if err != nil {
		return false, fmt.Errorf("file sink: encoding: %w: %w", err, sink.ErrPermanent)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := s.openRoot()
	if err != nil {
		return false, err
	}
	parent := path.Dir(p)
	if err := root.MkdirAll(parent, dirMode); err != nil {
		return false, fmt.Errorf("file sink: creating %s: %w", parent, err)
	}
	if err := writeAtomic(root, p, doc); err != nil {
		return false, fmt.Errorf("file sink: writing %s: %w", p, err)
	}
	return true, nil
}

// writeAtomic writes doc to name via a temp file and a rename, and syncs
// the parent directory so the rename survives a crash.
func writeAtomic(root *os.Root, name string, doc []byte) (err error) {
	tmp, f, err := createTemp(root, name)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = root.Remove(tmp)
		}
	}()
	if _, err = f.Write(doc); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = root.Rename(tmp, name); err != nil {
		return err
	}
	return syncDir(root, path.Dir(name))
}

// createTemp creates a new hidden file next to name. The leading dot and
// the trailing .tmp keep it out of globs like *.json that readers use.
func createTemp(root *os.Root, name string) (string, *os.File, error) {
	dir, base := path.Split(name)
	for range 10 {
		tmp := dir + "." + base + "." + randomSuffix() + ".tmp"
		f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fileMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return tmp, f, err
	}
	return "", nil, errors.New("cannot create a unique temp file")
}

func randomSuffix() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func syncDir(root *os.Root, dir string) error {
	d, err := root.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes the inventory's file and the directories it leaves
// empty, up to the sink's directory itself.
func (s *Sink) Delete(ctx context.Context, inv sink.Inventory) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := s.path(inv)
	if err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := s.openRoot()
	if err != nil {
		return err
	}
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file sink: removing %s: %w", p, err)
	}
	// Remove fails on a directory that still holds files, which ends the
	// walk at the first directory another document (or anything else) uses.
	dir := path.Dir(p)
	for dir != "." {
		if err := root.Remove(dir); err != nil {
			break
		}
		dir = path.Dir(dir)
	}
	if err := syncDir(root, dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("file sink: syncing %s: %w", dir, err)
	}
	return nil
}

// Probe checks that the directory exists (creating it if needed) and that
// a file can be created in it.
func (s *Sink) Probe(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := s.openRoot()
	if err != nil {
		return err
	}
	tmp, f, err := createTemp(root, "kollect-probe")
	if err != nil {
		return fmt.Errorf("file sink: directory is not writable: %w", err)
	}
	cerr := f.Close()
	if err := root.Remove(tmp); err != nil {
		return fmt.Errorf("file sink: removing probe file: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("file sink: closing probe file: %w", cerr)
	}
	return nil
}

// Close releases the directory handle.
func (s *Sink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root == nil {
		return nil
	}
	err := s.root.Close()
	s.root = nil
	return err
}
