// Command image writes the kollect-apiserver container image without a
// container engine: it takes the static binary hack/build-image.sh built and
// writes, under -out,
//
//	oci/                            an OCI image layout (index.json, blobs/sha256/...)
//	kollect-apiserver.oci.tar       the same layout as one tar (skopeo's oci-archive:)
//	kollect-apiserver.docker.tar    a `docker load` tarball tagged with -image
//
// The image has one layer, the same files the repository's Dockerfile
// copies into its scratch stage:
//
//	/kollect-apiserver                    0755 0:0          the server
//	/etc/passwd, /etc/group               0644 0:0          root and nonroot (65532)
//	/etc/ssl/certs/ca-certificates.crt    0644 0:0          Mozilla's roots, for HTTPS sinks
//	/tmp                                  1777 0:0
//	/var/lib/kollect                      0700 65532:65532  --data-dir (a volume)
//
// and runs as 65532:65532 with /kollect-apiserver as its entrypoint. With
// -rootfs DIR it writes those files into DIR instead (owners need root): the
// Dockerfile's build stage does that, so both paths put the same files in the
// image. It is reproducible: every timestamp is -source-date-epoch (SOURCE_DATE_EPOCH),
// tar entries are sorted and carry no host data, so the same binary gives the
// same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

const (
	// binaryPath is where the server lives in the image, and its entrypoint.
	binaryPath = "/kollect-apiserver"
	// dataDir is the writable --data-dir volume.
	dataDir = "/var/lib/kollect"
	// uid and gid of the nonroot user the server runs as (distroless' nonroot).
	uid, gid = 65532, 65532
	// port is --secure-port in the install manifests.
	port = "8443/tcp"

	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:" + dataDir + ":/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

type options struct {
	binary, image, version, revision, source, platform, out, rootfs string
	epoch                                                           int64
}

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "", "the static kollect-apiserver binary to put in the image (required)")
	flag.StringVar(&o.image, "image", "", "image reference the tarballs are tagged with, e.g. ghcr.io/kollect-dev/kollect-apiserver:v0.1.0 (required)")
	flag.StringVar(&o.version, "version", "", "version for the org.opencontainers.image.version label (default: the reference's tag)")
	flag.StringVar(&o.revision, "revision", "", "git commit for the org.opencontainers.image.revision label (optional)")
	flag.StringVar(&o.source, "source", "https://github.com/kollect-dev/kollect", "source repository for the org.opencontainers.image.source label")
	flag.StringVar(&o.platform, "platform", "linux/"+defaultArch(), "os/arch[/variant] of the image; must match the binary")
	flag.StringVar(&o.out, "out", filepath.Join("_output", "image"), "output directory")
	flag.StringVar(&o.rootfs, "rootfs", "", "write the image's files into this directory (as root, for the owners) instead of an image; -image is then not needed")
	flag.Int64Var(&o.epoch, "source-date-epoch", envEpoch(), "Unix time of every timestamp in the image (default: $SOURCE_DATE_EPOCH, else 0)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: image -binary FILE -image REF [flags]\n       image -binary FILE -rootfs DIR [flags]\n\nWrites the kollect-apiserver OCI image without a container engine, or its files into DIR.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	if err := run(o); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: error: %v\n", err)
	os.Exit(1)
}

// defaultArch is $GOARCH when set (a cross-build), else this machine's.
func defaultArch() string {
	if a := os.Getenv("GOARCH"); a != "" {
		return a
	}
	return runtime.GOARCH
}

func envEpoch() int64 {
	n, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func run(o options) error {
	if o.binary == "" {
		return errors.New("-binary is required")
	}
	platform, err := v1.ParsePlatform(o.platform)
	if err != nil {
		return fmt.Errorf("-platform %q: %w", o.platform, err)
	}
	if platform.OS != "linux" {
		return fmt.Errorf("-platform %q: only linux images are supported", o.platform)
	}
	created := time.Unix(o.epoch, 0).UTC()
	if err := checkBinary(o.binary, platform.Architecture); err != nil {
		return err
	}
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return fmt.Errorf("reading the binary: %w", err)
	}
	entries, err := files(bin)
	if err != nil {
		return err
	}
	if o.rootfs != "" {
		if err := writeRootfs(o.rootfs, entries, created); err != nil {
			return fmt.Errorf("-rootfs %s: %w", o.rootfs, err)
		}
		fmt.Printf("image: wrote the image's files into %s\n", o.rootfs)
		return nil
	}

	if o.image == "" {
		return errors.New("-image is required")
	}
	ref, err := name.NewTag(o.image, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("-image %q: %w", o.image, err)
	}
	if o.version == "" {
		o.version = ref.TagStr()
	}
	img, err := buildImage(entries, o, *platform, created)
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	// The layout directory is written afresh: stale blobs of an earlier
	// build would end up in the archive.
	ociDir := filepath.Join(o.out, "oci")
	if err := os.RemoveAll(ociDir); err != nil {
		return err
	}
	lp, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing %s: %w", ociDir, err)
	}
	// WriteImage and a descriptor of our own rather than AppendImage, which
	// would also give the image an artifactType, meant for artifacts.
	if err := lp.WriteImage(img); err != nil {
		return fmt.Errorf("writing %s: %w", ociDir, err)
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	if err := lp.AppendDescriptor(v1.Descriptor{
		MediaType: types.OCIManifestSchema1,
		Size:      int64(len(rawManifest)),
		Digest:    digest,
		Platform:  platform,
		Annotations: map[string]string{
			// What skopeo's oci:DIR:TAG and oci-archive:FILE:TAG select by.
			"org.opencontainers.image.ref.name": ref.TagStr(),
			// What containerd (and docker load of an OCI archive) names it.
			"io.containerd.image.name": ref.String(),
		},
	}); err != nil {
		return fmt.Errorf("writing %s: %w", ociDir, err)
	}
	ociTar := filepath.Join(o.out, "kollect-apiserver.oci.tar")
	if err := tarDir(ociDir, ociTar, created); err != nil {
		return fmt.Errorf("writing %s: %w", ociTar, err)
	}
	dockerTar := filepath.Join(o.out, "kollect-apiserver.docker.tar")
	if err := writeAtomic(dockerTar, func(w io.Writer) error { return tarball.Write(ref, img, w) }); err != nil {
		return fmt.Errorf("writing %s: %w", dockerTar, err)
	}

	size, err := imageSize(img)
	if err != nil {
		return err
	}
	fmt.Printf("image: %s\n", ref.String())
	fmt.Printf("image: digest %s (%s, %s compressed)\n", digest, platform, mib(size))
	fmt.Printf("image: wrote %s, %s, %s\n", ociDir, ociTar, dockerTar)
	return nil
}

// checkBinary refuses a binary that would not run in a scratch image of the
// platform: not ELF, another architecture, or dynamically linked.
func checkBinary(path, arch string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	want := map[string]elf.Machine{
		"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "arm": elf.EM_ARM,
		"386": elf.EM_386, "ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
	}
	if m, ok := want[arch]; ok && f.Machine != m {
		return fmt.Errorf("%s is built for %s, the image is for %s: build it with GOARCH=%s", path, f.Machine, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (it has a PT_INTERP header) and cannot run FROM scratch: build it with CGO_ENABLED=0", path)
		}
	}
	return nil
}

func buildImage(entries []entry, o options, platform v1.Platform, created time.Time) (v1.Image, error) {
	raw, err := layerTar(entries, created)
	if err != nil {
		return nil, err
	}
	// Compressed once here rather than by go-containerregistry on every
	// read; gzip with no name and no time in its header is deterministic.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}

	labels := map[string]string{
		"org.opencontainers.image.title":       "kollect-apiserver",
		"org.opencontainers.image.description": "Kollect: a live inventory of a Kubernetes cluster, served as the aggregated API kollect.dev/v1alpha1",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.source":      o.source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	if o.revision != "" {
		labels["org.opencontainers.image.revision"] = o.revision
	}

	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer: layer,
		History: v1.History{
			Created:   v1.Time{Time: created},
			CreatedBy: "hack/tools/image: " + binaryPath + ", /etc/passwd, /etc/group, /etc/ssl/certs, /tmp, " + dataDir,
		},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: created}
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, gid),
		Entrypoint:   []string{binaryPath},
		WorkingDir:   "/",
		Volumes:      map[string]struct{}{dataDir: {}},
		ExposedPorts: map[string]struct{}{port: {}},
		Labels:       labels,
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, err
	}
	annotated, ok := mutate.Annotations(img, labels).(v1.Image)
	if !ok {
		return nil, errors.New("annotating the manifest did not give an image")
	}
	return annotated, nil
}

// caCertificates is the PEM bundle of the unconstrained roots of Mozilla's
// trust store as pinned by golang.org/x/crypto/x509roots/fallback: the
// system roots Go reads from /etc/ssl/certs/ca-certificates.crt, which the
// git, webhook, NATS and Postgres sinks verify public endpoints with unless a
// sink sets tls.caBundle. Roots with a distrust date are left out: a PEM
// file cannot carry the constraint.
func caCertificates() ([]byte, error) {
	var b bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		if err := pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate}); err != nil {
			return nil, err
		}
		n++
	}
	if n == 0 {
		return nil, errors.New("golang.org/x/crypto/x509roots/fallback has no roots")
	}
	return b.Bytes(), nil
}

// entry is one file or directory of the image's layer.
type entry struct {
	name     string // without the leading slash; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte
}

// files are the image's files and directories, sorted by name.
func files(bin []byte) ([]entry, error) {
	caBundle, err := caCertificates()
	if err != nil {
		return nil, err
	}
	entries := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caBundle},
		// Owned by root: the server, running as 65532, cannot replace itself.
		{name: strings.TrimPrefix(binaryPath, "/"), mode: 0o755, uid: 0, gid: 0, data: bin},
		{name: "tmp/", mode: 0o1777},
		{name: "var/", mode: 0o755},
		{name: "var/lib/", mode: 0o755},
		{name: strings.TrimPrefix(dataDir, "/") + "/", mode: 0o700, uid: uid, gid: gid},
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, nil
}

// layerTar is the uncompressed layer: the entries in order, every
// timestamp set to created, no user or group names, no host data.
func layerTar(entries []entry, created time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// writeRootfs writes the entries into dir with their modes, owners and
// times; setting owners needs root.
func writeRootfs(dir string, entries []entry, created time.Time) error {
	if os.Geteuid() != 0 {
		return errors.New("setting the owners (65532) needs root; run it as root (as the Dockerfile's build stage does)")
	}
	for _, e := range entries {
		path := filepath.Join(dir, filepath.FromSlash(e.name))
		perm := os.FileMode(e.mode & 0o777)
		if e.mode&0o1000 != 0 {
			perm |= os.ModeSticky
		}
		if strings.HasSuffix(e.name, "/") {
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(path, e.data, 0o600); err != nil {
			return err
		}
		if err := os.Chmod(path, perm); err != nil {
			return err
		}
		if err := os.Lchown(path, e.uid, e.gid); err != nil {
			return err
		}
	}
	// Times last, children before their directories.
	for i := len(entries) - 1; i >= 0; i-- {
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(entries[i].name)), created, created); err != nil {
			return err
		}
	}
	return nil
}

// tarDir writes dir as a tar whose root is dir's content (the layout skopeo
// and podman read as oci-archive:), sorted, with fixed times and owners.
func tarDir(dir, out string, created time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		names = append(names, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	return writeAtomic(out, func(w io.Writer) error {
		tw := tar.NewWriter(w)
		for _, n := range names {
			path := filepath.Join(dir, filepath.FromSlash(n))
			fi, err := os.Stat(path)
			if err != nil {
				return err
			}
			h := &tar.Header{Name: n, Mode: 0o644, ModTime: created, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: fi.Size()}
			if fi.IsDir() {
				h.Name, h.Mode, h.Typeflag, h.Size = n+"/", 0o755, tar.TypeDir, 0
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if fi.IsDir() {
				continue
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
		}
		return tw.Close()
	})
}

// writeAtomic writes path through a temporary file in the same directory,
// so a failed build leaves no half-written tarball behind.
func writeAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// imageSize is what a registry stores: manifest, config and compressed layers.
func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
