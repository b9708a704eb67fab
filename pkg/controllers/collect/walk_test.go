package collect

import (
	"fmt"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"kollect.dev/kollect/pkg/controllers/source"
)

func walkObject(t *testing.T, ns, name string) *source.Object {
	t.Helper()
	o, err := source.Decode([]byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":%q,"name":%q}}`, ns, name)), source.Shape{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestWalkFeeder: a walk's objects reach the queue a few at a time, every
// one of them once, objects before the keys the index knew; a full walk
// replaces a target's walks, stop ends them.
func TestWalkFeeder(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[queuedObject]())
	defer q.ShutDown()
	f := newWalkFeeder(q, 2) // at most 8 queued by walks
	a := targetKey{Namespace: "ns", Name: "a"}
	run := &walkRun{key: a, full: true, known: []string{"ns/gone-1", "ns/gone-2"}}
	for i := range 20 {
		run.objects = append(run.objects, walkObject(t, "ns", fmt.Sprintf("cm-%02d", i)))
	}
	f.start(run)
	f.feed()
	if n := q.Len(); n != f.limit {
		t.Fatalf("%d queued, want the limit %d", n, f.limit)
	}
	var seen []string
	for q.Len() > 0 {
		k, _ := q.Get()
		seen = append(seen, k.name)
		q.Done(k)
		f.feed() // as a worker does after each object
		if q.Len() > f.limit {
			t.Fatalf("%d queued, over the limit", q.Len())
		}
	}
	if len(seen) != 22 || seen[0] != "cm-00" || seen[19] != "cm-19" || seen[20] != "gone-1" || seen[21] != "gone-2" {
		t.Fatalf("fed %v", seen)
	}
	if f.running.Load() {
		t.Error("a finished walk still runs")
	}

	// A namespace walk beside a full one; a new full walk replaces both;
	// stop ends it.
	f.start(&walkRun{key: a, full: true, objects: []*source.Object{walkObject(t, "ns", "x")}})
	f.start(&walkRun{key: a, namespace: "ns", known: []string{"ns/y"}})
	if len(f.runs) != 2 {
		t.Fatalf("%d walks, want the full walk and the namespace's", len(f.runs))
	}
	f.start(&walkRun{key: a, full: true})
	if len(f.runs) != 1 {
		t.Fatalf("%d walks after a new full walk, want 1", len(f.runs))
	}
	f.feed() // an empty walk ends at once
	if len(f.runs) != 0 || q.Len() != 0 {
		t.Fatalf("an empty walk: %d walks, %d queued", len(f.runs), q.Len())
	}
	f.start(&walkRun{key: a, full: true, known: []string{"ns/z"}})
	f.stop(a)
	f.feed()
	if len(f.runs) != 0 || f.running.Load() || q.Len() != 0 {
		t.Errorf("after stop: %d walks, %d queued", len(f.runs), q.Len())
	}
}

// TestRebuildAfterTargetEnd: a full walk reads storage and the index's
// targets, then rebuilds the index. A target that ended in between (one
// deleted without its finalizer, known to the index only) must not get
// its index back: its items would count against the quota and a new
// target of the same name would take them for its own.
func TestRebuildAfterTargetEnd(t *testing.T) {
	c := quotaCollector(t)
	ended := targetKey{Namespace: "ns", Name: "gone"}
	listed := targetKey{Namespace: "ns", Name: "new"}
	c.quotaTarget(ended, itemsQuota(10))
	stored := map[targetKey][]storedItem{
		ended:  {{namespace: "ns", name: "gone-1", target: "gone", objKey: "ns/cm-1"}},
		listed: {{namespace: "ns", name: "new-1", target: "new", objKey: "ns/cm-1"}},
	}
	c.index.remove(ended) // the target's end, after the walk read the index's targets
	c.index.rebuild(stored, func(key targetKey) bool { return key == listed })
	if c.index.existing(ended) != nil {
		t.Error("the full walk gave an ended target its index back")
	}
	if x := c.index.existing(listed); x == nil || x.items["new-1"] == nil {
		t.Error("a listed target without an index must get one with its stored items")
	}
}
