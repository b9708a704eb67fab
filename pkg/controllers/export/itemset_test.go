package export

import (
	"fmt"
	"strings"
	"testing"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

func item(name, uid, rv, hash string) *sink.Item {
	return &sink.Item{Namespace: "ns", Name: name, UID: uid, ResourceVersion: rv, Hash: hash}
}

// ops renders changes as "op key uid@rv" for comparison.
func ops(changes []sink.Change) string {
	var out []string
	for _, c := range changes {
		out = append(out, fmt.Sprintf("%s %s %s@%s", c.Op, c.Item.Key(), c.Item.UID, c.Item.ResourceVersion))
	}
	return strings.Join(out, "; ")
}

func expectOps(t *testing.T, what string, b *batch, want string) {
	t.Helper()
	if got := ops(b.changes); got != want {
		t.Errorf("%s:\n got %s\nwant %s", what, got, want)
	}
}

// The owed changes survive failed deliveries: a deletion and an item
// leaving the item set while deliveries fail are still delivered afterwards
// (the bug of a receiver answering 400 for a while).
func TestOwedChangesSurviveFailures(t *testing.T) {
	rv := "10"
	v := newItemSet(func() string { return rv })
	s := v.subscribe()
	v.upsert(exported(item("a", "ua", "1", "h1")))
	v.upsert(exported(item("b", "ub", "2", "h2")))
	v.upsert(exported(item("c", "uc", "3", "h3")))
	b := s.take(false)
	expectOps(t, "first delivery", b, "upsert ns/a ua@1; upsert ns/b ub@2; upsert ns/c uc@3")
	if b.cursor != "10" || b.count != 3 {
		t.Errorf("cursor %q count %d, want 10 and 3", b.cursor, b.count)
	}
	// Acknowledged: nothing is owed.
	if got := s.peek().owed; got != 0 {
		t.Fatalf("owed after an acknowledged delivery: %d", got)
	}

	// During a failing delivery a is deleted and b leaves the selection.
	v.upsert(exported(item("a", "ua", "4", "h1b")))
	b = s.take(false)
	v.remove("ns/a", item("a", "ua", "5", "h1b"))
	v.replace(map[string]*exportedItem{"ns/c": exported(item("c", "uc", "3", "h3"))})
	s.giveBack(b) // the receiver answered 400
	b = s.take(false)
	expectOps(t, "after the failure", b, "delete ns/a ua@5; delete ns/b ub@2")
	s.giveBack(b) // and again
	s.giveBack(s.take(false))
	expectOps(t, "after more failures", s.take(false), "delete ns/a ua@5; delete ns/b ub@2")
}

// An item deleted and recreated with the same content (a new UID) is a
// delete of the old item and an upsert of the new one.
func TestRecreateIsDeleteAndUpsert(t *testing.T) {
	v := newItemSet(func() string { return "" })
	s := v.subscribe()
	v.upsert(exported(item("a", "u1", "1", "same")))
	s.take(false)
	v.remove("ns/a", item("a", "u1", "2", "same"))
	v.upsert(exported(item("a", "u2", "3", "same")))
	expectOps(t, "recreated", s.take(false), "delete ns/a u1@2; upsert ns/a u2@3")
}

// A change undone before delivery is owed nothing; a label edit (same
// hash and UID) is not a change.
func TestCancelledChanges(t *testing.T) {
	v := newItemSet(func() string { return "" })
	s := v.subscribe()
	v.upsert(exported(item("a", "u1", "1", "h1")))
	s.take(false)
	v.upsert(exported(item("a", "u1", "2", "h2")))
	v.upsert(exported(item("a", "u1", "3", "h1")))
	v.upsert(exported(item("a", "u1", "4", "h1")))
	expectOps(t, "changed and changed back", s.take(false), "")
	v.upsert(exported(item("new", "u9", "5", "h9")))
	v.remove("ns/new", item("new", "u9", "6", "h9"))
	expectOps(t, "created and deleted between runs", s.take(false), "")
}

// Two subscriptions of one item set owe independently: one sink's delivery
// does not acknowledge the other's.
func TestSubscriptionsAreIndependent(t *testing.T) {
	v := newItemSet(func() string { return "" })
	s1, s2 := v.subscribe(), v.subscribe()
	v.upsert(exported(item("a", "u1", "1", "h1")))
	s1.take(false)
	v.remove("ns/a", item("a", "u1", "2", "h1"))
	expectOps(t, "s1", s1.take(false), "delete ns/a u1@2")
	expectOps(t, "s2 never delivered a: nothing to delete", s2.take(false), "")
	s2.close()
	v.upsert(exported(item("b", "u2", "3", "h2")))
	if got := s2.peek().owed; got != 0 {
		t.Errorf("a closed subscription is still owed %d changes", got)
	}
}

// A full take returns the live set in key order with the checksum of
// exactly that set.
func TestFullTake(t *testing.T) {
	v := newItemSet(func() string { return "7" })
	s := v.subscribe()
	for _, n := range []string{"c", "a", "b"} {
		v.upsert(exported(item(n, "u"+n, "1", "h"+n)))
	}
	b := s.take(true)
	var keys []string
	for _, it := range b.items {
		keys = append(keys, it.Key())
	}
	if strings.Join(keys, ",") != "ns/a,ns/b,ns/c" {
		t.Errorf("live set order: %v", keys)
	}
	if b.checksum != sink.ChecksumOf(b.items) || b.count != 3 || b.cursor != "7" {
		t.Errorf("checksum %s (want %s), count %d, cursor %s", b.checksum, sink.ChecksumOf(b.items), b.count, b.cursor)
	}
}
