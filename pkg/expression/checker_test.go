package expression

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// withCheckers runs the test's checks in checkers started afresh with the
// limits set, and stops them afterwards.
func withCheckers(t *testing.T, set func()) {
	t.Helper()
	memory, cpu, wall, wait, skip := checkerMemory, checkCPU, checkWall, checkerWait, skipCounts
	drainCheckers()
	set()
	t.Cleanup(func() {
		drainCheckers()
		checkerMemory, checkCPU, checkWall, checkerWait, skipCounts = memory, cpu, wall, wait, skip
	})
}

func drainCheckers() { checkers.expire(0) }

// reviewedExpressions each took cel-go's checker seconds and hundreds of
// megabytes to gigabytes in the server before a count refused them.
var reviewedExpressions = map[string]string{
	"message fields (helper 57: 18 s, 6.4 GiB)": "cel:google.protobuf.Int64Value{value: ['x'].map(a, " + strings.Repeat("[", 41) + "a" + strings.Repeat("]", 41) + ")" +
		strings.Repeat(".map(v, {v: v})", 6) + ".map(y, " + times("y == y", 300, " && ") + ").size()}",
	"late-bound chain (helper 58: 16.6 s, 6.2 GiB)": "cel:" + lateChain(16, func(i string) string { return "[{}.transformMap(k, v, k == " + i + " && v == " + i + ", v)]" }),
	"index doubling (helper 60: out of memory)":     "cel:" + indexDoubling(50, "[].all("),
	"generic results (helper 61: 13.7 s, 4.4 GiB)":  "cel:" + indexDoubling(20, "dyn(0).distinct().all("),
	"substitutions (helper 56: 0.8 s, 640 MiB)":     "cel:[" + times("object"+strings.Repeat("[0]", 95), 4, ",") + ",object" + strings.Repeat("[0]", 70) + "," + times("1<1", 364, ",") + "]",
}

// TestCheckerBoundsWhatCountsMiss: the counts before cel-go's checker
// refuse the expressions reviews found, but each review found one the
// counts before it missed. With the counts left out, the checker process
// alone refuses them all, within its processor time, and the server
// process does none of the work.
func TestCheckerBoundsWhatCountsMiss(t *testing.T) {
	withCheckers(t, func() { skipCounts, checkCPU = true, 500*time.Millisecond })
	for what, path := range reviewedExpressions {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Compile(path)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), "takes too") {
			t.Errorf("%s: %v; want it refused for its time or memory", what, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
			t.Errorf("%s: the server allocated %d MiB; want the checker to", what, n>>20)
		}
	}
	if _, err := Compile("cel:object.spec.containers.map(c, c.image)"); err != nil {
		t.Errorf("an ordinary expression after the refusals: %v", err)
	}
}

// TestCheckerRecovers: a checker that ended while idle (killed by the
// kernel, say) is replaced without failing the next check, and checks
// asked for at once wait for a free checker.
func TestCheckerRecovers(t *testing.T) {
	withCheckers(t, func() {})
	const path = "cel:object.metadata.name + '-x'"
	if _, err := Compile(path); err != nil {
		t.Fatal(err)
	}
	checkers.mu.Lock()
	if len(checkers.idle) != 1 {
		t.Fatalf("%d idle checkers; want 1", len(checkers.idle))
	}
	err := checkers.idle[0].cmd.Process.Kill()
	checkers.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(path); err != nil {
		t.Errorf("after the idle checker was killed: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			if _, err := Compile(fmt.Sprintf("cel:object.spec.replicas + %d", i)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("20 checks at once: %v", err)
	}
	checkers.mu.Lock()
	n := len(checkers.idle)
	checkers.mu.Unlock()
	checkers.expire(0)
	checkers.mu.Lock()
	defer checkers.mu.Unlock()
	if n == 0 || n > maxCheckers || len(checkers.idle) != 0 {
		t.Errorf("%d checkers idle after the checks, %d once expired; want 1 to %d, then none", n, len(checkers.idle), maxCheckers)
	}
}

// TestCheckerBusy: when every checker is taken for longer than
// checkerWait, a check fails as the server's fault, so that a collector
// tries again instead of calling the Profile invalid.
func TestCheckerBusy(t *testing.T) {
	withCheckers(t, func() { checkerWait = 50 * time.Millisecond })
	for range maxCheckers {
		checkers.slots <- struct{}{}
	}
	_, err := Compile("cel:object.spec.replicas")
	for range maxCheckers {
		<-checkers.slots
	}
	if !errors.Is(err, ErrCheckerUnavailable) {
		t.Errorf("%v; want ErrCheckerUnavailable", err)
	}
	if _, err := Compile("cel:object.spec.replicas"); err != nil {
		t.Errorf("once free: %v", err)
	}
}
