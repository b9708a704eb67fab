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
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

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
	// docs holds, per document path, the last document this Sink wrote
	// there.
	docs map[string]writtenDoc
}

// writtenDoc is what a Sink remembers of the last document it wrote at a
// path: a due re-export of the same version leaves the document when it
// is still that very file, unchanged.
type writtenDoc struct {
	// version is the documentVersion of what the document says.
	version [sha256.Size]byte
	// file is the document as the write left it (after the rename): what
	// sameFile compares.
	file fs.FileInfo
	// digest is the SHA-256 of its bytes.
	digest [sha256.Size]byte
}

var (
	_ sink.SnapshotSink = (*Sink)(nil)
	_ sink.Successor    = (*Sink)(nil)
)

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
		if s.rootInPlace() {
			return s.root, nil
		}
		// The directory was moved or replaced: its handle would write
		// where the endpoint no longer leads.
		_ = s.root.Close()
		s.root = nil
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
	root, err := ns.OpenRoot(asDir(s.dir))
	if err != nil {
		return nil, fmt.Errorf("file sink: opening %s: %w", s.dir, withoutPath(err))
	}
	s.root = root
	return root, nil
}

// rootInPlace reports whether the endpoint's path still leads to the
// directory the sink holds open. It only compares: the path, followed
// outside os.Root, is never written or read through.
func (s *Sink) rootInPlace() bool {
	want, err := os.Stat(filepath.Join(s.loc.Root, s.loc.Namespace, s.dir))
	if err != nil {
		return false
	}
	held, err := s.root.Stat(".")
	return err == nil && os.SameFile(want, held)
}

// asDir names the directory p so that opening it fails at once when p is
// anything else: os.Root opens a path's last element without O_DIRECTORY,
// and a FIFO planted there would make the open wait for a writer.
func asDir(p string) string {
	return p + "/."
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
	ns, err := top.OpenRoot(asDir(namespace))
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
//
// A due re-export of an unchanged payload (the same items, profiles,
// generation and inventory; only exportedAt would move) that finds the
// document this Sink last wrote still in place, byte for byte, writes
// nothing and reports written false, as a git sink makes no commit: the
// document keeps the exportedAt of the write that put this payload there.
// A document removed, replaced or edited since is written again.
func (s *Sink) Write(ctx context.Context, inv sink.Inventory, env *sink.Envelope) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	p, err := s.path(inv)
	if err != nil {
		return false, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	root, err := s.openRoot()
	if err != nil {
		return false, err
	}
	version := documentVersion(inv, env)
	if last, ok := s.docs[p]; ok && last.version == version && holds(root, p, last) {
		return false, nil
	}
	doc, err := sink.Encode(env, s.format)
	if err != nil {
		return false, fmt.Errorf("file sink: encoding: %w: %w", err, sink.ErrPermanent)
	}
	delete(s.docs, p)
	err = writeAtomic(root, p, doc)
	if errors.Is(err, fs.ErrNotExist) {
		// The first document in its directory, or someone removed it.
		if root, err = s.makeParent(root, p); err != nil {
			return false, err
		}
		err = writeAtomic(root, p, doc)
	}
	if err != nil {
		return false, fmt.Errorf("file sink: writing %s: %w", p, err)
	}
	// What the write left: a document that cannot be looked at is not
	// remembered, and the next re-export writes it again.
	if file, err := root.Lstat(p); err == nil {
		if s.docs == nil {
			s.docs = map[string]writtenDoc{}
		}
		s.docs[p] = writtenDoc{version: version, file: file, digest: sha256.Sum256(doc)}
	}
	return true, nil
}

// Succeed takes over which documents prev wrote, when prev wrote to the
// same place in the same form: a client rebuilt by age
// (--sink-client-max-age) then still finds its documents in place.
func (s *Sink) Succeed(prev sink.Prober) {
	p, ok := prev.(*Sink)
	if !ok || p == s || p.loc != s.loc || p.dir != s.dir || p.pathTemplate != s.pathTemplate || p.format != s.format {
		return
	}
	p.mu.Lock()
	docs := maps.Clone(p.docs)
	p.mu.Unlock()
	s.mu.Lock()
	s.docs = docs
	s.mu.Unlock()
}

// holds reports whether the document at p is still the file doc describes,
// as it was written: the same inode (not a copy, a symlink or another
// writer's file put in its place), mode, size and modification time, and
// the same bytes. Any doubt says no: the caller then writes it again.
func holds(root *os.Root, p string, doc writtenDoc) bool {
	entry, err := root.Lstat(p)
	if err != nil || !sameFile(entry, doc.file) {
		return false
	}
	f, err := openDocument(root, p)
	if err != nil {
		return false
	}
	defer f.Close()
	if opened, err := f.Stat(); err != nil || !sameFile(opened, doc.file) {
		return false
	}
	h := sha256.New()
	if n, err := io.Copy(h, io.LimitReader(f, doc.file.Size()+1)); err != nil || n != doc.file.Size() {
		return false
	}
	return [sha256.Size]byte(h.Sum(nil)) == doc.digest
}

// openDocument opens p for reading. O_NONBLOCK: should a FIFO be swapped
// in after the caller looked, the open must not wait for a writer, with
// the sink's lock held.
func openDocument(root *os.Root, p string) (*os.File, error) {
	return root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// sameFile reports whether a and b describe the same regular file in the
// same state: nothing about it changed in between, its owner and links
// included (sameInodeState).
func sameFile(a, b fs.FileInfo) bool {
	return a.Mode().IsRegular() && os.SameFile(a, b) && a.Mode() == b.Mode() &&
		a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && sameInodeState(a, b)
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
// inventory it describes, the generation, and every item's key, target,
// profile and content hash (which covers its source, attributes and
// object).
func documentVersion(inv sink.Inventory, env *sink.Envelope) [sha256.Size]byte {
	h := sha256.New()
	field := func(v string) {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	for _, v := range []string{env.SchemaVersion, env.Cluster, inv.Cluster, inv.Kind, inv.Namespace, inv.Name, env.Checksum, strconv.FormatInt(env.Generation, 10)} {
		field(v)
	}
	for _, it := range env.Items {
		for _, v := range []string{it.Key(), it.Target, it.Profile, it.Hash} {
			field(v)
		}
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// writeAtomic writes doc to name via a temp file and a rename, and syncs
// the parent directory so the rename survives a crash. The parent is
// opened once and every step names a file in it: each path an os.Root
// resolves costs a system call per element.
func writeAtomic(root *os.Root, name string, doc []byte) (err error) {
	dir, base := path.Split(name)
	parent := root
	if dir != "" {
		if parent, err = root.OpenRoot(asDir(path.Clean(dir))); err != nil {
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
	d, err := root.Open(asDir(dir))
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
	delete(s.docs, p)
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
