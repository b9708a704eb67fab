// Package image tests what `make image` builds: it runs hack/build-image.sh
// into a temporary directory, reads the OCI image layout it wrote with
// nothing but the standard library (an independent reader: no
// go-containerregistry, which wrote it), verifies every blob against its
// descriptor, unpacks the layer and runs the binary from it.
//
// A cold build of the static binary takes several minutes on 2 cores; run
// with -timeout 30m on a cold build cache.
package image

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/localcluster"
)

const (
	defaultRepository = "ghcr.io/kollect-dev/kollect-apiserver"
	nonroot           = 65532
	binaryName        = "kollect-apiserver"
	dataDir           = "var/lib/kollect"

	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar"
	mediaTypeLayerGz  = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// The parts of the OCI image spec the test reads.
type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform,omitempty"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      time.Time `json:"created"`
	OS           string    `json:"os"`
	Architecture string    `json:"architecture"`
	Config       struct {
		User         string              `json:"User"`
		Entrypoint   []string            `json:"Entrypoint"`
		Cmd          []string            `json:"Cmd"`
		WorkingDir   string              `json:"WorkingDir"`
		Volumes      map[string]struct{} `json:"Volumes"`
		ExposedPorts map[string]struct{} `json:"ExposedPorts"`
		Labels       map[string]string   `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// image is an OCI image layout read and verified.
type image struct {
	ManifestDigest string
	Descriptor     descriptor
	Manifest       manifest
	ConfigDigest   string
	Config         imageConfig
	// Rootfs is where the layers were unpacked; Headers holds each
	// entry's tar header by its path in the image ("kollect-apiserver",
	// "var/lib/kollect"), for what unpacking as a normal user cannot
	// reproduce (owners).
	Rootfs  string
	Headers map[string]*tar.Header
}

func TestImage(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatalf("finding the repository root: %v", err)
	}
	appVersion := chartAppVersion(t, root)
	ref := defaultRepository + ":" + appVersion

	// 1. The image as `make image` builds it, IMAGE left to its default.
	out := t.TempDir()
	buildImage(t, root, map[string]string{"OUT": out})
	img := readLayout(t, filepath.Join(out, "oci"), t.TempDir())

	t.Run("layout", func(t *testing.T) {
		d := img.Descriptor
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != runtime.GOARCH {
			t.Errorf("index.json platform = %+v, want linux/%s", d.Platform, runtime.GOARCH)
		}
		if got := d.Annotations["org.opencontainers.image.ref.name"]; got != appVersion {
			t.Errorf("index.json org.opencontainers.image.ref.name = %q, want the tag %q", got, appVersion)
		}
		if got := d.Annotations["io.containerd.image.name"]; got != ref {
			t.Errorf("index.json io.containerd.image.name = %q, want %q", got, ref)
		}
		if len(img.Manifest.Layers) != 1 {
			t.Errorf("the image has %d layers, want 1", len(img.Manifest.Layers))
		}
	})

	t.Run("config", func(t *testing.T) {
		c := img.Config
		if c.OS != "linux" || c.Architecture != runtime.GOARCH {
			t.Errorf("config os/architecture = %s/%s, want linux/%s", c.OS, c.Architecture, runtime.GOARCH)
		}
		if c.Config.User != "65532:65532" {
			t.Errorf("config User = %q, want \"65532:65532\" (non-root)", c.Config.User)
		}
		if want := []string{"/" + binaryName}; !slices.Equal(c.Config.Entrypoint, want) {
			t.Errorf("config Entrypoint = %q, want %q", c.Config.Entrypoint, want)
		}
		if len(c.Config.Cmd) != 0 {
			t.Errorf("config Cmd = %q, want none", c.Config.Cmd)
		}
		if c.Config.WorkingDir != "/" {
			t.Errorf("config WorkingDir = %q, want /", c.Config.WorkingDir)
		}
		if _, ok := c.Config.Volumes["/"+dataDir]; !ok || len(c.Config.Volumes) != 1 {
			t.Errorf("config Volumes = %v, want only /%s", c.Config.Volumes, dataDir)
		}
		if _, ok := c.Config.ExposedPorts["8443/tcp"]; !ok {
			t.Errorf("config ExposedPorts = %v, want 8443/tcp", c.Config.ExposedPorts)
		}
		for k, want := range map[string]string{
			"org.opencontainers.image.title":   binaryName,
			"org.opencontainers.image.version": appVersion,
		} {
			if got := c.Config.Labels[k]; got != want {
				t.Errorf("label %s = %q, want %q", k, got, want)
			}
		}
		if c.Config.Labels["org.opencontainers.image.source"] == "" {
			t.Errorf("label org.opencontainers.image.source is missing")
		}
	})

	t.Run("files", func(t *testing.T) {
		bin := img.Headers[binaryName]
		switch {
		case bin == nil:
			t.Fatalf("the image has no /%s", binaryName)
		case bin.Typeflag != tar.TypeReg:
			t.Errorf("/%s is of tar type %q, want a regular file", binaryName, bin.Typeflag)
		case bin.Uid != 0 || bin.Gid != 0:
			t.Errorf("/%s is owned by %d:%d, want 0:0 (the server, running as %d, must not be able to replace it)", binaryName, bin.Uid, bin.Gid, nonroot)
		}
		if bin != nil && bin.Mode&0o7777 != 0o755 {
			t.Errorf("/%s has mode %o, want 755", binaryName, bin.Mode&0o7777)
		}
		if d := img.Headers[dataDir]; d == nil || d.Typeflag != tar.TypeDir {
			t.Errorf("the image has no directory /%s (the --data-dir volume)", dataDir)
		} else if d.Uid != nonroot || d.Gid != nonroot {
			t.Errorf("/%s is owned by %d:%d, want %d:%d (writable by the server)", dataDir, d.Uid, d.Gid, nonroot, nonroot)
		}
		if d := img.Headers["tmp"]; d == nil || d.Typeflag != tar.TypeDir {
			t.Errorf("the image has no directory /tmp")
		} else if d.Mode&0o7777 != 0o1777 {
			t.Errorf("/tmp has mode %o, want 1777", d.Mode&0o7777)
		}
		for file, line := range map[string]string{
			"etc/passwd": "nonroot:x:65532:65532:",
			"etc/group":  "nonroot:x:65532:",
		} {
			b, err := os.ReadFile(filepath.Join(img.Rootfs, filepath.FromSlash(file)))
			if err != nil {
				t.Errorf("reading /%s of the image: %v", file, err)
			} else if !hasLinePrefix(string(b), line) {
				t.Errorf("/%s has no line starting %q:\n%s", file, line, b)
			}
		}
		for name, h := range img.Headers {
			if h.ModTime.Unix() != img.Config.Created.Unix() {
				t.Errorf("/%s has time %v, want the image's %v (reproducible)", name, h.ModTime.UTC(), img.Config.Created)
				break
			}
		}
	})

	binPath := filepath.Join(img.Rootfs, binaryName)
	t.Run("static", func(t *testing.T) {
		f, err := elf.Open(binPath)
		if err != nil {
			t.Fatalf("/%s is not an ELF binary: %v", binaryName, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("/%s has a PT_INTERP program header: it is dynamically linked and cannot run FROM scratch", binaryName)
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			t.Errorf("reading DT_NEEDED of /%s: %v", binaryName, err)
		} else if len(libs) > 0 {
			t.Errorf("/%s needs shared libraries %q (DT_NEEDED); want none", binaryName, libs)
		}
	})

	t.Run("version", func(t *testing.T) {
		stdout := runBinary(t, binPath, "--version")
		if want := "kollect-apiserver " + appVersion + "\n"; stdout != want {
			t.Errorf("kollect-apiserver --version printed %q, want %q (the appVersion of charts/kollect/Chart.yaml)", stdout, want)
		}
		var raw struct {
			Version, BuildDate string
		}
		stdout = runBinary(t, binPath, "--version=raw")
		if err := json.Unmarshal([]byte(stdout), &raw); err != nil {
			t.Fatalf("kollect-apiserver --version=raw printed no JSON (%v):\n%s", err, stdout)
		}
		if raw.Version != appVersion {
			t.Errorf("--version=raw version = %q, want %q", raw.Version, appVersion)
		}
		if want := img.Config.Created.UTC().Format(time.RFC3339); raw.BuildDate != want {
			t.Errorf("--version=raw buildDate = %q, want the image's creation time %q", raw.BuildDate, want)
		}
	})

	t.Run("help", func(t *testing.T) {
		stdout := runBinary(t, binPath, "--help")
		for _, flag := range []string{"--data-dir", "--secure-port", "--etcd-servers", "--version"} {
			if !strings.Contains(stdout, flag) {
				t.Errorf("kollect-apiserver --help does not mention %s:\n%s", flag, stdout)
			}
		}
	})

	t.Run("oci-archive", func(t *testing.T) {
		// The archive is the same layout: unpack it and read it again.
		dir := t.TempDir()
		f, err := os.Open(filepath.Join(out, "kollect-apiserver.oci.tar"))
		if err != nil {
			t.Fatalf("opening the OCI archive: %v", err)
		}
		defer f.Close()
		if _, err := untar(f, dir); err != nil {
			t.Fatalf("unpacking kollect-apiserver.oci.tar: %v", err)
		}
		again := readLayout(t, dir, t.TempDir())
		if again.ManifestDigest != img.ManifestDigest {
			t.Errorf("kollect-apiserver.oci.tar holds manifest %s, oci/ holds %s", again.ManifestDigest, img.ManifestDigest)
		}
	})

	t.Run("docker-archive", func(t *testing.T) {
		checkDockerArchive(t, filepath.Join(out, "kollect-apiserver.docker.tar"), ref, img)
	})

	// 2. The same binary again, into another directory, at the same time:
	// the same image, byte for byte. (The binary is not rebuilt: other work
	// in the tree would change it.)
	t.Run("reproducible", func(t *testing.T) {
		out2 := t.TempDir()
		buildImage(t, root, map[string]string{
			"OUT":               out2,
			"BINARY":            filepath.Join(out, binaryName),
			"SOURCE_DATE_EPOCH": strconv.FormatInt(img.Config.Created.Unix(), 10),
		})
		again := readLayout(t, filepath.Join(out2, "oci"), t.TempDir())
		if again.ManifestDigest != img.ManifestDigest {
			t.Errorf("two builds of the same binary gave manifests %s and %s", img.ManifestDigest, again.ManifestDigest)
		}
		for _, name := range []string{"kollect-apiserver.oci.tar", "kollect-apiserver.docker.tar"} {
			if a, b := fileDigest(t, filepath.Join(out, name)), fileDigest(t, filepath.Join(out2, name)); a != b {
				t.Errorf("two builds of the same binary gave different %s: %s and %s", name, a, b)
			}
		}
	})

	// 3. IMAGE names the image everywhere.
	t.Run("IMAGE", func(t *testing.T) {
		const custom = "registry.example:5000/team/kollect-apiserver:v9.9.9-test"
		out3 := t.TempDir()
		buildImage(t, root, map[string]string{
			"OUT":    out3,
			"BINARY": filepath.Join(out, binaryName),
			"IMAGE":  custom,
		})
		other := readLayout(t, filepath.Join(out3, "oci"), t.TempDir())
		if got := other.Descriptor.Annotations["io.containerd.image.name"]; got != custom {
			t.Errorf("index.json io.containerd.image.name = %q, want %q", got, custom)
		}
		if got := other.Descriptor.Annotations["org.opencontainers.image.ref.name"]; got != "v9.9.9-test" {
			t.Errorf("index.json org.opencontainers.image.ref.name = %q, want v9.9.9-test", got)
		}
		if got := other.Config.Config.Labels["org.opencontainers.image.version"]; got != "v9.9.9-test" {
			t.Errorf("label org.opencontainers.image.version = %q, want v9.9.9-test", got)
		}
		checkDockerArchive(t, filepath.Join(out3, "kollect-apiserver.docker.tar"), custom, other)
	})
}

// chartAppVersion reads appVersion from charts/kollect/Chart.yaml, the
// default image tag.
func chartAppVersion(t *testing.T, root string) string {
	t.Helper()
	path := filepath.Join(root, "charts", "kollect", "Chart.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the chart's appVersion: %v", err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*["']?([^"'\s]+)`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s has no appVersion", path)
	}
	return string(m[1])
}

// buildImage runs hack/build-image.sh with env (and GOARCH of this machine,
// so that the binary runs here), failing the test with its output.
func buildImage(t *testing.T, root string, env map[string]string) {
	t.Helper()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		// Stop a little before the test binary's timeout, to say why.
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-30*time.Second))
		defer cancel()
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "hack", "build-image.sh"))
	cmd.Dir = root
	vars := map[string]string{"GOARCH": runtime.GOARCH, "GOOS": "", "IMAGE": "", "BINARY": "", "SOURCE_DATE_EPOCH": "", "OUT": ""}
	maps.Copy(vars, env)
	cmd.Env = environ(vars)
	cmd.WaitDelay = 10 * time.Second
	var output bytes.Buffer
	cmd.Stdout = io.MultiWriter(&output, t.Output())
	cmd.Stderr = cmd.Stdout
	start := time.Now()
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("hack/build-image.sh did not finish before the test's deadline (after %v): a cold build of the static binary takes about 10 minutes on 2 cores; run go test with -timeout 30m\n%s",
			time.Since(start).Round(time.Second), output.String())
	}
	if err != nil {
		t.Fatalf("hack/build-image.sh %v failed: %v\n%s", env, err, output.String())
	}
	t.Logf("hack/build-image.sh %v: %v", env, time.Since(start).Round(time.Second))
}

// environ is the test's environment with the variables of env replaced;
// an empty value removes the variable.
func environ(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := env[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range env {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// readLayout reads the OCI image layout in dir, verifies every blob it
// references against its descriptor and unpacks the image's layers into
// rootfs.
func readLayout(t *testing.T, dir, rootfs string) *image {
	t.Helper()
	var layout struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	readJSON(t, filepath.Join(dir, "oci-layout"), &layout)
	if layout.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("%s/oci-layout: imageLayoutVersion %q, want 1.0.0", dir, layout.ImageLayoutVersion)
	}
	var idx index
	readJSON(t, filepath.Join(dir, "index.json"), &idx)
	if idx.SchemaVersion != 2 {
		t.Fatalf("%s/index.json: schemaVersion %d, want 2", dir, idx.SchemaVersion)
	}
	if idx.MediaType != "" && idx.MediaType != mediaTypeIndex {
		t.Fatalf("%s/index.json: mediaType %q, want %s", dir, idx.MediaType, mediaTypeIndex)
	}
	if len(idx.Manifests) != 1 {
		t.Fatalf("%s/index.json lists %d manifests, want 1", dir, len(idx.Manifests))
	}
	img := &image{Descriptor: idx.Manifests[0], Rootfs: rootfs, Headers: map[string]*tar.Header{}}
	if img.Descriptor.MediaType != mediaTypeManifest {
		t.Fatalf("index.json's manifest has mediaType %q, want %s", img.Descriptor.MediaType, mediaTypeManifest)
	}
	img.ManifestDigest = img.Descriptor.Digest
	if err := json.Unmarshal(readBlob(t, dir, img.Descriptor), &img.Manifest); err != nil {
		t.Fatalf("manifest %s: %v", img.ManifestDigest, err)
	}
	m := img.Manifest
	if m.SchemaVersion != 2 || (m.MediaType != "" && m.MediaType != mediaTypeManifest) {
		t.Fatalf("manifest %s: schemaVersion %d, mediaType %q; want 2, %s", img.ManifestDigest, m.SchemaVersion, m.MediaType, mediaTypeManifest)
	}
	if m.Config.MediaType != mediaTypeConfig {
		t.Fatalf("manifest %s: config mediaType %q, want %s", img.ManifestDigest, m.Config.MediaType, mediaTypeConfig)
	}
	img.ConfigDigest = m.Config.Digest
	if err := json.Unmarshal(readBlob(t, dir, m.Config), &img.Config); err != nil {
		t.Fatalf("config %s: %v", m.Config.Digest, err)
	}
	if len(m.Layers) == 0 {
		t.Fatalf("manifest %s has no layers", img.ManifestDigest)
	}
	if len(img.Config.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("config has %d diff_ids for %d layers", len(img.Config.RootFS.DiffIDs), len(m.Layers))
	}
	for i, l := range m.Layers {
		blob := readBlob(t, dir, l)
		var r io.Reader = bytes.NewReader(blob)
		switch l.MediaType {
		case mediaTypeLayerGz:
			zr, err := gzip.NewReader(r)
			if err != nil {
				t.Fatalf("layer %s is not gzip: %v", l.Digest, err)
			}
			r = zr
		case mediaTypeLayer:
		default:
			t.Fatalf("layer %s has mediaType %q, want %s or %s", l.Digest, l.MediaType, mediaTypeLayerGz, mediaTypeLayer)
		}
		// The diff_id is the digest of the uncompressed layer.
		h := sha256.New()
		headers, err := untar(io.TeeReader(r, h), rootfs)
		if err != nil {
			t.Fatalf("unpacking layer %s: %v", l.Digest, err)
		}
		// Drain what the tar reader left (the end-of-archive padding).
		if _, err := io.Copy(h, r); err != nil {
			t.Fatalf("reading layer %s: %v", l.Digest, err)
		}
		if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != img.Config.RootFS.DiffIDs[i] {
			t.Fatalf("layer %s: uncompressed digest %s, config's diff_id %s", l.Digest, got, img.Config.RootFS.DiffIDs[i])
		}
		for name, hdr := range headers {
			img.Headers[name] = hdr
		}
	}
	return img
}

var digestRE = regexp.MustCompile(`^sha256:([0-9a-f]{64})$`)

// readBlob reads the blob of d, checking its size and sha256 digest.
func readBlob(t *testing.T, dir string, d descriptor) []byte {
	t.Helper()
	m := digestRE.FindStringSubmatch(d.Digest)
	if m == nil {
		t.Fatalf("descriptor digest %q is not sha256:<64 hex digits>", d.Digest)
	}
	b, err := os.ReadFile(filepath.Join(dir, "blobs", "sha256", m[1]))
	if err != nil {
		t.Fatalf("blob %s: %v", d.Digest, err)
	}
	if int64(len(b)) != d.Size {
		t.Fatalf("blob %s has %d bytes, its descriptor says %d", d.Digest, len(b), d.Size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != m[1] {
		t.Fatalf("blob %s has digest sha256:%x", d.Digest, sum)
	}
	return b
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the image layout: %v", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// untar unpacks the tar stream r into dir, refusing entries whose path or
// link target would leave dir, and returns the headers by cleaned path.
// Whiteouts (.wh.NAME) remove NAME. Owners are not applied (the test does
// not run as root); the returned headers keep them.
func untar(r io.Reader, dir string) (map[string]*tar.Header, error) {
	headers := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers, nil
		}
		if err != nil {
			return nil, err
		}
		name, err := safePath(h.Name)
		if err != nil {
			return nil, err
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		if base := filepath.Base(name); strings.HasPrefix(base, ".wh.") {
			if err := os.RemoveAll(filepath.Join(filepath.Dir(target), strings.TrimPrefix(base, ".wh."))); err != nil {
				return nil, err
			}
			continue
		}
		if name == "." {
			continue
		}
		headers[name] = h
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return nil, err
		}
		mode := os.FileMode(h.Mode & 0o777)
		switch h.Typeflag {
		case tar.TypeDir:
			// Owner-writable, whatever the image says, so that the
			// entries under it (and t.TempDir's cleanup) can write.
			if err := os.MkdirAll(target, 0o755); err != nil {
				return nil, err
			}
			if err := os.Chmod(target, mode|0o700); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode|0o600)
			if err != nil {
				return nil, err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return nil, err
			}
		case tar.TypeSymlink:
			link := h.Linkname
			if !strings.HasPrefix(link, "/") {
				link = filepath.ToSlash(filepath.Join(filepath.Dir(name), link))
			}
			if _, err := safePath(link); err != nil {
				return nil, fmt.Errorf("symlink %s -> %s: %w", h.Name, h.Linkname, err)
			}
			if err := os.Symlink(h.Linkname, target); err != nil {
				return nil, err
			}
		case tar.TypeLink:
			src, err := safePath(h.Linkname)
			if err != nil {
				return nil, fmt.Errorf("hard link %s -> %s: %w", h.Name, h.Linkname, err)
			}
			if err := os.Link(filepath.Join(dir, filepath.FromSlash(src)), target); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("%s: unexpected tar entry type %q in the image", h.Name, h.Typeflag)
		}
	}
}

// safePath cleans a tar entry name to a slash path relative to the unpack
// directory, or fails if it would leave it.
func safePath(name string) (string, error) {
	clean := strings.TrimPrefix(filepath.ToSlash(filepath.Clean("/"+name)), "/")
	if clean == "" {
		clean = "."
	}
	for _, part := range strings.Split(filepath.ToSlash(name), "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q leaves the unpack directory", name)
		}
	}
	return clean, nil
}

// runBinary runs the unpacked server with args and returns its standard
// output, failing unless it exits 0.
func runBinary(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kollect-apiserver %s (unpacked from the image): %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// checkDockerArchive checks the `docker load` tarball: tagged ref, holding
// the image's config and layers.
func checkDockerArchive(t *testing.T, path, ref string, img *image) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("opening the docker archive: %v", err)
	}
	defer f.Close()
	// The sha256 of every file in the archive, and manifest.json itself.
	digests := map[string]string{}
	var raw []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("reading %s: %v", path, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		sum := sha256.New()
		var body bytes.Buffer
		w := io.Writer(sum)
		if h.Name == "manifest.json" {
			w = io.MultiWriter(sum, &body)
		}
		if _, err := io.Copy(w, tr); err != nil {
			t.Fatalf("reading %s in %s: %v", h.Name, path, err)
		}
		digests[h.Name] = "sha256:" + hex.EncodeToString(sum.Sum(nil))
		if h.Name == "manifest.json" {
			raw = body.Bytes()
		}
	}
	if raw == nil {
		t.Fatalf("%s has no manifest.json: not a docker archive", path)
	}
	var dm []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(raw, &dm); err != nil || len(dm) != 1 {
		t.Fatalf("%s manifest.json: %v, %d images; want 1:\n%s", path, err, len(dm), raw)
	}
	if !slices.Equal(dm[0].RepoTags, []string{ref}) {
		t.Errorf("%s is tagged %q, want %q", path, dm[0].RepoTags, ref)
	}
	digestOf := func(name string) string {
		d, ok := digests[name]
		if !ok {
			t.Errorf("%s: manifest.json names %s, which is not in the archive", path, name)
		}
		return d
	}
	if got := digestOf(dm[0].Config); got != img.ConfigDigest {
		t.Errorf("%s: config %s has digest %s, the OCI image's config is %s", path, dm[0].Config, got, img.ConfigDigest)
	}
	if len(dm[0].Layers) != len(img.Manifest.Layers) {
		t.Fatalf("%s has %d layers, the OCI image %d", path, len(dm[0].Layers), len(img.Manifest.Layers))
	}
	for i, l := range dm[0].Layers {
		if got := digestOf(l); got != img.Manifest.Layers[i].Digest {
			t.Errorf("%s: layer %s has digest %s, the OCI image's is %s", path, l, got, img.Manifest.Layers[i].Digest)
		}
	}
}

func fileDigest(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("%v", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func hasLinePrefix(s, prefix string) bool {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), prefix) {
			return true
		}
	}
	return false
}
