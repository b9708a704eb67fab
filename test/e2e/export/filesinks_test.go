package export

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// fileEndpoint returns a fresh file sink endpoint for namespace ns and the
// directory the sink writes to: <--file-sink-root>/<ns>/<name>. The
// default pathTemplate puts an Inventory's document at
// <cluster>/<namespace>/<inventory>.<ext> under it.
func fileEndpoint(ns string) (endpoint, dir string) {
	name := "sink-" + randomSuffix()
	return "file:///" + name, filepath.Join(fileSinkRoot, ns, name)
}

// TestFileSinkConfinement is acceptance point 2 of issue 12: file sinks are
// refused by a server without --file-sink-root; with it, no endpoint,
// template or planted symlink makes a sink write outside
// <--file-sink-root>/<its namespace>.
func TestFileSinkConfinement(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	t.Run("refused without --file-sink-root", func(t *testing.T) { fileSinksRefusedWithoutRoot(ctx, t) })
	t.Run("confined with --file-sink-root", func(t *testing.T) { fileSinksConfined(ctx, t) })
}

// fileSinksRefusedWithoutRoot points the APIService at a second replica
// started like the suite's but without --file-sink-root, and creates a file
// sink through kube-apiserver.
func fileSinksRefusedWithoutRoot(ctx context.Context, t *testing.T) {
	ns := "fsroot-off"
	namespace(ctx, t, ns)
	o := replica
	o.Name = "kollect-no-file-sinks"
	o.Args = slices.DeleteFunc(slices.Clone(o.Args), func(a string) bool { return strings.HasPrefix(a, "--file-sink-root") })
	first := cluster.Kollect()
	p, err := cluster.StartKollect(ctx, o)
	must(t, err, "replica without --file-sink-root")
	t.Cleanup(func() { _ = p.Stop() })
	must(t, cluster.RegisterKollect(ctx, p), "register the replica without --file-sink-root")
	t.Cleanup(func() {
		if err := cluster.RegisterKollect(context.Background(), first); err != nil {
			t.Errorf("registering the suite's replica again: %v", err)
		}
	})

	api := kollect.KollectV1alpha1().SnapshotSinks(ns)
	_, err = api.Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///reports"},
	}, metav1.CreateOptions{})
	expectRefused(t, err, "spec.type", "--file-sink-root")
	if _, err := api.Get(ctx, "files", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused sink was stored: %v", err)
	}
}

// expectRefused asserts a 422 whose causes include one on field
// mentioning want.
func expectRefused(t *testing.T, err error, field, want string) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Errorf("got %v, want 422 Invalid on %s", err, field)
		return
	}
	var causes []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		if c.Field == field && strings.Contains(c.Message, want) {
			return
		}
		causes = append(causes, c.Field+": "+c.Message)
	}
	t.Errorf("no cause on %s mentioning %q; causes: %q", field, want, causes)
}

// confinementCase is one file sink of the confinement test.
type confinementCase struct {
	name, endpoint, template string
	// field is where admission refuses the sink; empty when it admits it.
	field string
	// written is the document's path under <root>/fsroot-a when the
	// export must succeed; empty when it must fail. The default
	// pathTemplate, {cluster}/{namespace}/{inventory}.{ext}, puts it at
	// <endpoint's path>/e2e/fsroot-a/inv.json.
	written string
}

func fileSinksConfined(ctx context.Context, t *testing.T) {
	const a, b, c = "fsroot-a", "fsroot-b", "fsroot-c"
	root := fileSinkRoot
	for _, ns := range []string{a, b, c} {
		namespace(ctx, t, ns)
	}
	outside := t.TempDir()
	escape := "kollect-escape-" + randomSuffix() // under / through a symlink to it
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join("/tmp", escape)) })

	// What another namespace and the rest of the machine hold, and the
	// traps planted in DIR/fsroot-a and as DIR/fsroot-c.
	plantFile(t, filepath.Join(root, b, "sentinel.json"), "fsroot-b's document")
	plantFile(t, filepath.Join(root, b, "reports", "fsroot-b", "inv.json"), "fsroot-b's export")
	plantFile(t, filepath.Join(outside, "sentinel.json"), "outside DIR")
	must(t, os.MkdirAll(filepath.Join(root, a, "real"), 0o750), "mkdir")
	up, err := filepath.Rel(filepath.Join(root, a), outside)
	must(t, err, "relative path to outside")
	for link, target := range map[string]string{
		"to-b":        "../" + b,
		"to-root":     "/",
		"away":        outside,
		"up":          up,
		"nested/link": "../../" + b,
		// Where the default template's directory and document go.
		"tmpl/" + clusterName + "/" + a:              "../../../" + b,
		"doc/" + clusterName + "/" + a + "/inv.json": "../../../../" + b + "/sentinel.json",
		"alias": "real",
	} {
		plantSymlink(t, target, filepath.Join(root, a, link))
	}
	plantSymlink(t, b, filepath.Join(root, c))
	protected := []string{filepath.Join(root, b), outside}
	before := snapshotTree(t, protected...)
	topBefore := dirNames(t, root)

	long := strings.Repeat("l", 255)
	doc := clusterName + "/" + a + "/inv.json" // the default pathTemplate's document
	cases := []confinementCase{
		// Refused at admission, with the field path.
		{name: "..", endpoint: "file:///../" + b, field: "spec.endpoint"},
		{name: ".. after a name", endpoint: "file:///x/../../" + b, field: "spec.endpoint"},
		{name: "percent-encoded ..", endpoint: "file:///%2e%2e/" + b, field: "spec.endpoint"},
		{name: "percent-encoded .. and slashes", endpoint: "file:///x/%2E%2E%2F%2e%2e/" + b, field: "spec.endpoint"},
		{name: "backslashes", endpoint: `file:///x\..\..\` + b, field: "spec.endpoint"},
		{name: "percent-encoded backslashes", endpoint: "file:///x%5C..%5C..%5C" + b, field: "spec.endpoint"},
		{name: "NUL", endpoint: "file:///x%00y", field: "spec.endpoint"},
		{name: "newline", endpoint: "file:///x%0Ay", field: "spec.endpoint"},
		{name: "a 256-byte name", endpoint: "file:///" + long + "l", field: "spec.endpoint"},
		{name: "a 1,100-byte path", endpoint: "file://" + strings.Repeat("/abcdefghij", 100), field: "spec.endpoint"},
		{name: "a host naming another namespace", endpoint: "file://" + b + "/x", field: "spec.endpoint"},
		{name: "a template going up to another namespace", endpoint: "file:///", template: "../" + b + "/{inventory}.{ext}", field: "spec.file.pathTemplate"},
		{name: "an absolute template", endpoint: "file:///", template: "/tmp/{inventory}.{ext}", field: "spec.file.pathTemplate"},
		{name: "a template with backslashes", endpoint: "file:///", template: `{namespace}\..\..\{inventory}.{ext}`, field: "spec.file.pathTemplate"},
		{name: "a template with NUL", endpoint: "file:///", template: "{inventory}\x00.{ext}", field: "spec.file.pathTemplate"},
		// Admitted, and written inside DIR/fsroot-a.
		{name: "an absolute path", endpoint: "file:///tmp/absolute", written: "tmp/absolute/" + doc},
		{name: "doubled slashes and dots", endpoint: "file:////double//slash/./dot/", written: "double/slash/dot/" + doc},
		{name: "the namespace's directory itself", endpoint: "file:///", written: doc},
		{name: "a template naming another namespace", endpoint: "file:///reports", template: b + "/{inventory}.{ext}", written: "reports/" + b + "/inv.json"},
		{name: "a 255-byte name", endpoint: "file:///" + long, written: long + "/" + doc},
		{name: "a symlink inside the namespace's directory", endpoint: "file:///alias", written: "real/" + doc},
		{name: "a symlink where the document goes is replaced, not followed", endpoint: "file:///doc", written: "doc/" + doc},
		// Admitted, and refused by the exporter: symlinks planted on disk.
		{name: "a symlink to another namespace's directory", endpoint: "file:///to-b"},
		{name: "a symlink to /", endpoint: "file:///to-root/tmp/" + escape},
		{name: "an absolute symlink outside DIR", endpoint: "file:///away"},
		{name: "a relative symlink climbing out of DIR", endpoint: "file:///up"},
		{name: "a symlinked parent directory", endpoint: "file:///nested/link/deeper"},
		{name: "a symlink where the template's directory goes", endpoint: "file:///tmpl"},
	}

	api := kollect.KollectV1alpha1()
	var refs []v1alpha1.SinkReference
	byName := map[string]confinementCase{}
	for i, tc := range cases {
		name := fmt.Sprintf("case-%02d", i)
		sink := &v1alpha1.SnapshotSink{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: tc.endpoint},
		}
		if tc.template != "" {
			sink.Spec.File = &v1alpha1.FileSinkConfig{PathTemplate: tc.template}
		}
		_, err := api.SnapshotSinks(a).Create(ctx, sink, metav1.CreateOptions{})
		if tc.field != "" {
			t.Run(tc.name, func(t *testing.T) {
				expectRefused(t, err, tc.field, "")
				if _, err := api.SnapshotSinks(a).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("the refused sink was stored: %v", err)
				}
			})
			continue
		}
		must(t, err, tc.name)
		refs = append(refs, v1alpha1.SinkReference{Name: name})
		byName[name] = tc
	}
	// fsroot-c's directory is a symlink to fsroot-b's.
	_, err = api.SnapshotSinks(c).Create(ctx, &v1alpha1.SnapshotSink{
		ObjectMeta: metav1.ObjectMeta{Name: "files"},
		Spec:       v1alpha1.SnapshotSinkSpec{Type: v1alpha1.SnapshotSinkFile, Endpoint: "file:///reports"},
	}, metav1.CreateOptions{})
	must(t, err, "file sink of fsroot-c")

	for _, ns := range []string{a, c} {
		collectDeployments(ctx, t, ns, 1)
		inv := &v1alpha1.Inventory{ObjectMeta: metav1.ObjectMeta{Name: "inv"}, Spec: v1alpha1.InventorySpec{SnapshotSinkRefs: refs}}
		if ns == c {
			inv.Spec.SnapshotSinkRefs = []v1alpha1.SinkReference{{Name: "files"}}
		}
		_, err := api.Inventories(ns).Create(ctx, inv, metav1.CreateOptions{})
		must(t, err, "inventory of "+ns)
	}

	// Every admitted sink has an outcome: exported where expected, failed
	// where a symlink leads out.
	_, sumA := itemSet(ctx, t, a)
	eventually(ctx, t, "every sink of "+a+" tried", func(ctx context.Context) (bool, string) {
		inv := getInventory(ctx, t, a, "inv")
		for name, tc := range byName {
			e := entry(inv, v1alpha1.SinkFamilySnapshot, name)
			switch {
			case e == nil:
				return false, name + ": no entry"
			case tc.written != "" && (e.Outcome == v1alpha1.OutcomeFailed || e.LastChecksum != sumA):
				return false, fmt.Sprintf("%s (%s): outcome %s checksum %s: %s", name, tc.name, e.Outcome, e.LastChecksum, e.Message)
			case tc.written == "" && e.Outcome != v1alpha1.OutcomeFailed:
				return false, fmt.Sprintf("%s (%s): outcome %s, want Failed", name, tc.name, e.Outcome)
			}
		}
		return true, ""
	})
	eventually(ctx, t, "the sink of "+c+" failed", func(ctx context.Context) (bool, string) {
		e := entry(getInventory(ctx, t, c, "inv"), v1alpha1.SinkFamilySnapshot, "files")
		if e == nil || e.Outcome != v1alpha1.OutcomeFailed {
			return false, fmt.Sprintf("entry %+v", e)
		}
		if !strings.Contains(e.Message, "not a plain directory") {
			return false, "message: " + e.Message
		}
		return true, ""
	})

	inv := getInventory(ctx, t, a, "inv")
	for name, tc := range byName {
		t.Run(tc.name, func(t *testing.T) {
			e := entry(inv, v1alpha1.SinkFamilySnapshot, name)
			if strings.Contains(e.Message, root) {
				t.Errorf("the status shows the server's path: %s", e.Message)
			}
			if tc.written == "" {
				t.Logf("refused by the exporter: %s", e.Message)
				return
			}
			p := filepath.Join(root, a, tc.written)
			info, err := os.Lstat(p)
			if err != nil || !info.Mode().IsRegular() {
				t.Fatalf("%s: %v, want the exported document", p, err)
			}
			env, err := readFileEnvelope(p)
			if err != nil || env.Checksum != sumA {
				t.Errorf("%s: %v, %v; want checksum %s", p, env, err, sumA)
			}
		})
	}

	// Nothing outside DIR/fsroot-a changed: fsroot-b's directory, a
	// directory outside DIR, / through the symlink, DIR itself.
	if after := snapshotTree(t, protected...); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("outside DIR/%s changed:\nbefore %v\nafter  %v", a, before, after)
	}
	if _, err := os.Lstat(filepath.Join("/tmp", escape)); !os.IsNotExist(err) {
		t.Errorf("/tmp/%s exists: written through the symlink to /", escape)
	}
	if top := dirNames(t, root); !slices.Equal(top, topBefore) {
		t.Errorf("DIR holds %q, held %q before", top, topBefore)
	}
	if target, err := os.Readlink(filepath.Join(root, c)); err != nil || target != b {
		t.Errorf("DIR/%s: %q, %v; want the planted symlink to %s", c, target, err, b)
	}
	// And inside DIR/fsroot-a, only the expected documents were written.
	var want []string
	for _, tc := range byName {
		if tc.written != "" {
			want = append(want, tc.written)
		}
	}
	slices.Sort(want)
	if got := regularFiles(t, filepath.Join(root, a)); !slices.Equal(got, want) {
		t.Errorf("documents in DIR/%s:\n got  %q\n want %q", a, got, want)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err, "read "+dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func plantFile(t *testing.T, p, content string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o750), "mkdir")
	must(t, os.WriteFile(p, []byte(content), 0o640), "write "+p)
}

func plantSymlink(t *testing.T, target, p string) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(p), 0o750), "mkdir")
	must(t, os.Symlink(target, p), "symlink "+p)
}

// snapshotTree records every entry under dirs without following symlinks:
// type, mode, size, modification time, and content or link target.
func snapshotTree(t *testing.T, dirs ...string) map[string]string {
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
				content, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				desc += " " + string(content)
			}
			out[p] = desc
			return nil
		})
		must(t, err, "walk "+dir)
	}
	return out
}

// regularFiles lists the regular files under dir, relative and sorted,
// without following symlinks.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	must(t, err, "walk "+dir)
	slices.Sort(files)
	return files
}
