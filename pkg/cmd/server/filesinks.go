package server

import (
	"fmt"
	"os"
	"path/filepath"
)

// checkFileSinkRoot refuses a --file-sink-root that would let tenants'
// file sinks reach the server's own files. A sink of namespace N writes
// under DIR/N, so DIR must neither be --data-dir, nor lie inside it, nor
// hold it: the data directory keeps the embedded etcd's data and the git
// sinks' clones (export/git/<uid>), and a namespace named "export" or
// "member" would otherwise write into them. The same holds for the
// server's certificates and keys. Paths are compared with their symlinks
// resolved, as far as they exist.
func (o *Options) checkFileSinkRoot() error {
	if o.FileSinkRoot == "" {
		return nil
	}
	root, err := resolvePath(o.FileSinkRoot)
	if err != nil {
		return fmt.Errorf("--file-sink-root: %w", err)
	}
	dataDir, err := resolvePath(o.DataDir)
	if err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	if within(root, dataDir) || within(dataDir, root) {
		return fmt.Errorf("--file-sink-root %s must be outside --data-dir %s and must not hold it: the data directory keeps the embedded etcd's data and the git sinks' clones, which tenants' file sinks must not reach", o.FileSinkRoot, o.DataDir)
	}
	cert, etcd := o.Recommended.SecureServing.ServerCert, o.Recommended.Etcd.StorageConfig.Transport
	for _, f := range []struct{ flag, path string }{
		{"--cert-dir", cert.CertDirectory},
		{"--tls-cert-file", cert.CertKey.CertFile},
		{"--tls-private-key-file", cert.CertKey.KeyFile},
		{"--etcd-certfile", etcd.CertFile},
		{"--etcd-keyfile", etcd.KeyFile},
		{"--etcd-cafile", etcd.TrustedCAFile},
	} {
		if f.path == "" {
			continue
		}
		resolved, err := resolvePath(f.path)
		if err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
		if within(root, resolved) {
			return fmt.Errorf("--file-sink-root %s must not hold %s %s: tenants' file sinks could replace it", o.FileSinkRoot, f.flag, f.path)
		}
	}
	return nil
}

// prepareFileSinkRoot creates --file-sink-root (mode 0750: it holds every
// tenant's documents) and returns it absolute with symlinks resolved, or ""
// when file sinks are off.
func (o *Options) prepareFileSinkRoot() (string, error) {
	if o.FileSinkRoot == "" {
		return "", nil
	}
	if err := os.MkdirAll(o.FileSinkRoot, 0o750); err != nil {
		return "", fmt.Errorf("--file-sink-root: %w", err)
	}
	// Checked again now that the directory exists: a symlink in its path
	// may have pointed somewhere else than the flag's checks assumed.
	if err := o.checkFileSinkRoot(); err != nil {
		return "", err
	}
	return resolvePath(o.FileSinkRoot)
}

// resolvePath makes p absolute and resolves the symlinks of its longest
// existing prefix; what does not exist yet cannot be a symlink.
func resolvePath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for dir := abs; ; {
		if resolved, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(resolved, rest), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return abs, nil
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}

// within reports whether p is dir or lies under it; both are clean and
// absolute.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}
