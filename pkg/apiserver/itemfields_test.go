package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/itemstore"
)

// fleetItem is item i of a collection from cluster: a Deployment whose
// image, replicas and readiness are selectable attributes.
func fleetItem(namespace, cluster string, i int, image string, replicas int, ready bool) *itemstore.Item {
	name := fmt.Sprintf("%s-web-%06d", cluster, i)
	return &itemstore.Item{
		Name: name, Namespace: namespace,
		Labels: map[string]string{kollect.LabelTarget: "fleet", kollect.LabelCluster: cluster},
		Source: kollect.ItemSource{Cluster: cluster, APIVersion: "apps/v1", Kind: "Deployment", Namespace: namespace,
			Name: fmt.Sprintf("web-%06d", i), UID: types.UID(fmt.Sprintf("uid-%s-%d", cluster, i))},
		Attributes: map[string]kollect.Value{
			"image":    {Raw: mustJSON(image)},
			"replicas": {Raw: mustJSON(replicas)},
			"ready":    {Raw: mustJSON(ready)},
			"ports":    {Raw: []byte(`[80,443]`)},
		},
		SelectableAttributes: []string{"image", "replicas", "ready"},
		Hash:                 sha(name),
	}
}

// lister lists one item kind with a field selector, a page at a time.
type lister func(ctx context.Context, opts metav1.ListOptions) (names []string, cont string, err error)

// pageAll lists every page of limit items that selector selects, checking
// that no page is larger than limit, and returns the names in order.
func pageAll(ctx context.Context, t *testing.T, list lister, selector string, limit int64) []string {
	t.Helper()
	var all []string
	opts := metav1.ListOptions{FieldSelector: selector, Limit: limit}
	for {
		names, cont, err := list(ctx, opts)
		if err != nil {
			t.Fatalf("list %s (continue %q): %v", selector, opts.Continue, err)
		}
		if int64(len(names)) > limit {
			t.Fatalf("a page of %d items, over the limit of %d", len(names), limit)
		}
		all = append(all, names...)
		if cont == "" {
			return all
		}
		opts.Continue = cont
	}
}

func clusterItemLister(srv *testserver.Server) lister {
	return func(ctx context.Context, opts metav1.ListOptions) ([]string, string, error) {
		l, err := srv.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, opts)
		if err != nil {
			return nil, "", err
		}
		names := make([]string, len(l.Items))
		for i := range l.Items {
			names[i] = l.Items[i].Name
		}
		return names, l.Continue, nil
	}
}

// TestItemFieldSelectors: both item kinds select by source.cluster and by
// attributes.<name> of their selectable attributes with scalar values
// (strings, numbers, booleans), across pages of limit and continue; an
// attribute that is not selectable is not seen; a malformed
// attributes.<name> is a 400 saying why.
func TestItemFieldSelectors(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var wantNginxEast, wantReplicas3, wantNotReady []string
	for _, store := range []*itemstore.Store{srv.API.ClusterItems, srv.API.Items} {
		ns := ""
		if store == srv.API.Items {
			ns = "team-a"
		}
		for i := range 30 {
			cluster := []string{"east", "west", "north"}[i%3]
			image := []string{"nginx:1.27", "redis:7"}[i%2]
			item := fleetItem(ns, cluster, i, image, i%4, i%5 != 0)
			if i == 0 {
				// image is not selectable here: no selector on it sees it.
				item.SelectableAttributes = []string{"replicas", "ready"}
			}
			if _, err := store.Create(ctx, item); err != nil {
				t.Fatalf("create %s: %v", item.Name, err)
			}
			if ns != "" {
				continue
			}
			if cluster == "east" && image == "nginx:1.27" && i != 0 {
				wantNginxEast = append(wantNginxEast, item.Name)
			}
			if i%4 == 3 {
				wantReplicas3 = append(wantReplicas3, item.Name)
			}
			if i%5 == 0 {
				wantNotReady = append(wantNotReady, item.Name)
			}
		}
	}
	for _, want := range [][]string{wantNginxEast, wantReplicas3, wantNotReady} {
		slices.Sort(want)
	}
	list := clusterItemLister(srv)
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{"source.cluster=east,attributes.image=nginx:1.27", wantNginxEast},
		{"attributes.replicas=3", wantReplicas3},
		{"attributes.ready=false", wantNotReady},
		{"attributes.image=nginx:1.27,attributes.image!=nginx:1.27", nil},
		{"attributes.ports=80", nil},
	} {
		got := pageAll(ctx, t, list, tc.selector, 2)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s:\n got  %v\n want %v", tc.selector, got, tc.want)
		}
	}

	// Namespaced items, the same.
	items := srv.Client.KollectV1alpha1().InventoryItems("team-a")
	l, err := items.List(ctx, metav1.ListOptions{FieldSelector: "source.cluster=east,attributes.image=nginx:1.27"})
	if err != nil || len(l.Items) != len(wantNginxEast) {
		t.Errorf("inventoryitems by cluster and image: %v, %d items, want %d", err, len(l.Items), len(wantNginxEast))
	}
	for _, i := range l.Items {
		if i.Source.Cluster != "east" || !slices.Contains(i.SelectableAttributes, "image") {
			t.Errorf("item %s: source %+v, selectable %v", i.Name, i.Source, i.SelectableAttributes)
		}
	}
	if l, err := items.List(ctx, metav1.ListOptions{LabelSelector: kollect.LabelCluster + "=west"}); err != nil || len(l.Items) != 10 {
		t.Errorf("inventoryitems by the cluster label: %v, %d items, want 10", err, len(l.Items))
	}

	for selector, why := range map[string]string{
		"attributes.1image=x":    `"1image" is not an attribute name`,
		"attributes.image.tag=x": `"image.tag" is not an attribute name`,
		"attributes.=x":          `"" is not an attribute name`,
		"source.region=x":        "field label not supported",
	} {
		_, err := items.List(ctx, metav1.ListOptions{FieldSelector: selector})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want 400 saying %s", selector, err, why)
		}
	}

	// kubectl's table has the cluster.
	rows := clusterTable(ctx, t, srv, "clusterinventoryitems", "metadata.name=east-web-000003", "Name,Cluster,Kind,Source,Target,Hash,Age")
	if len(rows) != 1 || fmt.Sprint(rows[0][:5]) != "[east-web-000003 east Deployment web-000003 fleet]" {
		t.Errorf("rows %v", rows)
	}
}

// pagedItems is how many items TestItemFieldSelectorPaging100k stores.
const pagedItems = 100_000

// TestItemFieldSelectorPaging100k: over 100,000 cluster items, paging
// with limit=500 and a field selector on source.cluster and a selectable
// attribute returns exactly the selected items, each once, in pages of at
// most 500. The items are written as the collector writes them, through
// the item store, by concurrent writers (etcd commits concurrent writes
// together).
func TestItemFieldSelectorPaging100k(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Item i is in cluster east when i is even, with image img-(i%5):
	// east and img-2 select the items whose i ends in 2, a tenth.
	start := time.Now()
	const writers = 64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := w; i < pagedItems; i += writers {
				cluster := []string{"east", "west"}[i%2]
				item := fleetItem("", cluster, i, fmt.Sprintf("img-%d", i%5), i%7, true)
				if _, err := srv.API.ClusterItems.Create(ctx, item); err != nil {
					errs <- fmt.Errorf("create %s: %w", item.Name, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("stored %d items in %s", pagedItems, time.Since(start).Round(time.Millisecond))

	start = time.Now()
	got := pageAll(ctx, t, clusterItemLister(srv), "source.cluster=east,attributes.image=img-2", 500)
	t.Logf("paged through the %d selected items in %s", len(got), time.Since(start).Round(time.Millisecond))
	var want []string
	for i := 2; i < pagedItems; i += 10 {
		want = append(want, fmt.Sprintf("east-web-%06d", i))
	}
	slices.Sort(want)
	if len(got) != len(want) {
		t.Fatalf("%d items selected, want %d", len(got), len(want))
	}
	seen := make(map[string]bool, len(got))
	for i, name := range got {
		if seen[name] {
			t.Fatalf("%s listed twice", name)
		}
		seen[name] = true
		if name != want[i] {
			t.Fatalf("item %d is %s, want %s", i, name, want[i])
		}
	}
}
