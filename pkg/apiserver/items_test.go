package apiserver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/itemstore"
)

// TestItemsReadOnlyOverHTTP shows that the collector's item store creates,
// updates and deletes items that users can get, list and watch through
// the registry, while every write over HTTP is refused with 405.
func TestItemsReadOnlyOverHTTP(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	items := srv.Client.KollectV1alpha1().InventoryItems("team-a")

	list, err := items.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	w, err := items.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()

	item := &itemstore.Item{
		Name: "web-1234", Namespace: "team-a", Labels: map[string]string{kollect.LabelTarget: "web"},
		Source:     kollect.ItemSource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: "web", UID: "u-1", ResourceVersion: "10"},
		Attributes: map[string]kollect.Value{"image": {Raw: []byte(`["nginx:1.27"]`)}, "replicas": {Raw: []byte(`3`)}},
		Hash:       sha("web v1"),
	}
	if _, err := srv.API.Items.Create(ctx, item); err != nil {
		t.Fatalf("writer create: %v", err)
	}
	expectEvent(t, w, watch.Added, "web-1234")

	got, err := items.Get(ctx, "web-1234", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	if string(got.Attributes["image"].Raw) != `["nginx:1.27"]` || got.Source.UID != "u-1" {
		t.Errorf("got attributes %s, source %+v", got.Attributes["image"].Raw, got.Source)
	}
	for _, sel := range []string{"source.name=web", "source.kind=Deployment", "source.namespace=team-a"} {
		l, err := items.List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(l.Items) != 1 {
			t.Errorf("list with field selector %s: %v, %d items", sel, err, len(l.Items))
		}
	}
	if l, err := items.List(ctx, metav1.ListOptions{FieldSelector: "source.name=other"}); err != nil || len(l.Items) != 0 {
		t.Errorf("list source.name=other: %v, %d items", err, len(l.Items))
	}
	if l, err := items.List(ctx, metav1.ListOptions{LabelSelector: kollect.LabelTarget + "=web"}); err != nil || len(l.Items) != 1 {
		t.Errorf("list by target label: %v, %d items", err, len(l.Items))
	}

	item.Attributes["replicas"] = kollect.Value{Raw: []byte(`4`)}
	item.Hash = sha("web v2")
	if _, err := srv.API.Items.Update(ctx, item); err != nil {
		t.Fatalf("writer update: %v", err)
	}
	expectEvent(t, w, watch.Modified, "web-1234")

	// Every write over HTTP answers 405 Method Not Allowed.
	rc := srv.Client.KollectV1alpha1().RESTClient()
	body := `{"apiVersion":"kollect.dev/v1alpha1","kind":"InventoryItem","metadata":{"name":"forged","namespace":"team-a"},"source":{"apiVersion":"v1","kind":"Pod","name":"x"}}`
	for _, req := range []struct{ verb, name string }{{http.MethodPost, ""}, {http.MethodPut, "web-1234"}, {http.MethodDelete, "web-1234"}, {http.MethodPatch, "web-1234"}} {
		r := rc.Verb(req.verb).Namespace("team-a").Resource("inventoryitems").Body(strings.NewReader(body))
		if req.name != "" {
			r = r.Name(req.name)
		}
		if req.verb == http.MethodPatch {
			r = r.SetHeader("Content-Type", "application/merge-patch+json")
		}
		err := r.Do(ctx).Error()
		if !apierrors.IsMethodNotSupported(err) {
			t.Errorf("%s inventoryitems/%s: %v, want 405", req.verb, req.name, err)
		}
	}

	if err := srv.API.Items.Delete(ctx, "team-a", "web-1234"); err != nil {
		t.Fatalf("writer delete: %v", err)
	}
	expectEvent(t, w, watch.Deleted, "web-1234")

	// Cluster items: same, through their own writer.
	citem := &itemstore.Item{
		Name:   "platform-web-1",
		Source: kollect.ItemSource{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-b", Name: "web", UID: "u-2"},
		Hash:   sha("platform web"),
	}
	if _, err := srv.API.ClusterItems.Create(ctx, citem); err != nil {
		t.Fatalf("cluster writer create: %v", err)
	}
	cl, err := srv.Client.KollectV1alpha1().ClusterInventoryItems().List(ctx, metav1.ListOptions{FieldSelector: "source.namespace=team-b"})
	if err != nil || len(cl.Items) != 1 {
		t.Fatalf("list cluster items: %v, %d", err, len(cl.Items))
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
