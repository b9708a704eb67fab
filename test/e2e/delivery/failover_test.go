package delivery

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/localcluster"
)

// epochs lists the distinct epochs of a stream's events, in order of
// first appearance.
func epochs(msgs []streamMsg) []int64 {
	var out []int64
	for _, m := range msgs {
		if len(out) == 0 || !containsEpoch(out, m.event.Epoch) {
			out = append(out, m.event.Epoch)
		}
	}
	return out
}

func containsEpoch(es []int64, e int64) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// epochOf is a term's epoch as docs/export.md defines it: the time the
// holder acquired the Lease, in microseconds.
func epochOf(l *coordinationv1.Lease) int64 {
	if l == nil || l.Spec.AcquireTime == nil {
		return 0
	}
	return l.Spec.AcquireTime.UnixMicro()
}

// takeOver waits until the Lease names another holder than before, with
// more transitions, and the other replica reports that it leads; it
// returns the Lease and how long that took.
func (c *kcluster) takeOver(ctx context.Context, t *testing.T, old *localcluster.Process, before *coordinationv1.Lease) (*coordinationv1.Lease, time.Duration) {
	t.Helper()
	begin := time.Now()
	eventually(ctx, t, c.name+": the follower takes the lease", func(ctx context.Context) (bool, string) {
		l, err := lease(ctx, c.kube)
		if err != nil {
			return false, err.Error()
		}
		return holder(l) != holder(before) && holder(l) != "" && transitions(l) > transitions(before),
			fmt.Sprintf("holder %s, transitions %d", holder(l), transitions(l))
	})
	took := time.Since(begin)
	lead, l := c.leader(ctx, t, old)
	if lead == old {
		t.Fatalf("%s still leads", old.Name())
	}
	if epochOf(l) <= epochOf(before) {
		t.Fatalf("the new term's epoch %d is not after the old one's %d", epochOf(l), epochOf(before))
	}
	return l, took
}

// checkEpochs checks the epochs of a stream across one take-over: the
// former leader's events (epoch old) all come before the first event of
// the new one (epoch new), which also publishes the last.
func checkEpochs(t *testing.T, what string, msgs []streamMsg, old, new int64) {
	t.Helper()
	seenNew := false
	for _, m := range msgs {
		switch e := m.event.Epoch; {
		case e == new:
			seenNew = true
		case e == old && !seenNew:
		default:
			t.Errorf("%s: message %d (%s) carries epoch %d; want %d (the killed leader's) before the first of %d (the new leader's)", what, m.seq, m.event.ID, e, old, new)
			return
		}
	}
	if !seenNew {
		t.Errorf("%s: no event of the new leader (epoch %d)", what, new)
	}
}

// TestKillLeaderMidPublish is issue 11's fault "kill -9 of the leader in
// the middle of a publish batch": two replicas behind one APIService; the
// leader is killed while it publishes the first export of 2,000 items to
// NATS and a webhook (and writes them to Postgres); changes are made while
// no replica leads and after the other one took over. Every sink ends
// with the live set: the Postgres rows, and both event streams folded by
// the reference consumer; nothing is lost, and the only duplicates are
// re-deliveries under an id already seen.
func TestKillLeaderMidPublish(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := east
	ns := "kill-" + randomSuffix()
	c.namespace(ctx, t, ns)
	const n = 2000
	w := world{}
	for i := range n {
		w[fmt.Sprintf("cm-%04d", i)] = fmt.Sprintf("v1-%d", i)
	}
	begin := time.Now()
	c.workload(ctx, t, ns, w)
	t.Logf("%d ConfigMaps collected in %s", n, time.Since(begin).Round(time.Millisecond))

	f := c.newFanout(ctx, t, ns)
	lead, l0 := c.leader(ctx, t)
	follower := c.other(lead)
	c.serveFrom(ctx, t, follower)
	// Whatever the verdict, the killed replica runs again afterwards, so
	// that the next test finds two.
	t.Cleanup(func() {
		if !lead.Running() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := lead.Start(ctx); err != nil {
				t.Errorf("restarting %s: %v", lead.Name(), err)
			}
		}
	})
	f.createInventory(ctx, t)

	// Kill the leader once both event sinks receive the batch (resynced +
	// 2,000 upserts each). Each sink has its own exporter, and one often
	// starts a second later than the other: the kill lands inside the
	// batch of the later one at least.
	err := wait.PollUntilContextCancel(ctx, 2*time.Millisecond, true, func(context.Context) (bool, error) {
		return f.hook.Requests() > 0 && f.nats.Stats(f.path()).Events > 0, nil
	})
	must(t, err, "the first publish starts")
	must(t, lead.Kill(), "kill -9 the leader")
	killed := time.Now()
	hookAt, natsAt, rowsAt := f.hook.Requests(), f.streamCount(ctx), f.rowCount(ctx)
	t.Logf("killed %s (lease holder %s, epoch %d) with %d webhook deliveries, %d NATS messages and %d rows (-1: no table yet) of %d items",
		lead.Name(), holder(l0), epochOf(l0), hookAt, natsAt, rowsAt, n)
	if hookAt > n && natsAt > n {
		t.Fatalf("both event sinks had the whole batch (%d events) before the kill (%d, %d); the test did not interrupt it", n+1, hookAt, natsAt)
	}

	// Changes while no replica leads: the next leader owes them.
	c.apply(ctx, t, ns, w, burst(w, 20, "leaderless", "leaderless"))
	l1, took := c.takeOver(ctx, t, lead, l0)
	t.Logf("%s took over %s after the kill (lease duration %s); epoch %d → %d", follower.Name(), took.Round(time.Millisecond), leaseDuration, epochOf(l0), epochOf(l1))
	// The killed replica comes back as a follower before any verdict.
	must(t, lead.Start(ctx), "restart "+lead.Name())
	// Changes the new leader exports as they come.
	c.apply(ctx, t, ns, w, burst(w, 20, "after", "after"))
	c.waitItems(ctx, t, ns, w)

	l := c.waitConverged(ctx, t, "every sink holds the live set after the take-over", ns, f.checks()...)
	c.waitSynced(ctx, t, ns, "inv", l.checksum(), 3)
	t.Logf("converged %s after the kill: %d items", time.Since(killed).Round(time.Millisecond), len(l.hash))
	f.foldsSound(t)
	msgs := streamMessages(ctx, t, f.stream)
	repeats := checkIDs(t, "nats", msgs)
	t.Logf("nats stream: %d messages, %d repeating an id, epochs %v", len(msgs), repeats, epochs(msgs))
	checkEpochs(t, "nats", msgs, epochOf(l0), epochOf(l1))
}

// TestPausedLeaderFenced is issue 11's fault "a failover where the old
// leader is paused (SIGSTOP), the new one exports, then the old one
// resumes". When it is paused the leader owes the webhook changes (the
// receiver fails them) and has just been handed more; while it is paused
// the follower takes the lease and exports more changes; then the old one
// resumes and, until it notices that it lost the lease, acts on what it
// owed and on what its watches deliver late. Nothing it writes survives:
// Postgres refuses its batches (ErrFenced: the stored epoch is newer) and
// the consumer ignores its events (older epoch). The rows and both folded
// streams equal the live set.
func TestPausedLeaderFenced(t *testing.T) {
	ctx := testContext(t, 5*time.Minute)
	c := east
	ns := "pause-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := numbered(300, "cm-%04d", "v1-%d")
	c.workload(ctx, t, ns, w)
	f := c.newFanout(ctx, t, ns)
	old, l0 := c.leader(ctx, t)
	follower := c.other(old)
	c.serveFrom(ctx, t, follower)
	f.createInventory(ctx, t)
	l := c.waitConverged(ctx, t, "first export", ns, f.checks()...)
	c.waitSynced(ctx, t, ns, "inv", l.checksum(), 3)

	// 1. Changes the leader owes the webhook: the receiver refuses them.
	f.hook.Fail(http.StatusServiceUnavailable)
	tried := f.hook.Requests()
	c.apply(ctx, t, ns, w, burst(w, 10, "owed", "owed"))
	c.waitItems(ctx, t, ns, w)
	eventually(ctx, t, "the leader tries the failing webhook", func(context.Context) (bool, string) {
		return f.hook.Requests() > tried, fmt.Sprintf("%d deliveries", f.hook.Requests()-tried)
	})
	// 2. Changes it has only just been handed: pause it at once.
	c.apply(ctx, t, ns, w, burst(w, 10, "pending", "pending"))
	must(t, signal(old, syscall.SIGSTOP), "SIGSTOP the leader")
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = signal(old, syscall.SIGCONT)
		}
	})
	t.Logf("paused %s (lease holder %s, epoch %d)", old.Name(), holder(l0), epochOf(l0))

	// 3. The follower takes over and exports, the webhook heals, more
	// changes come.
	l1, took := c.takeOver(ctx, t, old, l0)
	t.Logf("%s took over %s after the pause; epoch %d → %d", follower.Name(), took.Round(time.Millisecond), epochOf(l0), epochOf(l1))
	f.hook.Heal()
	c.apply(ctx, t, ns, w, burst(w, 10, "during", "during"))
	c.waitItems(ctx, t, ns, w)
	l = c.waitConverged(ctx, t, "the new leader exports while the old one is paused", ns, f.checks()...)
	natsBefore, hookBefore := f.nats.Stats(f.path()), f.hook.Fold.Stats(f.path())
	cursorBefore := cursorEpoch(ctx, t, f)

	// 4. The old leader resumes, and runs until it notices the lost lease.
	offset := logSize(old)
	must(t, signal(old, syscall.SIGCONT), "SIGCONT the old leader")
	paused = false
	resumed := time.Now()
	eventually(ctx, t, "the old leader stops its controllers", func(context.Context) (bool, string) {
		log := logSince(old, offset)
		return len(linesWith(log, "Controllers stopped")) > 0, "not yet"
	})
	stoppedAfter := time.Since(resumed)
	oldLog := logSince(old, offset)

	// Nothing of it survives, now and after a while.
	l = c.waitConverged(ctx, t, "the sinks hold the live set after the old leader resumed", ns, f.checks()...)
	time.Sleep(2 * watchdog)
	if err := checkAll(ctx, c, ns, f.checks()); err != nil {
		t.Errorf("the sinks changed after converging: %v", err)
	}
	if now := cursorEpoch(ctx, t, f); now != epochOf(l1) {
		t.Errorf("postgres cursor epoch %d (before the resume %d); want the new leader's %d", now, cursorBefore, epochOf(l1))
	}

	// What the old leader tried, and what became of it.
	nats, hook := f.foldsSound(t)
	fenced := linesWith(oldLog, sink.ErrFenced.Error())
	failedExports := linesWith(oldLog, "Export failed")
	staleNATS, staleHook := nats.Stale-natsBefore.Stale, hook.Stale-hookBefore.Stale
	dupNATS, dupHook := nats.Duplicates-natsBefore.Duplicates, hook.Duplicates-hookBefore.Duplicates
	t.Logf("old leader %s ran %s after SIGCONT before stopping its controllers; meanwhile: %d log lines naming a fenced write, %d failed exports; "+
		"consumer: nats %d stale + %d duplicate events, webhook %d stale + %d duplicate events; postgres cursor epoch %d",
		old.Name(), stoppedAfter.Round(time.Millisecond), len(fenced), len(failedExports), staleNATS, dupNATS, staleHook, dupHook, cursorBefore)
	for i, line := range fenced {
		if i == 3 {
			break
		}
		t.Logf("  %s", line)
	}
	if len(fenced)+staleNATS+staleHook == 0 {
		t.Errorf("the old leader wrote nothing after resuming (no fenced batch, no stale event): the scenario did not exercise fencing; its log since SIGCONT:\n%s", tail(oldLog, 40))
	}
	msgs := streamMessages(ctx, t, f.stream)
	repeats := checkIDs(t, "nats", msgs)
	t.Logf("nats stream: %d messages, %d repeating an id, epochs %v", len(msgs), repeats, epochs(msgs))

	// The status is the new leader's: a former leader's report (a Fenced
	// failure written after it lost the lease) does not stay. Bounded by
	// ten watchdog periods, so that the figures above are reported anyway.
	sctx, cancel := context.WithTimeout(ctx, 10*watchdog)
	defer cancel()
	if err := c.pollSynced(sctx, ns, "inv", l.checksum(), 3); err != nil {
		t.Errorf("status after the old leader stopped: %v", err)
	}
}

// checkAll runs the checks once against the live set.
func checkAll(ctx context.Context, c *kcluster, ns string, checks []check) error {
	l, err := c.live(ctx, ns)
	if err != nil {
		return err
	}
	var errs []string
	for _, ch := range checks {
		if err := ch.fn(ctx, l); err != nil {
			errs = append(errs, ch.name+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

// cursorEpoch reads the epoch stored with the inventory's cursor.
func cursorEpoch(ctx context.Context, t *testing.T, f *fanout) int64 {
	t.Helper()
	var epoch int64
	err := pg.QueryRow(ctx, "SELECT epoch FROM "+pgx.Identifier{f.schema, table + "_cursors"}.Sanitize()+
		" WHERE cluster = $1 AND inventory_namespace = $2 AND inventory_name = $3", f.c.name, f.ns, "inv").Scan(&epoch)
	must(t, err, "read the cursor's epoch")
	return epoch
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
