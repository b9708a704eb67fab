package tenantmode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// ns holds the namespaced objects of the test, among them the Profile the
// ClusterTarget from before tenant mode references.
const ns = "tenant-mode"

// clusterKind is one of the kinds tenant mode switches off.
type clusterKind struct {
	resource string
	// manifest is a valid object of the kind named name.
	manifest func(name string) string
	// changed is manifest("before") with its spec changed, for the updates.
	changed string
	// specPatch changes the spec, as a JSON merge patch.
	specPatch string
	// finalizer is what the controllers put on the objects of the kind; the
	// deletion in tenant mode must still get past it.
	finalizer string
	// status is a status to write, as JSON, when the kind has a status
	// subresource.
	status string
}

func (k clusterKind) gvr() schema.GroupVersionResource {
	return v1alpha1.SchemeGroupVersion.WithResource(k.resource)
}

var clusterKinds = []clusterKind{
	{
		resource: "clustertargets",
		manifest: func(name string) string {
			return fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: ClusterTarget\nmetadata: {name: %s}\nspec:\n  profileRef: {namespace: %s, name: configmaps}\n  includeNamespaces: [%[2]s]\n", name, ns)
		},
		changed:   fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: ClusterTarget\nmetadata: {name: before}\nspec:\n  profileRef: {namespace: %s, name: configmaps}\n  includeNamespaces: [%[1]s]\n  suspend: true\n", ns),
		specPatch: `{"spec":{"suspend":true}}`,
		finalizer: "kollect.dev/items",
		status:    `{"collection":{"observedGeneration":1,"itemCount":99}}`,
	},
	{
		resource: "clusterinventories",
		manifest: func(name string) string {
			return fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: ClusterInventory\nmetadata: {name: %s}\nspec:\n  sinkNamespace: %s\n  targetRefs: [{name: before}]\n  snapshotSinkRefs: [{name: files}]\n", name, ns)
		},
		changed:   fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: ClusterInventory\nmetadata: {name: before}\nspec:\n  sinkNamespace: %s\n  targetRefs: [{name: before}]\n  snapshotSinkRefs: [{name: files}]\n  suspend: true\n", ns),
		specPatch: `{"spec":{"suspend":true}}`,
		finalizer: "kollect.dev/export",
		status:    `{"observedGeneration":1,"itemCount":99}`,
	},
	{
		resource: "clusterscopes",
		manifest: func(name string) string {
			return fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: ClusterScope\nmetadata: {name: %s}\nspec: {minExportInterval: 1m}\n", name)
		},
		changed:   "apiVersion: kollect.dev/v1alpha1\nkind: ClusterScope\nmetadata: {name: before}\nspec: {minExportInterval: 2m}\n",
		specPatch: `{"spec":{"minExportInterval":"2m"}}`,
	},
}

// TestTenantMode is acceptance point 5 of issue 6: with --tenant-mode the
// cluster kinds cannot be created or updated — through kubectl create,
// apply (client- and server-side), edit, label and patch, client-go
// create, update and patch, and writes of /status — and each refusal is a
// 403 saying why; objects created before tenant mode was turned on can be
// deleted, the controllers' finalizers included; namespaced kinds work as
// before.
func TestTenantMode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if !slices.Contains(env.Kollect.Args(), "--tenant-mode") {
		t.Fatalf("kollect-apiserver runs without --tenant-mode: %v", env.Kollect.Args())
	}
	env.Kubectl(t, ctx, "create", "namespace", ns)
	before := createBeforeTenantMode(t, ctx)

	t.Run("create is refused", func(t *testing.T) { createIsRefused(t, ctx) })
	t.Run("existing cluster objects stop", func(t *testing.T) { existingStop(t, ctx) })
	t.Run("update is refused", func(t *testing.T) { updateIsRefused(t, ctx, before) })
	t.Run("namespaced kinds work", func(t *testing.T) { namespacedKindsWork(t, ctx) })
	t.Run("delete succeeds", func(t *testing.T) { deleteSucceeds(t, ctx) })
}

// createBeforeTenantMode creates an object "before" of each cluster kind
// the way they come to exist: the suite's replica is stopped, another
// kollect-apiserver without --tenant-mode serves the same embedded etcd
// data and its controllers put their finalizers on them, then the suite's
// replica starts again, with the flag. It returns the objects as they were
// then.
func createBeforeTenantMode(t *testing.T, ctx context.Context) map[string]*unstructured.Unstructured {
	t.Helper()
	tenant := env.Kollect
	if err := tenant.Stop(); err != nil {
		t.Fatal(err)
	}
	opts := env.KollectOptions
	opts.Name = "kollect-before-tenant-mode"
	opts.DataDir = filepath.Join(env.Cluster.Dir(), tenant.Name(), "data") // the suite replica's (localcluster's default)
	opts.Args = slices.DeleteFunc(slices.Clone(opts.Args), func(a string) bool { return a == "--tenant-mode" })
	plain, err := env.Cluster.StartKollect(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// However this ends, the suite's replica serves again afterwards.
	defer func() {
		if err := plain.Stop(); err != nil {
			t.Error(err)
		}
		if !tenant.Running() {
			if err := tenant.Start(ctx); err != nil {
				t.Fatalf("starting kollect-apiserver again with --tenant-mode: %v", err)
			}
		}
		if err := env.Cluster.RegisterKollect(ctx, tenant); err != nil {
			t.Fatal(err)
		}
	}()
	if err := env.Cluster.RegisterKollect(ctx, plain); err != nil {
		t.Fatal(err)
	}
	manifests := []string{
		fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: Profile\nmetadata: {name: configmaps, namespace: %s}\nspec:\n  targetGVK: {version: v1, kind: ConfigMap}\n  attributes: [{name: data, path: \"{.data}\"}]\n", ns),
		fmt.Sprintf("apiVersion: kollect.dev/v1alpha1\nkind: SnapshotSink\nmetadata: {name: files, namespace: %s}\nspec: {type: file, endpoint: \"file://%s\"}\n", ns, t.TempDir()),
	}
	for _, k := range clusterKinds {
		manifests = append(manifests, k.manifest("before"))
	}
	apply(t, ctx, strings.Join(manifests, "---\n"))

	dyn := env.Dynamic(t)
	objs := map[string]*unstructured.Unstructured{}
	for _, k := range clusterKinds {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			u, err := dyn.Resource(k.gvr()).Get(ctx, "before", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			objs[k.resource] = u
			return k.finalizer == "" || slices.Contains(u.GetFinalizers(), k.finalizer), nil
		})
		if err != nil {
			t.Fatalf("%s before: waiting for the finalizer %q of the controllers: %v", k.resource, k.finalizer, err)
		}
	}
	return objs
}

// existingStop: the cluster objects written before tenant mode collect and
// export nothing any more, and say so: Degraded, reason TenantMode.
func existingStop(t *testing.T, ctx context.Context) {
	api := env.KollectClient(t).KollectV1alpha1()
	degraded := func(conds []metav1.Condition) string {
		c := meta.FindStatusCondition(conds, v1alpha1.ConditionDegraded)
		if c == nil {
			return ""
		}
		return string(c.Status) + "/" + c.Reason
	}
	want := "True/" + v1alpha1.ReasonTenantMode
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		ct, err := api.ClusterTargets().Get(ctx, "before", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ci, err := api.ClusterInventories().Get(ctx, "before", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("ClusterTarget Degraded %s, ClusterInventory Degraded %s", degraded(ct.Status.Conditions), degraded(ci.Status.Conditions))
		return degraded(ct.Status.Conditions) == want && degraded(ci.Status.Conditions) == want, nil
	})
	if err != nil {
		t.Fatalf("%s, want %s on both: %v", last, want, err)
	}
	ci, err := api.ClusterInventories().Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := ci.Status.SinkExports; len(e) != 1 || e[0].Outcome != v1alpha1.OutcomeFailed || !strings.Contains(e[0].Message, "--tenant-mode") {
		t.Errorf("the ClusterInventory's sink entry: %+v, want Failed saying --tenant-mode", e)
	}
}

// createIsRefused: a new object of each cluster kind, whichever way it is
// sent, is a 403 naming tenant mode, and nothing is stored.
func createIsRefused(t *testing.T, ctx context.Context) {
	dyn := env.Dynamic(t)
	for _, k := range clusterKinds {
		t.Run(k.resource, func(t *testing.T) {
			expectRefused(t, "kubectl create", kubectlFails(t, ctx, k.manifest("new-create"), "create", "-f", "-"))
			expectRefused(t, "kubectl apply", kubectlFails(t, ctx, k.manifest("new-apply"), "apply", "-f", "-"))
			expectRefused(t, "kubectl apply --server-side", kubectlFails(t, ctx, k.manifest("new-ssa"), "apply", "--server-side", "-f", "-"))
			_, err := dyn.Resource(k.gvr()).Create(ctx, object(t, k.manifest("new-client")), metav1.CreateOptions{})
			expectForbidden(t, "client-go create", err)
			for _, name := range []string{"new-create", "new-apply", "new-ssa", "new-client"} {
				if _, err := dyn.Resource(k.gvr()).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Errorf("%s %s after the refused create: %v, want 404", k.resource, name, err)
				}
			}
		})
	}
	// And through the typed clientset.
	_, err := env.KollectClient(t).KollectV1alpha1().ClusterScopes().Create(ctx,
		&v1alpha1.ClusterScope{ObjectMeta: metav1.ObjectMeta{Name: "new-typed"}}, metav1.CreateOptions{})
	expectForbidden(t, "typed client-go create", err)
}

// updateIsRefused: every way of changing an object from before — its spec,
// its labels, its status — is a 403 naming tenant mode, and the object is
// left as it was.
func updateIsRefused(t *testing.T, ctx context.Context, before map[string]*unstructured.Unstructured) {
	dyn := env.Dynamic(t)
	editor := filepath.Join(t.TempDir(), "editor.sh")
	// kubectl edit's editor: adds a label to the object it opened (which
	// has none).
	if err := os.WriteFile(editor, []byte("#!/bin/sh\nexec sed -i 's/^metadata:$/metadata:\\n  labels: {edited: \"true\"}/' \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, k := range clusterKinds {
		t.Run(k.resource, func(t *testing.T) {
			expectRefused(t, "kubectl apply", kubectlFails(t, ctx, k.changed, "apply", "-f", "-"))
			expectRefused(t, "kubectl apply --server-side", kubectlFails(t, ctx, k.changed, "apply", "--server-side", "--force-conflicts", "-f", "-"))
			edit := env.Cluster.KubectlCmd(ctx, "edit", k.resource, "before")
			edit.Env = append(edit.Env, "KUBE_EDITOR="+editor)
			out, err := edit.CombinedOutput()
			if err == nil {
				t.Errorf("kubectl edit succeeded:\n%s", out)
			}
			expectRefused(t, "kubectl edit", string(out))
			expectRefused(t, "kubectl label", kubectlFails(t, ctx, "", "label", k.resource, "before", "edited=true"))
			expectRefused(t, "kubectl patch", kubectlFails(t, ctx, "", "patch", k.resource, "before", "--type=merge", "-p", k.specPatch))

			ri := dyn.Resource(k.gvr())
			_, err = ri.Patch(ctx, "before", types.MergePatchType, []byte(k.specPatch), metav1.PatchOptions{})
			expectForbidden(t, "client-go merge patch", err)
			_, err = ri.Patch(ctx, "before", types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/labels","value":{"edited":"true"}}]`), metav1.PatchOptions{})
			expectForbidden(t, "client-go JSON patch", err)
			current, err := ri.Get(ctx, "before", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			current.SetLabels(map[string]string{"edited": "true"})
			_, err = ri.Update(ctx, current, metav1.UpdateOptions{})
			expectForbidden(t, "client-go update", err)

			if k.status != "" {
				expectRefused(t, "kubectl patch --subresource=status", kubectlFails(t, ctx, "", "patch", k.resource, "before", "--subresource=status", "--type=merge",
					"-p", `{"status":`+k.status+`}`))
				current, err := ri.Get(ctx, "before", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				var status map[string]any
				if err := json.Unmarshal([]byte(k.status), &status); err != nil {
					t.Fatal(err)
				}
				current.Object["status"] = status
				_, err = ri.UpdateStatus(ctx, current, metav1.UpdateOptions{})
				expectForbidden(t, "client-go status update", err)
				// Forced: the controllers own these fields, and a conflict
				// would be refused before tenant mode is asked.
				_, err = ri.Patch(ctx, "before", types.ApplyPatchType,
					[]byte(fmt.Sprintf(`{"apiVersion":"kollect.dev/v1alpha1","kind":%q,"metadata":{"name":"before"},"status":%s}`, current.GetKind(), k.status)),
					metav1.PatchOptions{FieldManager: "e2e-forger", Force: ptr(true)}, "status")
				expectForbidden(t, "client-go server-side apply of status", err)
			}

			after, err := ri.Get(ctx, "before", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			was := before[k.resource]
			if after.GetGeneration() != was.GetGeneration() || !reflect.DeepEqual(after.Object["spec"], was.Object["spec"]) || len(after.GetLabels()) != 0 {
				t.Errorf("after the refused updates: generation %d, spec %v, labels %v; want generation %d, spec %v, no labels",
					after.GetGeneration(), after.Object["spec"], after.GetLabels(), was.GetGeneration(), was.Object["spec"])
			}
			forged1, _, _ := unstructured.NestedInt64(after.Object, "status", "itemCount")
			forged2, _, _ := unstructured.NestedInt64(after.Object, "status", "collection", "itemCount")
			if forged1 == 99 || forged2 == 99 {
				t.Errorf("the refused status writes reached the object: %v", after.Object["status"])
			}
		})
	}
	// The typed clientset's status update, on the ClusterTarget.
	ct, err := env.KollectClient(t).KollectV1alpha1().ClusterTargets().Get(ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ct.Status.Collection = &v1alpha1.CollectionObservation{ObservedGeneration: ct.Generation, ItemCount: 99}
	_, err = env.KollectClient(t).KollectV1alpha1().ClusterTargets().UpdateStatus(ctx, ct, metav1.UpdateOptions{})
	expectForbidden(t, "typed client-go status update", err)
}

// namespacedKindsWork: tenant mode leaves the namespaced kinds alone:
// create, update and delete of a Target, an Inventory, a Scope and a sink.
func namespacedKindsWork(t *testing.T, ctx context.Context) {
	apply(t, ctx, fmt.Sprintf(`apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: team, namespace: %[1]s}
spec: {profileRef: {name: configmaps}}
---
apiVersion: kollect.dev/v1alpha1
kind: SnapshotSink
metadata: {name: team, namespace: %[1]s}
spec: {type: file, endpoint: "file:///var/lib/kollect/team"}
---
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: team, namespace: %[1]s}
spec: {snapshotSinkRefs: [{name: team}]}
---
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: team, namespace: %[1]s}
spec: {minExportInterval: 1m}
`, ns))
	for _, res := range []string{"target", "snapshotsink", "inventory", "scope"} {
		env.Kubectl(t, ctx, "label", res, "team", "-n", ns, "edited=true")
		env.Kubectl(t, ctx, "patch", res, "team", "-n", ns, "--type=merge", "-p", `{"metadata":{"annotations":{"edited":"true"}}}`)
	}
	client := env.KollectClient(t).KollectV1alpha1()
	if _, err := client.Targets(ns).Patch(ctx, "team", types.MergePatchType, []byte(`{"spec":{"suspend":true}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("client-go patch of a Target: %v", err)
	}
	inv, err := client.Inventories(ns).Get(ctx, "team", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Labels["edited"] != "true" {
		t.Errorf("the Inventory's labels %v, want edited=true", inv.Labels)
	}
	env.Kubectl(t, ctx, "delete", "-n", ns, "inventory/team", "target/team", "snapshotsink/team", "scope/team", "--timeout=90s")
	if _, err := client.Targets(ns).Get(ctx, "team", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Target after kubectl delete: %v, want 404", err)
	}
}

// deleteSucceeds: the objects from before can be deleted, and are gone
// once the controllers have removed their finalizers (an update tenant
// mode lets through).
func deleteSucceeds(t *testing.T, ctx context.Context) {
	dyn := env.Dynamic(t)
	env.Kubectl(t, ctx, "delete", "clustertarget", "before", "--wait=false")
	env.Kubectl(t, ctx, "delete", "clusterinventory", "before", "--wait=false")
	if err := dyn.Resource(clusterKinds[2].gvr()).Delete(ctx, "before", metav1.DeleteOptions{}); err != nil {
		t.Errorf("client-go delete of the ClusterScope: %v", err)
	}
	for _, k := range clusterKinds {
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := dyn.Resource(k.gvr()).Get(ctx, "before", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, nil
			}
			return false, err
		})
		if err != nil {
			t.Errorf("%s before is not gone after delete: %v", k.resource, err)
		}
	}
	out := env.Kubectl(t, ctx, "get", "clustertargets,clusterinventories,clusterscopes", "-o", "name")
	if strings.TrimSpace(out) != "" {
		t.Errorf("cluster kinds left after the deletes:\n%s", out)
	}
}

// expectRefused checks kubectl's output for the tenant-mode refusal: a
// 403 ("Error from server (Forbidden)", or "is forbidden" from kubectl
// edit) with the explanation.
func expectRefused(t *testing.T, what, stderr string) {
	t.Helper()
	if !strings.Contains(strings.ToLower(stderr), "forbidden") || !strings.Contains(stderr, tenancy.TenantModeMessage) {
		t.Errorf("%s: the error should be a 403 saying %q:\n%s", what, tenancy.TenantModeMessage, stderr)
	}
}

func ptr[T any](v T) *T { return &v }

func expectForbidden(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tenancy.TenantModeMessage) {
		t.Errorf("%s: %v, want 403 Forbidden saying %q", what, err, tenancy.TenantModeMessage)
	}
}

// kubectlFails runs kubectl as admin with stdin, expecting failure, and
// returns its stderr.
func kubectlFails(t *testing.T, ctx context.Context, stdin string, args ...string) string {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err == nil {
		t.Errorf("kubectl %s succeeded, want failure:\n%s", strings.Join(args, " "), stdout.String())
	}
	return stderr.String()
}

// apply runs kubectl apply as admin and fails the test on error.
func apply(t *testing.T, ctx context.Context, manifest string) {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(manifest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s\nmanifest:\n%s", err, out, manifest)
	}
}

// object decodes a YAML manifest for the dynamic client.
func object(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	data, err := yaml.YAMLToJSON([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}
