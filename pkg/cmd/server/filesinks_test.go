package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileSinkRootAndDataDir: the server refuses to start with a
// --file-sink-root that is --data-dir, lies inside it or holds it (also
// through a symlink), or holds its certificates; a directory of its own
// is fine.
func TestFileSinkRootAndDataDir(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	if err := os.MkdirAll(filepath.Join(data, "export"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(data, "export"), filepath.Join(base, "alias")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, root, certFile, want string
	}{
		{name: "off", root: ""},
		{name: "a directory of its own", root: filepath.Join(base, "files")},
		{name: "a directory of its own, not yet there", root: filepath.Join(base, "new", "files")},
		{name: "the data directory", root: data, want: "--data-dir"},
		{name: "inside the data directory", root: filepath.Join(data, "export"), want: "--data-dir"},
		{name: "inside the data directory, not yet there", root: filepath.Join(data, "files"), want: "--data-dir"},
		{name: "holding the data directory", root: base, want: "--data-dir"},
		{name: "the data directory through a symlink", root: filepath.Join(base, "alias", "files"), want: "--data-dir"},
		{name: "relative, resolving to the data directory", root: relative(t, data), want: "--data-dir"},
		{name: "/", root: "/", want: "--data-dir"},
		{name: "holding the serving key", root: filepath.Join(base, "files"), certFile: filepath.Join(base, "files", "tls.crt"), want: "--tls-cert-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := NewOptions()
			o.DataDir, o.FileSinkRoot = data, tc.root
			if tc.certFile != "" {
				o.Recommended.SecureServing.ServerCert.CertKey.CertFile = tc.certFile
				o.Recommended.SecureServing.ServerCert.CertKey.KeyFile = tc.certFile + ".key"
			}
			err := o.checkFileSinkRoot()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), "--file-sink-root") || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming --file-sink-root and %s", err, tc.want)
			}
		})
	}

	// prepareFileSinkRoot creates the directory, mode 0750, and returns it
	// resolved.
	o := NewOptions()
	o.DataDir, o.FileSinkRoot = data, filepath.Join(base, "made", "files")
	got, err := o.prepareFileSinkRoot()
	if err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(got)
	if err != nil || !info.IsDir() || info.Mode().Perm() != 0o750 || !filepath.IsAbs(got) {
		t.Errorf("prepared %s: %v, %v; want an absolute directory of mode 0750", got, info, err)
	}
}

func relative(t *testing.T, p string) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, p)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
