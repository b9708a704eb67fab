package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// patcher is the Patch of a typed or dynamic client.
type patcher[T any] interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// finalize removes the finalizers of a deleted object, as its controller
// would: the registry puts the controllers' finalizers on Targets and
// Inventories, and no controller runs in these tests.
func finalize[T any](ctx context.Context, t *testing.T, c patcher[T], name string) {
	t.Helper()
	if _, err := c.Patch(ctx, name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("removing the finalizers of %s: %v", name, err)
	}
}

// clusterTable lists a cluster-scoped resource as kubectl does, as a Table
// (of the objects fieldSelector selects), checks its columns and returns
// its rows' cells, the age left out.
func clusterTable(ctx context.Context, t *testing.T, srv *testserver.Server, resource, fieldSelector, columns string) [][]any {
	t.Helper()
	raw, err := srv.Client.KollectV1alpha1().RESTClient().Get().Resource(resource).Param("fieldSelector", fieldSelector).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("table of %s: %v", resource, err)
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if got := strings.Join(cols, ","); got != columns {
		t.Errorf("%s columns %s, want %s", resource, got, columns)
	}
	rows := make([][]any, len(table.Rows))
	for i, r := range table.Rows {
		rows[i] = r.Cells[:len(r.Cells)-1]
	}
	return rows
}

// kindCase is one resource exercised by the registry tests: a valid object,
// a spec change, and a field two appliers can fight over.
type kindCase struct {
	resource   string
	namespaced bool
	hasStatus  bool
	object     string
	// mutate changes the spec (or, without spec, a top-level field).
	mutate func(u *unstructured.Unstructured)
	// status is an observation written through /status, which must stick.
	status map[string]any
	// contested is a field path (under spec) and two values for the SSA conflict test.
	contested []string
	values    [2]any
}

func gvr(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "kollect.dev", Version: "v1alpha1", Resource: resource}
}

func parse(doc string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		panic(err)
	}
	return u
}

func setSpec(path []string, value any) func(u *unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if err := unstructured.SetNestedField(u.Object, value, append([]string{"spec"}, path...)...); err != nil {
			panic(err)
		}
	}
}

var kindCases = []kindCase{
	{
		resource: "profiles", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: Profile
metadata: {name: deployments, namespace: team-a}
spec:
  targetGVK: {group: apps, version: v1, kind: Deployment}
  attributes:
  - {name: image, path: "{.spec.template.spec.containers[*].image}"}
  - {name: replicas, path: "cel:object.spec.replicas", optional: true}
`,
		status:    map[string]any{"resource": "deployments"},
		mutate:    setSpec([]string{"export", "mode"}, "Resource"),
		contested: []string{"export", "mode"}, values: [2]any{"Attributes", "Resource"},
	},
	{
		resource: "targets", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: Target
metadata: {name: web, namespace: team-a}
spec: {profileRef: {name: deployments}, labelSelector: {matchLabels: {app: web}}}
`,
		status:    map[string]any{"collection": map[string]any{"observedGeneration": int64(2), "itemCount": int64(5)}},
		mutate:    setSpec([]string{"suspend"}, true),
		contested: []string{"profileRef", "name"}, values: [2]any{"deployments", "statefulsets"},
	},
	{
		resource: "clustertargets", hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: ClusterTarget
metadata: {name: platform-deployments}
spec:
  profileRef: {name: deployment-baseline, namespace: kollect-system}
  namespaceSelector: {matchLabels: {kollect.dev/collect: "true"}}
`,
		status:    map[string]any{"collection": map[string]any{"observedGeneration": int64(2), "itemCount": int64(5)}},
		mutate:    setSpec([]string{"suspend"}, true),
		contested: []string{"profileRef", "name"}, values: [2]any{"a", "b"},
	},
	{
		resource: "inventories", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: Inventory
metadata: {name: team-a, namespace: team-a}
spec:
  exportMinInterval: 30s
  snapshotSinkRefs: [{name: audit, exportMinInterval: 1h}]
  databaseSinkRefs: [{name: portal}]
  eventSinkRefs: [{name: changes, exportMinInterval: 0s}]
`,
		status:    map[string]any{"sinkExports": []any{map[string]any{"family": "Snapshot", "name": "audit", "observedGeneration": int64(2), "outcome": "Exported"}}},
		mutate:    setSpec([]string{"exportMinInterval"}, "1m0s"),
		contested: []string{"exportMinInterval"}, values: [2]any{"1m0s", "2m0s"},
	},
	{
		resource: "clusterinventories", hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: ClusterInventory
metadata: {name: platform-rollup}
spec:
  sinkNamespace: kollect-system
  targetRefs: [{name: platform-deployments}]
  snapshotSinkRefs: [{name: git-backup}, {name: team-git, namespace: team-a}]
`,
		status:    map[string]any{"sinkExports": []any{map[string]any{"family": "Snapshot", "name": "git-backup", "observedGeneration": int64(2), "outcome": "Exported"}}},
		mutate:    setSpec([]string{"exportMinInterval"}, "1m0s"),
		contested: []string{"exportMinInterval"}, values: [2]any{"1m0s", "2m0s"},
	},
	{
		resource: "snapshotsinks", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: SnapshotSink
metadata: {name: audit, namespace: team-a}
spec:
  type: git
  endpoint: https://git.example.com/platform/inventory.git
  secretRef: {name: git-token}
  exportMinInterval: 1h
  serialization: {format: yaml}
  git: {branch: main}
`,
		status:    map[string]any{"probe": map[string]any{"succeeded": true, "message": "pushed to main"}},
		mutate:    setSpec([]string{"exportMinInterval"}, "2h0m0s"),
		contested: []string{"git", "branch"}, values: [2]any{"main", "audit"},
	},
	{
		resource: "databasesinks", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: DatabaseSink
metadata: {name: portal, namespace: team-a}
spec: {type: postgres, secretRef: {name: portal-db}, postgres: {schema: public, table: inventory}}
`,
		status:    map[string]any{"probe": map[string]any{"succeeded": true, "message": "connected"}},
		mutate:    setSpec([]string{"postgres", "table"}, "inventory2"),
		contested: []string{"postgres", "table"}, values: [2]any{"one", "two"},
	},
	{
		resource: "eventsinks", namespaced: true, hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: EventSink
metadata: {name: changes, namespace: team-a}
spec: {type: nats, endpoint: "nats://nats.example.com:4222", nats: {stream: kollect, subject: "kollect.{namespace}.{inventory}"}}
`,
		status:    map[string]any{"probe": map[string]any{"succeeded": true, "message": "stream found"}},
		mutate:    setSpec([]string{"nats", "stream"}, "kollect2"),
		contested: []string{"nats", "stream"}, values: [2]any{"one", "two"},
	},
	{
		resource: "memberclusters", hasStatus: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: MemberCluster
metadata: {name: east, labels: {region: eu}}
spec: {kubeconfigSecretRef: {namespace: kollect-system, name: east-kubeconfig}}
`,
		status:    map[string]any{"collection": map[string]any{"observedGeneration": int64(2), "reachable": true, "itemCount": int64(5)}},
		mutate:    setSpec([]string{"suspend"}, true),
		contested: []string{"kubeconfigSecretRef", "name"}, values: [2]any{"a", "b"},
	},
	{
		resource: "scopes", namespaced: true,
		object: `
apiVersion: kollect.dev/v1alpha1
kind: Scope
metadata: {name: limits, namespace: team-a}
spec: {minExportInterval: 1m, allowedGVKs: [{group: apps, kind: Deployment}], snapshotSinkRefs: [audit]}
`,
		mutate:    setSpec([]string{"minExportInterval"}, "2m0s"),
		contested: []string{"minExportInterval"}, values: [2]any{"1m0s", "5m0s"},
	},
	{
		resource: "clusterscopes",
		object: `
apiVersion: kollect.dev/v1alpha1
kind: ClusterScope
metadata: {name: platform}
spec: {minExportInterval: 1m, referenceNamespaces: [kollect-system, team-a]}
`,
		mutate:    setSpec([]string{"minExportInterval"}, "2m0s"),
		contested: []string{"minExportInterval"}, values: [2]any{"1m0s", "5m0s"},
	},
}
