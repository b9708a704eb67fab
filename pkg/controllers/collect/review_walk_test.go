package collect

import (
	"fmt"
	"testing"

	"k8s.io/client-go/util/workqueue"
)

// TestReviewWalkFeederLimitWithManyWalks: docs/architecture.md says "the
// queue holds at most four keys per worker" and TestWalkFeeder holds the
// feeder to its limit, but feed adds one key of every running walk per
// round before it checks the limit again: with more walks than the limit
// (a full walk starts one per target at once) the walks alone fill the
// queue past it, by up to one key per walk.
func TestReviewWalkFeederLimitWithManyWalks(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[queuedObject]())
	defer q.ShutDown()
	f := newWalkFeeder(q, 1) // limit 4
	for i := range 50 {
		run := &walkRun{key: targetKey{Namespace: "ns", Name: fmt.Sprintf("t-%02d", i)}, full: true}
		for j := range 10 {
			run.objects = append(run.objects, walkObject(t, "ns", fmt.Sprintf("cm-%02d", j)))
		}
		f.start(run)
	}
	f.feed()
	if n := q.Len(); n > f.limit {
		t.Fatalf("walks queued %d keys, over the limit of %d (4 per worker)", n, f.limit)
	}
}
