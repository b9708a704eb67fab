package collect

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// quotaCollector is a collector with its index and queues only: what the
// quota bookkeeping touches.
func quotaCollector(t *testing.T) *Collector {
	c := &Collector{targets: newTargetSet(),
		objectQueue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[queuedObject]()),
		statusQueue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[targetKey]())}
	c.index = newItemIndex(c.queueObject, c.queueStatus)
	c.informers = newInformerSet(nil, nil, informerHandlers{})
	c.walks = newWalkFeeder(c.objectQueue, 1)
	t.Cleanup(func() { c.objectQueue.ShutDown(); c.statusQueue.ShutDown() })
	return c
}

// quotaTarget adds a collecting target under quota qs.
func (c *Collector) quotaTarget(key targetKey, qs tenancy.QuotaSet) *indexed {
	c.targets.update(key, func(t *target) { t.spec = &targetSpec{} })
	c.index.setLimits(key, true, qs)
	return c.index.target(key)
}

func itemsQuota(limit int64) tenancy.QuotaSet {
	return tenancy.NamespaceQuotas("team-a", []kollect.Scope{{ObjectMeta: metav1.ObjectMeta{Name: "quota", Namespace: "team-a"},
		Spec: kollect.ScopeSpec{MaxItems: ptr.To(limit)}}}, tenancy.Quotas{MaxItemBytes: 1024})
}

// TestQuotaCounts: the namespace's count follows the index of all its
// targets; places are reserved before a write, so concurrent writers
// cannot overshoot; the ClusterTargets count apart.
func TestQuotaCounts(t *testing.T) {
	c := quotaCollector(t)
	a := c.quotaTarget(targetKey{Namespace: "team-a", Name: "a"}, itemsQuota(3))
	b := c.quotaTarget(targetKey{Namespace: "team-a", Name: "b"}, itemsQuota(3))
	other := c.quotaTarget(targetKey{Namespace: "team-b", Name: "a"}, itemsQuota(3))
	cluster := c.quotaTarget(targetKey{Cluster: true, Name: "a"}, itemsQuota(3))

	c.index.mu.Lock()
	c.index.indexLocked(a, "a-1", &itemEntry{objKey: "team-a/1"})
	c.index.indexLocked(a, "a-1", &itemEntry{objKey: "team-a/1"}) // an update: no new place
	c.index.indexLocked(b, "b-2", &itemEntry{objKey: "team-a/2"})
	c.index.indexLocked(other, "a-1", &itemEntry{objKey: "team-b/1"})
	c.index.indexLocked(cluster, "a-1", &itemEntry{objKey: "team-a/1"})
	c.index.mu.Unlock()
	if u := c.index.usage["team-a"]; u.items != 2 {
		t.Fatalf("team-a holds %d items, want 2", u.items)
	}
	if c.index.usage["team-b"].items != 1 || c.index.usage[""].items != 1 {
		t.Fatalf("team-b %d, cluster %d, want 1 each", c.index.usage["team-b"].items, c.index.usage[""].items)
	}

	if !c.index.reserve(a, "team-a/3") {
		t.Fatal("the third place of three is free")
	}
	if c.index.reserve(b, "team-a/4") {
		t.Fatal("a reserved place must count: the quota is full")
	}
	if !c.index.reserve(other, "team-b/2") || !c.index.reserve(cluster, "team-a/2") {
		t.Fatal("other namespaces and the cluster kinds have their own quotas")
	}
	c.index.mu.Lock()
	c.index.indexLocked(a, "a-3", &itemEntry{objKey: "team-a/3"})
	c.index.commitLocked(a)
	c.index.mu.Unlock()
	if u := c.index.usage["team-a"]; u.items != 3 || u.pending != 0 {
		t.Fatalf("after the write: %+v, want 3 items, none pending", *u)
	}

	c.index.mu.Lock()
	c.index.unindexLocked(a, "a-1")
	c.index.unindexAllLocked(b)
	c.index.mu.Unlock()
	if u := c.index.usage["team-a"]; u.items != 1 {
		t.Fatalf("after removals: %d items, want 1", u.items)
	}
}

// TestQuotaWaiting: objects over the quota are counted by reason in the
// report, whose message names the limit; when places free, as many
// waiting objects as there are places are queued; a target that stops
// collecting stops waiting.
func TestQuotaWaiting(t *testing.T) {
	c := quotaCollector(t)
	a := c.quotaTarget(targetKey{Namespace: "team-a", Name: "a"}, itemsQuota(2))
	b := c.quotaTarget(targetKey{Namespace: "team-a", Name: "b"}, itemsQuota(2))
	d := c.quotaTarget(targetKey{Namespace: "team-a", Name: "d"}, itemsQuota(2))
	c.index.mu.Lock()
	c.index.indexLocked(a, "a-1", &itemEntry{objKey: "team-a/1"})
	c.index.indexLocked(a, "a-2", &itemEntry{objKey: "team-a/2"})
	c.index.mu.Unlock()
	for i := 3; i <= 6; i++ {
		c.index.setOverQuota(b, fmt.Sprintf("team-a/%d", i), overCount)
	}
	c.index.setOverQuota(b, "team-a/big", overSize)
	c.index.setOverQuota(b, "team-a/3", overCount) // again: no change
	c.index.setOverQuota(d, "team-a/3", overCount)
	if w := c.index.usage["team-a"].waiting; w != 5 {
		t.Fatalf("%d waiting, want 5 (the oversized object waits for nothing)", w)
	}

	c.index.mu.Lock()
	n, msg := c.index.quotaReportLocked(b)
	c.index.mu.Unlock()
	if n != 5 {
		t.Errorf("overQuotaCount %d, want 5", n)
	}
	for _, want := range []string{
		`4 matching objects not collected: the Targets of namespace "team-a" hold 2 items and the limit is 2, the maxItems of Scope "quota" in namespace "team-a"`,
		"1 matching object not collected: each item would be larger than 1Ki, the --default-max-item-bytes of the server",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q\nwants %q", msg, want)
		}
	}
	if n, _ := c.index.quotaReportLocked(a); n != 0 {
		t.Errorf("target a reports %d over quota", n)
	}

	// One item goes: one waiting object, of either target, is tried.
	c.index.mu.Lock()
	c.index.unindexLocked(a, "a-1")
	c.index.mu.Unlock()
	if got := c.objectQueue.Len(); got != 1 {
		t.Fatalf("%d objects queued after one place freed, want 1", got)
	}
	k, _ := c.objectQueue.Get()
	c.objectQueue.Done(k)
	// The limit rises: every object over the quota is tried again.
	c.index.setLimits(b.key, true, itemsQuota(10))
	if got := c.objectQueue.Len(); got != 5 {
		t.Fatalf("%d objects queued after the limit rose, want all 5", got)
	}

	// Collected, or no longer matching: no longer waiting.
	c.index.setOverQuota(b, "team-a/3", 0)
	c.index.mu.Lock()
	c.index.clearOverQuotaLocked(b)
	c.index.clearOverQuotaLocked(d)
	c.index.mu.Unlock()
	if w := c.index.usage["team-a"].waiting; w != 0 || len(b.overQuota) != 0 {
		t.Fatalf("%d waiting, %d over quota after clearing, want none", w, len(b.overQuota))
	}
}

// TestTooLarge: maxItemBytes bounds attributes or object, as stored.
func TestTooLarge(t *testing.T) {
	q := itemsQuota(10) // 1Ki of bytes, by default
	small := map[string]kollect.Value{"a": {Raw: []byte(`"x"`)}}
	big := map[string]kollect.Value{"a": {Raw: []byte(`"` + strings.Repeat("x", 1024) + `"`)}}
	if tooLarge(q, small, nil) || !tooLarge(q, big, nil) || !tooLarge(q, nil, &kollect.Value{Raw: []byte(strings.Repeat("1", 1025))}) {
		t.Error("maxItemBytes not applied")
	}
	if tooLarge(tenancy.QuotaSet{}, big, nil) {
		t.Error("no maxItemBytes limits nothing")
	}
}

// TestFreedPlaceGoesToAWaitingObject (CI's TestItemQuota once ended at 99
// of 100): a place freed while a woken object is still writing goes to
// another waiting object, not back to the one that already holds a place;
// a place given back unwritten is offered again too.
func TestFreedPlaceGoesToAWaitingObject(t *testing.T) {
	for round := range 40 {
		c := quotaCollector(t)
		a := c.quotaTarget(targetKey{Namespace: "team-a", Name: "a"}, itemsQuota(2))
		c.index.mu.Lock()
		c.index.indexLocked(a, "a-1", &itemEntry{objKey: "team-a/1"})
		c.index.indexLocked(a, "a-2", &itemEntry{objKey: "team-a/2"})
		c.index.mu.Unlock()
		c.index.setOverQuota(a, "team-a/x", overCount)
		c.index.setOverQuota(a, "team-a/y", overCount)

		// One place frees: one object is woken, takes it and writes.
		c.index.mu.Lock()
		c.index.unindexLocked(a, "a-1")
		c.index.mu.Unlock()
		k, _ := c.objectQueue.Get()
		woken := objKeyOfQueued(k)
		if !c.index.reserve(a, woken) {
			t.Fatalf("round %d: %s was woken for a free place and found none", round, woken)
		}
		// Another frees while that write is in flight: the other object.
		c.index.mu.Lock()
		c.index.unindexLocked(a, "a-2")
		c.index.mu.Unlock()
		if c.objectQueue.Len() != 1 {
			t.Fatalf("round %d: the second freed place woke no waiting object (%s holds the first)", round, woken)
		}
		next, _ := c.objectQueue.Get()
		if objKeyOfQueued(next) == woken {
			t.Fatalf("round %d: the second freed place went to %s, which holds the first", round, woken)
		}
		c.objectQueue.Done(next)

		// The write fails and its object stops matching: the place it gives
		// back is offered to whoever still waits.
		c.index.setOverQuota(a, "team-a/z", overCount)
		c.index.mu.Lock()
		c.index.releaseLocked(a)
		c.index.mu.Unlock()
		c.objectQueue.Done(k)
		if c.objectQueue.Len() == 0 {
			t.Fatalf("round %d: a place given back unwritten woke no waiting object", round)
		}
	}
}

func objKeyOfQueued(q queuedObject) string {
	k := q.key()
	return objectKeyOf(k.namespace, k.name)
}
