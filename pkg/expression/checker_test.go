package expression

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
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

func drainCheckers() {
	checkers.expire(0)
	answers.mu.Lock()
	defer answers.mu.Unlock()
	answers.order.Init()
	clear(answers.index)
	answers.bytes = 0
}

// idleCheckers is the pids of the idle checkers.
func idleCheckers() []int {
	checkers.mu.Lock()
	defer checkers.mu.Unlock()
	var pids []int
	for _, c := range checkers.idle {
		pids = append(pids, c.cmd.Process.Pid)
	}
	return pids
}

// oneChecker checks an expression and returns the pid of the checker
// kept idle.
func oneChecker(t *testing.T) int {
	t.Helper()
	if _, err := Compile("cel:object.metadata.name"); err != nil {
		t.Fatal(err)
	}
	pids := idleCheckers()
	if len(pids) != 1 {
		t.Fatalf("%d idle checkers; want 1", len(pids))
	}
	return pids[0]
}

func kill(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
}

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

// TestCheckerRecovers: checkers that ended while idle (killed by the
// kernel's OOM killer, say, all of them) are replaced without failing the
// next check, and checks asked for at once wait for a free checker (found
// by review, helper 62: the retry took the next idle checker, as dead).
func TestCheckerRecovers(t *testing.T) {
	withCheckers(t, func() {})
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
	pids := idleCheckers()
	if len(pids) != maxCheckers {
		t.Fatalf("%d checkers idle after 20 checks at once; want %d", len(pids), maxCheckers)
	}
	for _, pid := range pids {
		kill(t, pid)
	}
	if _, err := Compile("cel:object.metadata.name + '-x'"); err != nil {
		t.Errorf("after the idle checkers were killed: %v", err)
	}
	checkers.expire(0)
	if n := len(idleCheckers()); n != 0 {
		t.Errorf("%d checkers idle once expired; want none", n)
	}
}

// TestCheckerBlamesOnlyItsCheck: a checker's peak memory is its whole
// life's, so one that answered a large check and then ended for another
// reason made the next expression, however small, "take too much memory"
// (found by review, helper 62). A checker that grew large is not kept,
// and one killed by a signal was killed by someone else (the kernel's OOM
// killer, short of the container's memory): the server's failure.
func TestCheckerBlamesOnlyItsCheck(t *testing.T) {
	withCheckers(t, func() { skipCounts, checkerMemory, checkCPU, checkWall = true, 300<<20, time.Minute, 5*time.Minute })
	// About 180 MB resident, over half the limit, to check (its types
	// double 15 times; it is refused for its map keys).
	large := "cel:[1]" + strings.Repeat(".map(v, {v: v})", 15) + ".size()"
	if _, err := Compile(large); err == nil || !strings.Contains(err.Error(), "map key") {
		t.Fatalf("a check that stays within its memory: %v; want the map key refused", err)
	}
	if pids := idleCheckers(); len(pids) != 0 {
		t.Errorf("the checker that grew large is kept (%d idle)", len(pids))
	}
	// The same check again, its answer forgotten, killed once it is over
	// half the limit.
	drainCheckers()
	killed := make(chan int, 1)
	go func() {
		for range 6000 {
			for _, pid := range checkerChildren() {
				if residentPeak(pid) > checkerMemory/2 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					killed <- pid
					return
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(killed)
	}()
	_, err := Compile(large)
	if _, ok := <-killed; !ok {
		t.Fatalf("the check never grew past half the limit: %v", err)
	}
	if !errors.Is(err, ErrCheckerUnavailable) {
		t.Errorf("a checker killed by a signal: %v; want ErrCheckerUnavailable", err)
	}
	if _, err := Compile("cel:object.metadata.name + '-x'"); err != nil {
		t.Errorf("an ordinary expression: %v", err)
	}
}

// checkerChildren is the pids of this process's children.
func checkerChildren() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || bytes.LastIndexByte(stat, ')') < 0 {
			continue
		}
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestCheckerAnswersAreKept: an expression checked once is not checked
// again, refused or not, so a tenant repeating one the checker refused
// costs it nothing (found by review, helper 62); the server's failures
// are not kept.
func TestCheckerAnswersAreKept(t *testing.T) {
	withCheckers(t, func() { skipCounts, checkCPU, checkerWait = true, 200*time.Millisecond, 50*time.Millisecond })
	slow := reviewedExpressions["late-bound chain (helper 58: 16.6 s, 6.2 GiB)"]
	const ordinary = "cel:object.spec.replicas * 2"
	_, refused := Compile(slow)
	if refused == nil || errors.Is(refused, ErrCheckerUnavailable) {
		t.Fatalf("%v; want it refused", refused)
	}
	if _, err := Compile(ordinary); err != nil {
		t.Fatal(err)
	}
	for range maxCheckers {
		checkers.slots <- struct{}{} // every checker busy
	}
	defer func() {
		for range maxCheckers {
			<-checkers.slots
		}
	}()
	if _, err := Compile(slow); err == nil || err.Error() != refused.Error() {
		t.Errorf("again, every checker busy: %v; want %v", err, refused)
	}
	if _, err := Compile(ordinary); err != nil {
		t.Errorf("an ordinary expression again, every checker busy: %v", err)
	}
	if _, err := Compile("cel:object.spec.replicas * 3"); !errors.Is(err, ErrCheckerUnavailable) {
		t.Errorf("a new expression, every checker busy: %v; want ErrCheckerUnavailable", err)
	}
}

// TestCheckerThreadsRunBelowTheServer: a priority is a thread's, and the
// checker lowered only its first (found by review, helper 62).
func TestCheckerThreadsRunBelowTheServer(t *testing.T) {
	withCheckers(t, func() {})
	pid := oneChecker(t)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			t.Fatal(err)
		}
		// Field 19, nice, counted from after the command's parenthesis
		// (field 3 onwards).
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if fields[16] != "10" {
			t.Errorf("thread %s runs at nice %s; want 10", task.Name(), fields[16])
		}
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

// TestCheckerNeedsItsStartTime: the watchdog counts a check's processor
// time from what the checker had used before it; when that cannot be read
// (the server short of file descriptors), the check is the server's
// failure, not a refusal kept for good. The watchdog counted the checker's
// whole life instead, and refused an ordinary expression of a checker
// that had answered for 2 s in all (found by review, helper 63).
func TestCheckerNeedsItsStartTime(t *testing.T) {
	withCheckers(t, func() {})
	oneChecker(t)
	// Take every free descriptor, then compile: /proc/<pid>/stat cannot
	// be opened.
	var held []*os.File
	for {
		f, err := os.Open("/dev/null")
		if err != nil {
			break
		}
		held = append(held, f)
	}
	_, err := Compile("cel:object.metadata.name + 'x'")
	for _, f := range held {
		f.Close()
	}
	if !errors.Is(err, ErrCheckerUnavailable) {
		t.Errorf("with no file descriptor left: %v; want ErrCheckerUnavailable", err)
	}
	if _, err := Compile("cel:object.metadata.name + 'x'"); err != nil {
		t.Errorf("once descriptors are free: %v", err)
	}
}
