package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apiserver/testserver"
)

// TestServedAPI checks what kubectl relies on: discovery, OpenAPI v3 field
// documentation, table columns, and field paths in rejections.
func TestServedAPI(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("discovery", func(t *testing.T) {
		list, err := srv.Client.Discovery().ServerResourcesForGroupVersion("kollect.dev/v1alpha1")
		if err != nil {
			t.Fatalf("discovery: %v", err)
		}
		want := map[string]struct {
			short      string
			namespaced bool
			verbs      string
		}{
			"profiles": {"prof", true, "full"}, "targets": {"tgt", true, "full"}, "clustertargets": {"ctgt", false, "full"},
			"inventories": {"inv", true, "full"}, "clusterinventories": {"cinv", false, "full"},
			"snapshotsinks": {"ssink", true, "full"}, "databasesinks": {"dsink", true, "full"}, "eventsinks": {"esink", true, "full"},
			"scopes": {"kscope", true, "full"}, "clusterscopes": {"kcscope", false, "full"}, "memberclusters": {"mc", false, "full"},
			"inventoryitems": {"item", true, "get,list,watch"}, "clusterinventoryitems": {"citem", false, "get,list,watch"},
		}
		seen := map[string]bool{}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") {
				continue
			}
			w, ok := want[r.Name]
			if !ok {
				t.Errorf("unexpected resource %s", r.Name)
				continue
			}
			seen[r.Name] = true
			if len(r.ShortNames) != 1 || r.ShortNames[0] != w.short {
				t.Errorf("%s short names %v, want [%s]", r.Name, r.ShortNames, w.short)
			}
			if len(r.Categories) != 1 || r.Categories[0] != "kollect" {
				t.Errorf("%s categories %v, want [kollect]", r.Name, r.Categories)
			}
			if r.Namespaced != w.namespaced || r.SingularName == "" {
				t.Errorf("%s namespaced=%v singular=%q", r.Name, r.Namespaced, r.SingularName)
			}
			verbs := append([]string(nil), r.Verbs...)
			sort.Strings(verbs)
			if w.verbs != "full" && strings.Join(verbs, ",") != w.verbs {
				t.Errorf("%s verbs %v, want %s", r.Name, verbs, w.verbs)
			}
			if w.verbs == "full" && !strings.Contains(strings.Join(verbs, ","), "patch") {
				t.Errorf("%s verbs %v lack patch", r.Name, verbs)
			}
		}
		if len(seen) != len(want) {
			t.Errorf("discovery lists %d of %d resources: %v", len(seen), len(want), seen)
		}
	})

	t.Run("openapi v3 documents Inventory.spec", func(t *testing.T) {
		raw, err := srv.Client.Discovery().RESTClient().Get().AbsPath("/openapi/v3/apis/kollect.dev/v1alpha1").DoRaw(ctx)
		if err != nil {
			t.Fatalf("openapi v3: %v", err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]struct {
					Description string `json:"description"`
					Properties  map[string]struct {
						Description string `json:"description"`
					} `json:"properties"`
				} `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatalf("decode: %v", err)
		}
		spec, ok := doc.Components.Schemas["dev.kollect.v1alpha1.InventorySpec"]
		if !ok {
			t.Fatalf("no InventorySpec schema among %d", len(doc.Components.Schemas))
		}
		for _, f := range []string{"exportMinInterval", "snapshotSinkRefs", "databaseSinkRefs", "eventSinkRefs", "targetSelector", "suspend"} {
			if d := spec.Properties[f].Description; len(d) < 20 {
				t.Errorf("InventorySpec.%s description %q", f, d)
			}
		}
	})

	t.Run("table columns", func(t *testing.T) {
		if _, err := srv.Client.KollectV1alpha1().Inventories("team-a").Create(ctx, &v1alpha1.Inventory{
			ObjectMeta: metav1.ObjectMeta{Name: "tbl", Namespace: "team-a"},
			Spec:       v1alpha1.InventorySpec{SnapshotSinkRefs: []v1alpha1.SinkReference{{Name: "a"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create: %v", err)
		}
		raw, err := srv.Client.KollectV1alpha1().RESTClient().Get().Namespace("team-a").Resource("inventories").
			SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
		if err != nil {
			t.Fatalf("table: %v", err)
		}
		var table metav1.Table
		if err := json.Unmarshal(raw, &table); err != nil {
			t.Fatalf("decode table: %v", err)
		}
		var cols []string
		for _, c := range table.ColumnDefinitions {
			cols = append(cols, c.Name)
		}
		if got := strings.Join(cols, ","); got != "Name,Sinks,Items,Synced,Last Export,Age" {
			t.Errorf("columns %s", got)
		}
		if len(table.Rows) != 1 || fmt.Sprint(table.Rows[0].Cells[1]) != "0/1" || fmt.Sprint(table.Rows[0].Cells[3]) != "Progressing" {
			t.Errorf("rows %+v", table.Rows)
		}
	})

	t.Run("protobuf-preferring clients get JSON", func(t *testing.T) {
		// Kollect's types have no protobuf encoding: the JSON fallback answers.
		res := srv.Client.KollectV1alpha1().RESTClient().Get().Namespace("team-a").Resource("inventories").
			SetHeader("Accept", "application/vnd.kubernetes.protobuf, application/json").Do(ctx)
		var ct string
		res.ContentType(&ct)
		raw, err := res.Raw()
		if err != nil || !strings.HasPrefix(ct, "application/json") || !json.Valid(raw) {
			t.Errorf("err=%v content type %q body %.200s", err, ct, raw)
		}
		// Metadata-only lists (the namespace and garbage collectors) are
		// meta.k8s.io types, which protobuf encodes.
		err = srv.Client.KollectV1alpha1().RESTClient().Get().Namespace("team-a").Resource("inventories").
			SetHeader("Accept", "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json").Do(ctx).Error()
		if err != nil {
			t.Errorf("metadata list: %v", err)
		}
	})

	t.Run("invalid inventory names every field path", func(t *testing.T) {
		refs := make([]v1alpha1.SinkReference, 0, 21)
		for i := 0; i < 20; i++ {
			refs = append(refs, v1alpha1.SinkReference{Name: fmt.Sprintf("sink-%d", i)})
		}
		refs = append(refs, v1alpha1.SinkReference{Name: "sink-3"}) // the 21st, and a duplicate
		_, err := srv.Client.KollectV1alpha1().Inventories("team-a").Create(ctx, &v1alpha1.Inventory{
			ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "team-a"},
			Spec: v1alpha1.InventorySpec{
				ExportMinInterval: &metav1.Duration{Duration: 25 * time.Hour},
				SnapshotSinkRefs:  refs,
			},
		}, metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) {
			t.Fatalf("create: %v, want 422 Invalid", err)
		}
		status := err.(apierrors.APIStatus).Status()
		if status.Code != 422 {
			t.Errorf("code %d, want 422", status.Code)
		}
		fields := map[string]bool{}
		for _, c := range status.Details.Causes {
			fields[c.Field] = true
		}
		for _, f := range []string{"spec.exportMinInterval", "spec.snapshotSinkRefs", "spec.snapshotSinkRefs[20].name"} {
			if !fields[f] {
				t.Errorf("no cause for %s in %v (%v)", f, fields, err)
			}
		}
	})
}
