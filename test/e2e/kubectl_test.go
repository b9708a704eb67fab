package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var kinds = map[string]string{ // resource -> short name
	"profiles": "prof", "targets": "tgt", "clustertargets": "ctgt", "inventories": "inv", "clusterinventories": "cinv",
	"snapshotsinks": "ssink", "databasesinks": "dsink", "eventsinks": "esink", "scopes": "kscope", "clusterscopes": "kcscope",
	"memberclusters": "mc", "inventoryitems": "item", "clusterinventoryitems": "citem",
}

func TestDiscoveryAndExplain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out := env.Kubectl(t, ctx, "api-resources", "--api-group=kollect.dev", "--no-headers")
	rows := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			rows[f[0]] = f[1]
		}
	}
	for res, short := range kinds {
		if rows[res] != short {
			t.Errorf("api-resources: %s has short name %q, want %q\n%s", res, rows[res], short, out)
		}
	}
	if len(rows) != len(kinds) {
		t.Errorf("api-resources lists %d resources, want %d:\n%s", len(rows), len(kinds), out)
	}

	env.Kubectl(t, ctx, "get", "kollect", "-A")

	explain := env.Kubectl(t, ctx, "explain", "inventory.spec", "--recursive")
	for _, f := range []string{"exportMinInterval", "snapshotSinkRefs", "databaseSinkRefs", "eventSinkRefs", "targetSelector", "suspend"} {
		if !strings.Contains(explain, f) {
			t.Errorf("explain inventory.spec --recursive lacks %s:\n%s", f, explain)
		}
	}
	field := env.Kubectl(t, ctx, "explain", "inventory.spec.exportMinInterval")
	if !strings.Contains(field, "re-export interval") {
		t.Errorf("explain inventory.spec.exportMinInterval is not documented:\n%s", field)
	}
}

// TestKubectlLifecycle applies the examples client-side and server-side,
// reads them back, describes and deletes them, while `kubectl get
// inventoryitems --watch` receives the items the collector writes for them.
func TestKubectlLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	examples := env.Path("artifacts/examples")

	items := watchItems(t, ctx, "team-a")
	env.Kubectl(t, ctx, "apply", "-f", examples)
	expectLines(t, ctx, items, "ADDED Deployment web", "ADDED Deployment api")
	var inv struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     map[string]any    `json:"spec"`
		Status   struct {
			Conditions []metav1.Condition `json:"conditions"`
		} `json:"status"`
	}
	if err := yaml.Unmarshal([]byte(env.Kubectl(t, ctx, "get", "inventory", "team-a", "-n", "team-a", "-o", "yaml")), &inv); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if inv.Metadata.Generation != 1 || len(inv.Status.Conditions) == 0 {
		t.Errorf("inventory generation %d, conditions %v", inv.Metadata.Generation, inv.Status.Conditions)
	}
	describe := env.Kubectl(t, ctx, "describe", "inventory", "team-a", "-n", "team-a")
	for _, s := range []string{"Name:", "team-a", "Snapshot Sink Refs", "Conditions"} {
		if !strings.Contains(describe, s) {
			t.Errorf("describe lacks %q:\n%s", s, describe)
		}
	}
	table := env.Kubectl(t, ctx, "get", "inventories", "-n", "team-a")
	if !strings.Contains(table, "SINKS") || !strings.Contains(table, "LAST EXPORT") {
		t.Errorf("get inventories lacks the custom columns:\n%s", table)
	}

	// A second, server-side apply of the same files takes ownership without conflict.
	env.Kubectl(t, ctx, "apply", "--server-side", "--force-conflicts", "-f", examples)
	managed := env.Kubectl(t, ctx, "get", "profile", "deployments", "-n", "team-a", "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
	if !strings.Contains(managed, "kubectl") {
		t.Errorf("managed fields managers %q", managed)
	}
	// worker is not selected; relabelling web out of the selector deletes its item.
	env.Kubectl(t, ctx, "label", "deployment", "web", "-n", "team-a", "app=retired", "--overwrite")
	expectLines(t, ctx, items, "DELETED Deployment web")

	env.Kubectl(t, ctx, "delete", "-f", examples, "--wait=false")
	if out, _, err := env.Cluster.Kubectl(ctx, "get", "inventory", "team-a", "-n", "team-a"); err == nil {
		// Namespaced deletion is asynchronous only for the Namespace; the inventory goes at once.
		t.Errorf("inventory still there after delete:\n%s", out)
	}
}

// TestKubectlRejections: invalid objects fail with the field path in
// kubectl's stderr; items cannot be created; nothing lands in a namespace
// that does not exist.
func TestKubectlRejections(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env.Kubectl(t, ctx, "create", "namespace", "rejections")

	stderr := applyFails(t, ctx, `
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: bad, namespace: rejections}
spec:
  exportMinInterval: 25h
  snapshotSinkRefs: [{name: a}, {name: a}]
`)
	for _, s := range []string{"spec.exportMinInterval", "must be at most 24h", "spec.snapshotSinkRefs[1].name", "Duplicate value"} {
		if !strings.Contains(stderr, s) {
			t.Errorf("stderr lacks %q:\n%s", s, stderr)
		}
	}

	stderr = applyFails(t, ctx, `
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: no-namespace}
spec: {profileRef: {name: deployments}}
`)
	if !strings.Contains(stderr, "spec.profileRef.namespace") {
		t.Errorf("stderr lacks spec.profileRef.namespace:\n%s", stderr)
	}

	stderr = createFails(t, ctx, `
apiVersion: kollect.dev/v1alpha1
kind: InventoryItem
metadata: {name: forged, namespace: rejections}
source: {apiVersion: v1, kind: ConfigMap, name: x}
`)
	if !strings.Contains(strings.ToLower(stderr), "method") {
		t.Errorf("creating an item: stderr lacks the 405:\n%s", stderr)
	}

	stderr = applyFails(t, ctx, `
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: limits, namespace: does-not-exist}
spec: {minExportInterval: 1m}
`)
	if !strings.Contains(stderr, `namespaces "does-not-exist" not found`) {
		t.Errorf("missing namespace: stderr:\n%s", stderr)
	}
}

func applyFails(t *testing.T, ctx context.Context, manifest string) string {
	t.Helper()
	return withStdin(t, ctx, manifest, "apply", "-f", "-")
}

func createFails(t *testing.T, ctx context.Context, manifest string) string {
	t.Helper()
	return withStdin(t, ctx, manifest, "create", "-f", "-")
}

func withStdin(t *testing.T, ctx context.Context, manifest string, args ...string) string {
	t.Helper()
	cmd := env.Cluster.KubectlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(manifest)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("kubectl %s succeeded, want failure for:\n%s", strings.Join(args, " "), manifest)
	}
	return stderr.String()
}
