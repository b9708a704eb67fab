package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestForeignItemWritesHealed is what a former leader that was paused in
// the middle of its item writes does when it resumes after a successor
// took over: it stores an item's older content, deletes an item the
// successor wrote, and creates an item for an object that is gone. The
// test makes those three writes itself, in the replicas' etcd, the way
// another kollect-apiserver's storage would. The leader's collector must
// put every item back as the cluster says it is, long before its next full
// walk (--resync-period, 10 minutes): the items are exactly the
// ConfigMaps again within the test's minute.
func TestForeignItemWritesHealed(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	c := east
	ns := "foreign-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := world{"cm-a": "a1", "cm-b": "b1", "cm-c": "c1"}
	c.workload(ctx, t, ns, w)

	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{c.etcdURL}, DialTimeout: 10 * time.Second})
	must(t, err, "connect to the replicas' etcd")
	defer etcd.Close()
	items := storedItems(ctx, t, etcd, ns)
	if len(items) != len(w) {
		t.Fatalf("%d items of %s in etcd, want %d", len(items), ns, len(w))
	}

	// The older content of cm-a's item, with the hash that content had.
	key, item := items["cm-a"].key, items["cm-a"].object
	item["attributes"].(map[string]any)["value"] = "stale"
	item["hash"] = fakeHash("stale")
	put(ctx, t, etcd, key, item)
	// cm-b's item deleted.
	_, err = etcd.Delete(ctx, items["cm-b"].key)
	must(t, err, "delete cm-b's item in etcd")
	// An item for a ConfigMap that does not exist, made from cm-c's.
	key, item = items["cm-c"].key, items["cm-c"].object
	meta := item["metadata"].(map[string]any)
	meta["name"] = meta["name"].(string) + "-ghost"
	meta["uid"] = "00000000-0000-0000-0000-000000000001"
	item["source"].(map[string]any)["name"] = "cm-ghost"
	item["source"].(map[string]any)["uid"] = "00000000-0000-0000-0000-000000000002"
	item["hash"] = fakeHash("ghost")
	put(ctx, t, etcd, key+"-ghost", item)
	written := time.Now()

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c.waitItems(wctx, t, ns, w)
	t.Logf("the items are the ConfigMaps again %s after the foreign writes", time.Since(written).Round(time.Millisecond))
}

// etcdItem is an item as etcd holds it, by its source's name.
type etcdItem struct {
	key    string
	object map[string]any
}

// storedItems reads the InventoryItems of ns straight from etcd (JSON, the
// server's storage encoding).
func storedItems(ctx context.Context, t *testing.T, etcd *clientv3.Client, ns string) map[string]etcdItem {
	t.Helper()
	resp, err := etcd.Get(ctx, "/", clientv3.WithPrefix())
	must(t, err, "read etcd")
	out := map[string]etcdItem{}
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Key), "/inventoryitems/"+ns+"/") {
			continue
		}
		var obj map[string]any
		must(t, json.Unmarshal(kv.Value, &obj), "decode "+string(kv.Key))
		source, _ := obj["source"].(map[string]any)
		name, _ := source["name"].(string)
		out[name] = etcdItem{key: string(kv.Key), object: obj}
	}
	return out
}

func put(ctx context.Context, t *testing.T, etcd *clientv3.Client, key string, obj map[string]any) {
	t.Helper()
	data, err := json.Marshal(obj)
	must(t, err, "encode "+key)
	_, err = etcd.Put(ctx, key, string(data))
	must(t, err, fmt.Sprintf("write %s in etcd", key))
}

func fakeHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}
