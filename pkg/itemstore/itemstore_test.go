package itemstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apiserver/testserver"
	"kollect.dev/kollect/pkg/itemstore"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func item(ns, name, uid, content string) *itemstore.Item {
	return &itemstore.Item{
		Namespace: ns, Name: name, Labels: map[string]string{kollect.LabelTarget: "web"},
		Source:     kollect.ItemSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: name, UID: types.UID("src-" + uid), ResourceVersion: "1"},
		Attributes: map[string]kollect.Value{"value": {Raw: []byte(strconv.Quote(content))}},
		Hash:       sha(content),
	}
}

// TestWritesAsTheRegistryReads: what the store writes, the registry serves
// as the registry would have written it: a uid and creation time that
// updates keep, a generation that moves with the hash only, the
// resourceVersion the store returned.
func TestWritesAsTheRegistryReads(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, items := srv.API.Items, srv.Client.KollectV1alpha1().InventoryItems("ns")

	rev, err := store.Create(ctx, item("ns", "a", "1", "v1"))
	if err != nil {
		t.Fatal(err)
	}
	first, err := items.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if first.UID == "" || first.CreationTimestamp.IsZero() || first.Generation != 1 || first.ResourceVersion != fmt.Sprint(rev) ||
		first.Hash != sha("v1") || string(first.Attributes["value"].Raw) != `"v1"` || first.Labels[kollect.LabelTarget] != "web" {
		t.Fatalf("created: %+v", first)
	}
	if _, err := store.Create(ctx, item("ns", "a", "1", "v1")); !apierrors.IsAlreadyExists(err) {
		t.Errorf("second create: %v", err)
	}

	same := item("ns", "a", "1", "v1")
	same.Source.ResourceVersion = "2"
	if _, err := store.Update(ctx, same); err != nil {
		t.Fatal(err)
	}
	changed := item("ns", "a", "1", "v2")
	rev, err = store.Update(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	got, err := items.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != first.UID || !got.CreationTimestamp.Equal(&first.CreationTimestamp) || got.Generation != 2 || got.ResourceVersion != fmt.Sprint(rev) || got.Hash != sha("v2") {
		t.Errorf("updated: uid %s gen %d rv %s (want %d), created %v", got.UID, got.Generation, got.ResourceVersion, rev, got.CreationTimestamp)
	}

	if _, err := store.Update(ctx, item("ns", "missing", "9", "x")); !apierrors.IsNotFound(err) {
		t.Errorf("update of a missing item: %v", err)
	}
	other := item("ns", "a", "other-uid", "v3")
	if _, err := store.Update(ctx, other); !apierrors.IsInvalid(err) {
		t.Errorf("an update changing source.uid: %v", err)
	}
	bad := item("ns", "b", "1", "v1")
	bad.Hash = "not a hash"
	if _, err := store.Create(ctx, bad); !apierrors.IsInvalid(err) {
		t.Errorf("an invalid item: %v", err)
	}

	st, found, err := store.Get(ctx, "ns", "a")
	if err != nil || !found || st.Hash != sha("v2") || st.Source.UID != "src-1" || st.Revision != rev || st.Labels[kollect.LabelTarget] != "web" {
		t.Errorf("get: %+v %v %v", st, found, err)
	}
	if err := store.Delete(ctx, "ns", "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := items.Get(ctx, "a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deleted item: %v", err)
	}
	if err := store.Delete(ctx, "ns", "a"); !apierrors.IsNotFound(err) {
		t.Errorf("second delete: %v", err)
	}
	if _, found, err := store.Get(ctx, "ns", "a"); found || err != nil {
		t.Errorf("get of a deleted item: %v %v", found, err)
	}

	// Cluster items: no namespace in the key.
	citem := item("", "platform-a", "c", "v1")
	citem.Source.Namespace = "team"
	if _, err := srv.API.ClusterItems.Create(ctx, citem); err != nil {
		t.Fatal(err)
	}
	if c, err := srv.Client.KollectV1alpha1().ClusterInventoryItems().Get(ctx, "platform-a", metav1.GetOptions{}); err != nil || c.Source.Namespace != "team" {
		t.Errorf("cluster item: %+v %v", c, err)
	}
}

// TestUpdateRaces: an update whose read is overtaken by another write
// reads again and keeps what the other wrote of the metadata.
func TestUpdateRaces(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := srv.API.Items
	if _, err := store.Create(ctx, item("ns", "a", "1", "v0")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	for w := range 2 {
		go func() {
			for i := range 50 {
				if _, err := store.Update(ctx, item("ns", "a", "1", fmt.Sprintf("w%d-%d", w, i))); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got, err := srv.Client.KollectV1alpha1().InventoryItems("ns").Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Every update changed the hash: 1 + 100 generations.
	if got.Generation != 101 {
		t.Errorf("generation %d after 100 updates, want 101", got.Generation)
	}
}

// TestListAndWatch: a list reads pages at one revision, filtered by
// namespace and labels; a watch from that revision sees every later
// change in order, deletions with the labels they had, and says when its
// revision was compacted.
func TestListAndWatch(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := srv.API.Items
	const n = 2500 // more than a page
	for i := range n {
		ns := "ns-a"
		if i%5 == 0 {
			ns = "ns-b"
		}
		it := item(ns, fmt.Sprintf("i-%05d", i), strconv.Itoa(i), "v")
		if i%2 == 0 {
			it.Labels["even"] = "true"
		}
		if _, err := store.Create(ctx, it); err != nil {
			t.Fatal(err)
		}
	}
	count := func(ns, selector string) (int, int64) {
		sel, err := labels.Parse(selector)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		rev, err := store.List(ctx, ns, sel, func(s itemstore.Stored) { names = append(names, s.Namespace+"/"+s.Name) })
		if err != nil {
			t.Fatal(err)
		}
		if !sort.StringsAreSorted(names) {
			t.Error("not in key order")
		}
		return len(names), rev
	}
	all, rev := count("", "")
	if b, _ := count("ns-b", ""); all != n || b != n/5 {
		t.Errorf("listed %d (want %d), ns-b %d", all, n, b)
	}
	if even, _ := count("", "even=true"); even != n/2 {
		t.Errorf("even=true: %d", even)
	}

	events := store.Watch(ctx, rev)
	if _, err := store.Update(ctx, item("ns-a", "i-00001", "1", "w")); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "ns-a", "i-00003"); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Create(ctx, item("ns-c", "new", "x", "v")); err != nil {
		t.Fatal(err)
	}
	var last int64
	for _, want := range []struct {
		typ  watch.EventType
		name string
	}{{watch.Modified, "i-00001"}, {watch.Deleted, "i-00003"}, {watch.Added, "new"}} {
		ev := <-events
		if ev.Type != want.typ || ev.Item.Name != want.name || ev.Revision <= last || ev.Item.Revision != ev.Revision {
			t.Fatalf("event %+v, want %s %s", ev, want.typ, want.name)
		}
		if !ev.Own && ev.Item.Labels[kollect.LabelTarget] != "web" {
			t.Errorf("%s event without the item's labels: %+v", ev.Type, ev.Item)
		}
		last = ev.Revision
	}

	// Compacted past the position: the watch says so, and ends.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	now, err := store.Revision(ctx)
	if err != nil || now < last {
		t.Fatalf("revision %d, %v", now, err)
	}
	if _, err := cli.Compact(ctx, now); err != nil {
		t.Fatal(err)
	}
	var ended []itemstore.Event
	for ev := range store.Watch(ctx, rev) {
		ended = append(ended, ev)
	}
	if len(ended) != 1 || ended[0].Type != watch.Error || !apierrors.IsResourceExpired(ended[0].Err) {
		t.Errorf("watch of a compacted revision: %+v", ended)
	}
}

// TestWatchTellsOwnWrites: a watch gives the store's own writes as Own,
// undecoded, and any other writer's change whole.
func TestWatchTellsOwnWrites(t *testing.T) {
	srv := testserver.Start(t, testserver.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store := srv.API.Items
	from, err := store.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	created, err := store.Create(ctx, item("ns", "own", "1", "v"))
	if err != nil {
		t.Fatal(err)
	}
	// Another writer (a former leader, say) copies it under another name.
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.EtcdEndpoint}})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	resp, err := cli.Get(ctx, "/registry/kollect.dev/", clientv3.WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("%v, %d keys", err, len(resp.Kvs))
	}
	foreignKey := strings.Replace(string(resp.Kvs[0].Key), "/own", "/foreign", 1)
	foreignValue := strings.Replace(string(resp.Kvs[0].Value), `"name":"own"`, `"name":"foreign"`, 1)
	if _, err := cli.Put(ctx, foreignKey, foreignValue); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "ns", "own"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(ctx, foreignKey); err != nil {
		t.Fatal(err)
	}
	events := store.Watch(ctx, from)
	for _, want := range []struct {
		typ  watch.EventType
		name string
		own  bool
	}{{watch.Added, "own", true}, {watch.Added, "foreign", false}, {watch.Deleted, "own", true}, {watch.Deleted, "foreign", false}} {
		ev := <-events
		if ev.Type != want.typ || ev.Item.Name != want.name || ev.Own != want.own || ev.Item.Namespace != "ns" {
			t.Fatalf("event %+v, want %s %s own=%v", ev, want.typ, want.name, want.own)
		}
		if want.own && ev.Item.Labels != nil {
			t.Errorf("an own write was decoded: %+v", ev.Item)
		}
		if !want.own && (ev.Item.Hash != sha("v") || ev.Item.Labels[kollect.LabelTarget] != "web") {
			t.Errorf("another writer's change (a deletion: as it was) not read whole: %+v", ev.Item)
		}
	}
	if created <= from {
		t.Errorf("created at %d, not after %d", created, from)
	}
}
