package eventfold

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

var (
	now     = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	eastApp = sink.Inventory{Cluster: "east", Kind: "Inventory", Namespace: "team-a", Name: "apps"}
)

// item makes an item of inv's namespace whose hash follows its content.
func item(name, uid, rv, content string) *sink.Item {
	h := sha256.Sum256([]byte(content))
	return &sink.Item{
		Namespace: "team-a", Name: name, Target: "web", Profile: "deployments",
		Source:     sink.Source{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: name, UID: "src-" + uid},
		Attributes: json.RawMessage(`{"content":"` + content + `"}`),
		Hash:       hex.EncodeToString(h[:]),
		UID:        uid, ResourceVersion: rv,
	}
}

func up(inv sink.Inventory, it *sink.Item, epoch int64, token string) sink.Event {
	return sink.NewEvent(inv, sink.Change{Op: sink.Upsert, Item: it}, epoch, token, now)
}

func del(inv sink.Inventory, it *sink.Item, epoch int64) sink.Event {
	return sink.NewEvent(inv, sink.Change{Op: sink.Delete, Item: it}, epoch, "", now)
}

// resync is what the exporter publishes for a resync of items: the
// resynced event, then one upsert per item in key order.
func resync(inv sink.Inventory, token string, epoch int64, items ...*sink.Item) []sink.Event {
	sorted := append([]*sink.Item(nil), items...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Key() < sorted[j].Key() })
	evs := []sink.Event{sink.NewResyncEvent(inv, token, len(items), sink.ChecksumOf(items), epoch, now)}
	for _, it := range sorted {
		evs = append(evs, up(inv, it, epoch, token))
	}
	return evs
}

// feed applies the events through their JSON form, as a receiver gets them.
func feed(t *testing.T, f *Fold, evs ...sink.Event) {
	t.Helper()
	for _, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.ApplyJSON(b); err != nil {
			t.Fatalf("ApplyJSON(%s): %v", ev.ID, err)
		}
	}
}

func live(items ...*sink.Item) map[string]string {
	m := map[string]string{}
	for _, it := range items {
		m[it.Key()] = it.Hash
	}
	return m
}

func wantStats(t *testing.T, f *Fold, path string, want Stats) {
	t.Helper()
	got := f.Stats(path)
	if got != want {
		t.Fatalf("Stats(%s) = %+v, want %+v", path, got, want)
	}
	t.Logf("%s: %+v", path, got)
}

func wantEqual(t *testing.T, f *Fold, path string, items ...*sink.Item) {
	t.Helper()
	if err := f.Equal(path, live(items...)); err != nil {
		t.Fatal(err)
	}
}

// Rule 1: a re-delivered sequence is counted and changes nothing. Without
// the rule, the repeated upsert of a after its delete would bring a back.
func TestRedeliveryIsCountedAndHarmless(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a, b := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1")
	seq := []sink.Event{up(eastApp, a, 1, ""), up(eastApp, b, 1, ""), del(eastApp, a, 1)}
	feed(t, f, seq...)
	wantEqual(t, f, p, b)
	feed(t, f, seq...) // the publisher failed after the last one and sent all three again
	wantEqual(t, f, p, b)
	wantStats(t, f, p, Stats{Events: 6, Duplicates: 3})
	got := f.Items(p)["team-a/b"]
	if got.UID != "uid-b" || got.ResourceVersion != "11" {
		t.Errorf("folded b has uid %q rv %q, want the event's uid-b and 11", got.UID, got.ResourceVersion)
	}
}

// Rule 2: once a newer leader spoke for an inventory, the events of a
// former leader that resumes are ignored, whatever they say.
func TestStaleEpochIsIgnoredAfterANewerOne(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a, b, c := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"), item("c", "uid-c", "12", "c1")
	feed(t, f, resync(eastApp, "t1", 1, a, b)...)
	// The leader of epoch 1 pauses; the leader of epoch 2 resyncs: b was
	// deleted meanwhile and c created.
	feed(t, f, resync(eastApp, "t2", 2, a, c)...)
	wantEqual(t, f, p, a, c)
	// The former leader resumes and publishes what it still owed.
	b2 := item("b", "uid-b", "13", "b2")
	feed(t, f, up(eastApp, b2, 1, ""), del(eastApp, a, 1), del(eastApp, c, 1), resync(eastApp, "t-old", 1)[0])
	wantEqual(t, f, p, a, c)
	wantStats(t, f, p, Stats{Events: 10, Stale: 4, ResyncsStarted: 2, ResyncsCompleted: 2})
	// The current leader goes on.
	feed(t, f, del(eastApp, a, 2))
	wantEqual(t, f, p, c)
}

// Rules 3, 4 and 6: a resync restates the live set; what the consumer
// held and the resync did not restate goes once the last upsert arrived,
// and the result is checked against the announced checksum.
func TestResyncDropsUnseenItemsAndVerifiesTheChecksum(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a, b, c := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"), item("c", "uid-c", "12", "c1")
	feed(t, f, up(eastApp, a, 1, ""), up(eastApp, b, 1, ""), up(eastApp, c, 1, ""))
	// A new process (deletes of a and c were lost with the old one):
	// the live set is b (changed) and d.
	b2, d := item("b", "uid-b", "20", "b2"), item("d", "uid-d", "21", "d1")
	evs := resync(eastApp, "t1", 1, b2, d)
	feed(t, f, evs[:2]...) // the resynced event and b
	if !f.Stats(p).Pending {
		t.Fatal("the resync is not pending after 1 of its 2 upserts")
	}
	// Until the resync completes, nothing is dropped: a and c may still be live.
	wantEqual(t, f, p, a, b2, c)
	feed(t, f, evs[2])
	wantEqual(t, f, p, b2, d)
	wantStats(t, f, p, Stats{Events: 6, ResyncsStarted: 1, ResyncsCompleted: 1})

	// A resync whose upserts do not add up to its checksum is counted.
	bad := resync(eastApp, "t2", 1, b2, d)
	bad[0].Data.Resync.Checksum = sink.ChecksumOf([]*sink.Item{b2})
	feed(t, f, bad...)
	wantEqual(t, f, p, b2, d)
	wantStats(t, f, p, Stats{Events: 9, ResyncsStarted: 2, ResyncsCompleted: 2, ChecksumMismatches: 1})
}

// Rule 3: a resync of an empty live set completes at once and empties.
func TestResyncOfNothingEmpties(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	feed(t, f, up(eastApp, item("a", "uid-a", "10", "a1"), 1, ""), up(eastApp, item("b", "uid-b", "11", "b1"), 1, ""))
	evs := resync(eastApp, "t1", 1)
	if len(evs) != 1 || evs[0].Data.Resync.Checksum != strings.Repeat("0", 64) {
		t.Fatalf("an empty resync is %d events with checksum %s", len(evs), evs[0].Data.Resync.Checksum)
	}
	feed(t, f, evs...)
	if n := len(f.Items(p)); n != 0 {
		t.Fatalf("%d items left after a resync of nothing", n)
	}
	wantStats(t, f, p, Stats{Events: 3, ResyncsStarted: 1, ResyncsCompleted: 1})
}

// A resync abandoned half way (its publisher failed) is replaced by the
// next one; its upserts arriving later are ordinary upserts and do not
// count toward the new resync.
func TestAbandonedResyncIsReplacedByANewerOne(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a, b, c, x := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"),
		item("c", "uid-c", "12", "c1"), item("x", "uid-x", "13", "x1")
	old := resync(eastApp, "t1", 1, a, b, c)
	feed(t, f, old[:3]...) // a and b, then the publisher failed
	if !f.Stats(p).Pending {
		t.Fatal("t1 is not pending")
	}
	next := resync(eastApp, "t2", 1, b, c)
	feed(t, f, next[0])
	// An upsert tagged with the abandoned token (x, a straggler) is
	// ordinary: it is folded but does not complete t2 with b.
	feed(t, f, up(eastApp, x, 1, "t1"), next[1])
	if !f.Stats(p).Pending {
		t.Fatal("t2 completed before its second upsert: the t1 upsert counted toward it")
	}
	wantEqual(t, f, p, a, b, x)
	feed(t, f, next[2])
	wantEqual(t, f, p, b, c)
	wantStats(t, f, p, Stats{Events: 7, ResyncsStarted: 2, ResyncsCompleted: 1})
}

// Rule 5: deleting and recreating an object with the same content gives
// the item a new UID; the delete of the old UID never removes the new
// item, in whichever order the two arrive.
func TestDeleteOfAnOldUIDKeepsTheRecreatedItem(t *testing.T) {
	p := sink.InventoryPath(eastApp)
	old, recreated := item("a", "uid-1", "10", "same"), item("a", "uid-2", "14", "same")

	// In the order the exporter owes them: delete(old uid), upsert(new uid).
	f := New()
	feed(t, f, up(eastApp, old, 1, ""), del(eastApp, old, 1), up(eastApp, recreated, 1, ""))
	wantEqual(t, f, p, recreated)

	// An anti-drift resync ran between the recreate and the publish of
	// the owed delete: the resync restated the new item, and the delete
	// of the old one arrives after it, with nothing after it to repair
	// a wrong removal.
	f = New()
	feed(t, f, up(eastApp, old, 1, ""))
	feed(t, f, resync(eastApp, "t1", 1, recreated)...)
	feed(t, f, del(eastApp, old, 1))
	wantEqual(t, f, p, recreated)
	if got := f.Items(p)["team-a/a"].UID; got != "uid-2" {
		t.Fatalf("folded a has uid %s, want uid-2", got)
	}
	feed(t, f, del(eastApp, recreated, 1))
	wantEqual(t, f, p)
	wantStats(t, f, p, Stats{Events: 5, ResyncsStarted: 1, ResyncsCompleted: 1})
}

// Two inventories of one cluster and same-named inventories of two
// clusters share a stream: each folds apart, with its own epoch and
// resyncs, though item keys and UIDs coincide.
func TestInventoriesAndClustersFoldApart(t *testing.T) {
	f := New()
	other := eastApp
	other.Name = "other"
	west := eastApp
	west.Cluster = "west"
	cluster := sink.Inventory{Cluster: "east", Kind: "ClusterInventory", Name: "apps"}
	a, b := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1")
	ca := item("a", "uid-a", "10", "cluster")
	ca.Namespace = ""

	feed(t, f,
		up(eastApp, a, 5, ""), up(eastApp, b, 5, ""),
		up(other, a, 1, ""),
		up(west, a, 1, ""), up(west, b, 1, ""), // epoch 1 < east's 5: not stale, another inventory
		up(cluster, ca, 5, ""),
	)
	feed(t, f, resync(other, "t1", 1)...) // empties other only
	feed(t, f, del(west, a, 1))           // same id as east's delete would be, but for west

	wantEqual(t, f, sink.InventoryPath(eastApp), a, b)
	wantEqual(t, f, sink.InventoryPath(other))
	wantEqual(t, f, sink.InventoryPath(west), b)
	wantEqual(t, f, sink.InventoryPath(cluster), ca)
	want := []string{"east/ClusterInventory/apps", "east/Inventory/team-a/apps", "east/Inventory/team-a/other", "west/Inventory/team-a/apps"}
	if got := f.Inventories(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Inventories() = %v, want %v", got, want)
	}
	wantStats(t, f, sink.InventoryPath(west), Stats{Events: 3})
	wantStats(t, f, sink.InventoryPath(other), Stats{Events: 2, ResyncsStarted: 1, ResyncsCompleted: 1})
}

func TestEqualNamesTheDifferences(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a, b, c := item("a", "uid-a", "10", "a1"), item("b", "uid-b", "11", "b1"), item("c", "uid-c", "12", "c1")
	feed(t, f, up(eastApp, a, 1, ""), up(eastApp, b, 1, ""))
	b2 := item("b", "uid-b", "12", "b2")
	err := f.Equal(p, live(b2, c))
	if err == nil {
		t.Fatal("Equal of different sets is nil")
	}
	for _, want := range []string{"extra team-a/a", "different team-a/b", "missing team-a/c", "3 keys differ"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Equal's error %q does not say %q", err, want)
		}
	}
	// At most 10 keys are named.
	many := map[string]string{}
	for i := range 25 {
		many[fmt.Sprintf("team-a/m%02d", i)] = "h"
	}
	err = f.Equal(p, many)
	if err == nil || !strings.Contains(err.Error(), "and 17 more") || strings.Contains(err.Error(), "m24") {
		t.Errorf("Equal with 27 differences: %v", err)
	}
	if err := f.Equal("nobody/Inventory/x/y", map[string]string{}); err != nil {
		t.Errorf("an unknown inventory is not equal to the empty set: %v", err)
	}
}

// An event the fold cannot use is refused whole, with the field named,
// and reported by Err; it changes nothing.
func TestInvalidEventsAreRefusedWithTheField(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a := item("a", "uid-a", "10", "a1")
	feed(t, f, up(eastApp, a, 1, ""))

	noItem := up(eastApp, item("b", "uid-b", "11", "b1"), 1, "")
	noItem.Data.Item = nil
	noUID := del(eastApp, a, 1)
	noUID.Data.ItemUID = ""
	wrongSubject := up(eastApp, item("c", "uid-c", "12", "c1"), 1, "")
	wrongSubject.Subject = "team-a/zzz"
	noResync := sink.NewResyncEvent(eastApp, "t", 0, strings.Repeat("0", 64), 1, now)
	noResync.Data.Resync = nil
	unknown := up(eastApp, a, 1, "")
	unknown.Type = "dev.kollect.item.touched"
	otherCluster := del(eastApp, a, 1)
	otherCluster.Cluster = "west"

	for _, tc := range []struct {
		ev    sink.Event
		field string
	}{
		{noItem, "data.item: missing"},
		{noUID, "data.itemUID: missing"},
		{wrongSubject, "subject"},
		{noResync, "data.resync: missing"},
		{unknown, "type: unknown event type"},
		{otherCluster, "kollectcluster"},
	} {
		b, _ := json.Marshal(tc.ev)
		err := f.ApplyJSON(b)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("ApplyJSON(%s) = %v, want an error naming %q", tc.ev.ID, err, tc.field)
		}
	}
	if err := f.ApplyJSON([]byte(`{"specversion": "1.0", "id": 7}`)); err == nil || !strings.Contains(err.Error(), "decoding") {
		t.Errorf("ApplyJSON of a number id = %v", err)
	}
	f.Apply(sink.Event{SpecVersion: "1.0", ID: "x", Type: sink.EventTypeUpserted})
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), "data.inventory.name: missing") {
		t.Errorf("Err() = %v, want the invalid events, the last without an inventory", err)
	}
	wantEqual(t, f, p, a)
	wantStats(t, f, p, Stats{Events: 1})
}

// WaitEqual returns once an event makes the fold equal, and the last
// difference when its context ends first.
func TestWaitEqual(t *testing.T) {
	f := New()
	p := sink.InventoryPath(eastApp)
	a := item("a", "uid-a", "10", "a1")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go f.Apply(up(eastApp, a, 1, ""))
	if err := f.WaitEqual(ctx, p, live(a)); err != nil {
		t.Fatal(err)
	}
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	err := f.WaitEqual(done, p, live())
	if err == nil || !strings.Contains(err.Error(), "extra team-a/a") || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("WaitEqual with an ended context = %v", err)
	}
}
