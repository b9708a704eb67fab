// Package file implements the file snapshot sink: one document per
// inventory under a directory of the server, replaced atomically on every
// write.
//
// File sinks exist only when the server runs with --file-sink-root DIR.
// A sink's endpoint path is then relative to DIR/<sink namespace>
// (file:///reports is DIR/team-a/reports), and every file operation goes
// through an os.Root opened on that namespace's directory, so that neither
// an endpoint, a path template nor a symlink planted in the directory can
// make the sink write outside it.
package file

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
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

// DefaultPathTemplate (the API's default) places each inventory's document
// in a directory per cluster and namespace, so that the servers of many
// clusters can share one directory without overwriting each other's
// documents.
const DefaultPathTemplate = v1alpha1.DefaultPathTemplate

// ClusterNamespace stands in for the namespace of a ClusterInventory in
// paths.
const ClusterNamespace = "_cluster"

// Directories are not world-readable: DIR/<namespace> holds one tenant's
// documents, and whoever reads them on the machine shares the server's
// group (the chart's fsGroup).
const (
	dirMode  fs.FileMode = 0o750
	fileMode fs.FileMode = 0o640
)

// ErrDisabled is returned for every file sink of a server without
// --file-sink-root: there is no directory it may write to.
var ErrDisabled = fmt.Errorf("file sinks are disabled: the server runs without --file-sink-root: %w", sink.ErrPermanent)

// Location is where the sinks of one namespace may write.
type Location struct {
	// Root is the server's --file-sink-root; empty means file sinks are
	// disabled.
	Root string
	// Namespace is the sink's namespace: DIR/<Namespace> is its directory.
	Namespace string
}

// Sink writes snapshot documents to files under one directory.
type Sink struct {
	loc Location
	// dir is the endpoint's directory relative to DIR/<namespace>, "."
	// for the namespace's directory itself.
	dir          string
	pathTemplate string
	format       sink.Format

	// mu serializes all operations: Delete prunes empty directories, which
	// would race with a Write creating a file in one of them. Writes are
	// small, so one lock costs little.
	mu sync.Mutex
	// root is the endpoint's directory, opened on first use, so that New
	// only validates the spec and a directory that cannot be created yet
	// shows up as a Probe failure.
	root *os.Root
	// synced holds, per document path, the checksum and generation of the
	// last document this Sink wrote there and made durable, rename
	// included. Rewriting the same (a due re-export: only exportedAt
	// moves) skips the directory sync: a crash that loses that rename
	// leaves the same items.
	synced map[string]string
}

var _ sink.SnapshotSink = (*Sink)(nil)

func init() {
	sink.Snapshots.Register(string(v1alpha1.SnapshotSinkFile), build)
}

// build is the file type's sink.Factory: the sink writes under
// FileSinkRoot/<the sink's namespace>.
func build(_ context.Context, spec *v1alpha1.SnapshotSinkSpec, p sink.Params) (sink.SnapshotSink, error) {
	s, err := New(spec, Location{Root: p.FileSinkRoot, Namespace: p.Namespace})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// New validates the spec and returns the sink. It does not touch the
// file system.
func New(spec *v1alpha1.SnapshotSinkSpec, loc Location) (*Sink, error) {
	if spec == nil {
		return nil, fmt.Errorf("file sink: no spec: %w", sink.ErrPermanent)
	}
	if loc.Root == "" {
		return nil, ErrDisabled
	}
	// Namespaces are DNS labels; anything else could name a path.
	if !filepath.IsLocal(loc.Namespace) || strings.ContainsAny(loc.Namespace, `/\`) || loc.Namespace == "." {
		return nil, fmt.Errorf("file sink: namespace %q cannot name a directory: %w", loc.Namespace, sink.ErrPermanent)
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
	s := &Sink{loc: loc, dir: dir, pathTemplate: tmpl, format: format}
	// Catch a template that can never yield a valid path before the first
	// export, with sample values.
	if _, err := s.path(sink.Inventory{Cluster: "cluster", Namespace: "ns", Name: "name"}); err != nil {
		return nil, err
	}
	return s, nil
}

// parseEndpoint accepts file:///dir only and returns dir relative to the
// namespace's directory, cleaned: "." for file:///. Sinks admitted before
// --file-sink-root existed named absolute directories of the server; they
// now name the same path under DIR/<namespace>, never the old place.
func parseEndpoint(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", fmt.Errorf("file sink: endpoint is not a URL: %w", sink.ErrPermanent)
	}
	if u.Scheme != "file" || u.Opaque != "" || u.User != nil || u.Host != "" ||
		u.RawQuery != "" || u.Fragment != "" || !path.IsAbs(u.Path) {
		return "", fmt.Errorf("file sink: endpoint %q must be file:///dir: %w", endpoint, sink.ErrPermanent)
	}
	if err := checkDir(u.Path); err != nil {
		return "", fmt.Errorf("file sink: endpoint %q: %w: %w", endpoint, err, sink.ErrPermanent)
	}
	if rel := strings.TrimLeft(path.Clean(u.Path), "/"); rel != "" {
		return rel, nil
	}
	return ".", nil
}

// checkDir rejects an endpoint path that could leave the namespace's
// directory. Admission refuses these and more; this covers sinks admitted
// by older servers.
func checkDir(p string) error {
	switch {
	case strings.ContainsRune(p, 0):
		return errors.New("path contains NUL")
	case strings.Contains(p, `\`):
		return errors.New("path contains a backslash")
	}
	for _, elem := range strings.Split(p, "/") {
		if elem == ".." {
			return errors.New("path contains a .. element")
		}
	}
	if rel := strings.TrimLeft(path.Clean(p), "/"); rel != "" && !filepath.IsLocal(rel) {
		return errors.New("path is not inside the namespace's directory")
	}
	return nil
}

// path is the inventory's document path relative to the directory.
func (s *Sink) path(inv sink.Inventory) (string, error) {
	ns := inv.Namespace
	if ns == "" {
		ns = ClusterNamespace
	}
	if strings.Contains(s.pathTemplate, "{cluster}") {
		if err := checkSegment(inv.Cluster); err != nil {
			return "", fmt.Errorf("file sink: the cluster name %q cannot be a path element: %w: %w", inv.Cluster, err, sink.ErrPermanent)
		}
	}
	p := sink.Expand(s.pathTemplate, map[string]string{
		"cluster":   inv.Cluster,
		"namespace": ns,
		"inventory": inv.Name,
		"ext":       s.format.Ext(),
	})
	if err := checkPath(p); err != nil {
		return "", fmt.Errorf("file sink: pathTemplate %q gives %q: %w: %w", s.pathTemplate, p, err, sink.ErrPermanent)
	}
	return path.Clean(p), nil
}

// checkSegment accepts a value that stands for exactly one path element.
// The server's --cluster-name is a DNS label; checking here keeps a value
// from elsewhere from moving a document into another cluster's directory.
func checkSegment(v string) error {
	switch {
	case v == "":
		return errors.New("it is empty")
	case v == "." || v == "..":
		return errors.New("it is . or ..")
	case strings.ContainsAny(v, "/\\\x00"):
		return errors.New("it contains a slash, backslash or NUL")
	}
	return nil
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

// openRoot opens the endpoint's directory once, creating it and the
// namespace's directory as needed. Callers hold mu.
func (s *Sink) openRoot() (*os.Root, error) {
	if s.root != nil {
		return s.root, nil
	}
	top, err := os.OpenRoot(s.loc.Root)
	if err != nil {
		// The error would show the server's path to the tenant: say which
		// flag to look at instead.
		return nil, fmt.Errorf("file sink: the server's --file-sink-root cannot be opened: %w", withoutPath(err))
	}
	defer top.Close()
	ns, err := openNamespace(top, s.loc.Namespace)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if err := ns.MkdirAll(s.dir, dirMode); err != nil {
		return nil, fmt.Errorf("file sink: creating %s: %w", s.dir, err)
	}
	root, err := ns.OpenRoot(s.dir)
	if err != nil {
		return nil, fmt.Errorf("file sink: opening %s: %w", s.dir, withoutPath(err))
	}
	s.root = root
	return root, nil
}

// openNamespace opens DIR/<namespace>, creating it, and makes sure that
// what it opened is that directory itself. os.Root follows symlinks that
// stay inside DIR: a symlink DIR/team-a -> team-b would hand team-a's sinks
// team-b's directory. The check runs after the open, on the opened handle,
// so the entry cannot be swapped between check and use.
func openNamespace(top *os.Root, namespace string) (*os.Root, error) {
	if err := top.Mkdir(namespace, dirMode); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("file sink: creating the directory of namespace %s: %w", namespace, withoutPath(err))
	}
	ns, err := top.OpenRoot(namespace)
	if err != nil {
		return nil, fmt.Errorf("file sink: opening the directory of namespace %s: %w: %w", namespace, withoutPath(err), sink.ErrPermanent)
	}
	entry, lerr := top.Lstat(namespace)
	opened, serr := ns.Stat(".")
	if lerr != nil || serr != nil || !entry.IsDir() || !os.SameFile(entry, opened) {
		_ = ns.Close()
		return nil, fmt.Errorf("file sink: the directory of namespace %s is not a plain directory (a symlink?); refusing to write through it: %w", namespace, sink.ErrPermanent)
	}
	return ns, nil
}

// withoutPath drops the path from a file system error: some name the
// server's directories in full, which is not for tenants to read.
func withoutPath(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return fmt.Errorf("%s: %w", pe.Op, pe.Err)
	}
	return err
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
	version := documentVersion(env)
	durable := s.synced[p] != version
	err = writeAtomic(root, p, doc, durable)
	if errors.Is(err, fs.ErrNotExist) {
		// The first document in its directory, or someone removed it.
		durable = true
		if root, err = s.makeParent(root, p); err != nil {
			return false, err
		}
		err = writeAtomic(root, p, doc, durable)
	}
	if err != nil {
		delete(s.synced, p)
		return false, fmt.Errorf("file sink: writing %s: %w", p, err)
	}
	if durable {
		if s.synced == nil {
			s.synced = map[string]string{}
		}
		s.synced[p] = version
	}
	return true, nil
}

// makeParent creates the directories of the document p. When the sink's
// own directory was removed too, the handle on it names nothing: it is
// opened (and created) again, as on the first write.
func (s *Sink) makeParent(root *os.Root, p string) (*os.Root, error) {
	parent := path.Dir(p)
	err := root.MkdirAll(parent, dirMode)
	if errors.Is(err, fs.ErrNotExist) {
		_ = s.root.Close()
		s.root = nil
		if root, err = s.openRoot(); err != nil {
			return nil, err
		}
		err = root.MkdirAll(parent, dirMode)
	}
	if err != nil {
		return nil, fmt.Errorf("file sink: creating %s: %w", parent, err)
	}
	return root, nil
}

// documentVersion identifies what a document says besides exportedAt: the
// items (checksum: keys and content hashes; an item's target and source
// are in its key), the generation, and each item's profile, which neither
// covers.
func documentVersion(env *sink.Envelope) string {
	h := fnv.New64a()
	for _, it := range env.Items {
		h.Write([]byte(it.Profile))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%s/%d/%x", env.Checksum, env.Generation, h.Sum64())
}

// writeAtomic writes doc to name via a temp file and a rename, and with
// durable syncs the parent directory so the rename survives a crash. The
// parent is opened once and every step names a file in it: each path an
// os.Root resolves costs a system call per element, and a due re-export
// (every interval, for every inventory) would resolve it three times.
func writeAtomic(root *os.Root, name string, doc []byte, durable bool) (err error) {
	dir, base := path.Split(name)
	parent := root
	if dir != "" {
		if parent, err = root.OpenRoot(path.Clean(dir)); err != nil {
			return err
		}
		defer parent.Close()
	}
	tmp, f, err := createTemp(parent, base)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = parent.Remove(tmp)
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
	if err = parent.Rename(tmp, base); err != nil {
		return err
	}
	if !durable {
		return nil
	}
	return syncDir(parent, ".")
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
// empty, up to the endpoint's directory itself.
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
	delete(s.synced, p)
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

// Probe checks that the endpoint's directory exists (creating it if
// needed) and that a file can be created in it.
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
