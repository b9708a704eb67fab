package delivery

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/e2e/framework"
)

func testContext(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually polls cond until it holds or ctx ends; the failure shows the
// last reason cond gave.
func eventually(ctx context.Context, t *testing.T, what string, cond func(ctx context.Context) (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, why := cond(ctx)
		last = why
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not reached before the deadline; last: %s", what, last)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// namespace creates a namespace deleted after the test.
func (c *kcluster) namespace(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	_, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err, c.name+": namespace "+name)
	t.Cleanup(func() { _ = c.kube.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

func (c *kcluster) secret(ctx context.Context, t *testing.T, ns, name string, data map[string]string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: data}
	_, err := c.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{})
	must(t, err, c.name+": secret "+name)
}

// world is what the items of a namespace must be: the labelled ConfigMaps,
// name to data.value. Tests change the ConfigMaps through the methods
// below, which keep it up to date.
type world map[string]string

const selectLabel = "app"

func configMap(name, value string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{selectLabel: "web"}},
		Data:       map[string]string{"value": value},
	}
}

// workload creates the ConfigMaps of w (8 at a time), a Profile whose one
// attribute is data.value and a Target "web" selecting the labelled
// ConfigMaps, and waits until the items are exactly w.
func (c *kcluster) workload(ctx context.Context, t *testing.T, ns string, w world) {
	t.Helper()
	names := make([]string, 0, len(w))
	for name := range w {
		names = append(names, name)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			for j := i; j < len(names); j += 8 {
				if _, err := c.kube.CoreV1().ConfigMaps(ns).Create(ctx, configMap(names[j], w[names[j]]), metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%s: creating ConfigMaps: %v", c.name, err)
	}
	c.configMapProfile(ctx, t, ns)
	_, err := c.kollect.KollectV1alpha1().Targets(ns).Create(ctx, &v1alpha1.Target{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: v1alpha1.TargetSpec{ProfileRef: v1alpha1.LocalObjectReference{Name: "configmaps"},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{selectLabel: "web"}}},
	}, metav1.CreateOptions{})
	must(t, err, c.name+": target")
	c.waitItems(ctx, t, ns, w)
}

// numbered is a world of n ConfigMaps, the i-th named and valued by the
// formats name and value applied to i.
func numbered(n int, name, value string) world {
	w := world{}
	for i := range n {
		w[fmt.Sprintf(name, i)] = fmt.Sprintf(value, i)
	}
	return w
}

// configMapProfile creates the Profile "configmaps" of ns: ConfigMaps,
// with their data.value as the attribute value.
func (c *kcluster) configMapProfile(ctx context.Context, t *testing.T, ns string) {
	t.Helper()
	_, err := c.kollect.KollectV1alpha1().Profiles(ns).Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps"},
		Spec: v1alpha1.ProfileSpec{TargetGVK: v1alpha1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"},
			Attributes: []v1alpha1.Attribute{{Name: "value", Path: "cel:object.data.value"}}},
	}, metav1.CreateOptions{})
	must(t, err, c.name+": profile")
}

// change is one step of a burst of changes; each kind is one way an item
// changes or goes: an update, a deletion, the object leaving the
// selector, and a new object.
type change struct {
	op, name, value string
}

func updateOf(name, value string) change { return change{"update", name, value} }
func deletionOf(name string) change      { return change{op: "delete", name: name} }
func unlabelOf(name string) change       { return change{op: "unlabel", name: name} }
func creationOf(name, value string) change {
	return change{"create", name, value}
}

// apply makes the changes (4 at a time, each ConfigMap at most once) and
// records them in w.
func (c *kcluster) apply(ctx context.Context, t *testing.T, ns string, w world, changes []change) {
	t.Helper()
	cms := c.kube.CoreV1().ConfigMaps(ns)
	do := func(ch change) error {
		switch ch.op {
		case "create":
			_, err := cms.Create(ctx, configMap(ch.name, ch.value), metav1.CreateOptions{})
			return err
		case "delete":
			return cms.Delete(ctx, ch.name, metav1.DeleteOptions{})
		}
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cm, err := cms.Get(ctx, ch.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ch.op == "update" {
				cm.Data["value"] = ch.value
			} else {
				delete(cm.Labels, selectLabel)
			}
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			return err
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(changes))
	for i := range 4 {
		wg.Go(func() {
			for j := i; j < len(changes); j += 4 {
				if err := do(changes[j]); err != nil {
					errs <- fmt.Errorf("%s %s: %w", changes[j].op, changes[j].name, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("%s: %v", c.name, err)
	}
	for _, ch := range changes {
		switch ch.op {
		case "create", "update":
			w[ch.name] = ch.value
		default:
			delete(w, ch.name)
		}
	}
}

// burst is a mix of every kind of change over the ConfigMaps of w named
// by first..: n updates, n deletions, n objects leaving the selector and
// n new objects (named with prefix), values tagged with tag.
func burst(w world, n int, tag, prefix string) []change {
	names := make([]string, 0, len(w))
	for name := range w {
		names = append(names, name)
	}
	sort.Strings(names)
	if len(names) < 3*n {
		panic(fmt.Sprintf("burst of %d needs %d ConfigMaps, the world has %d", n, 3*n, len(names)))
	}
	var out []change
	for i := range n {
		out = append(out,
			updateOf(names[i], tag+"-"+names[i]),
			deletionOf(names[n+i]),
			unlabelOf(names[2*n+i]),
			creationOf(fmt.Sprintf("%s-%03d", prefix, i), tag+"-new"))
	}
	return out
}

func attrString(it *v1alpha1.InventoryItem, name string) string {
	var s string
	if v, ok := it.Attributes[name]; ok {
		if err := json.Unmarshal(v.Raw, &s); err != nil {
			return fmt.Sprintf("invalid %q", v.Raw)
		}
	}
	return s
}

// waitItems waits until the namespace's items are exactly w: one per
// labelled ConfigMap, with its value.
func (c *kcluster) waitItems(ctx context.Context, t *testing.T, ns string, w world) {
	t.Helper()
	eventually(ctx, t, fmt.Sprintf("%s: the %d items of %s", c.name, len(w), ns), func(ctx context.Context) (bool, string) {
		list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(list.Items) != len(w) {
			return false, fmt.Sprintf("%d items, want %d", len(list.Items), len(w))
		}
		for i := range list.Items {
			it := &list.Items[i]
			if want, ok := w[it.Source.Name]; !ok || attrString(it, "value") != want {
				return false, fmt.Sprintf("item of %s: value %q, want %q (present %v)", it.Source.Name, attrString(it, "value"), want, ok)
			}
		}
		return true, ""
	})
}

// liveSet is the items of a namespace as the sinks must hold them, by
// item key.
type liveSet struct {
	hash, uid map[string]string
}

func (l liveSet) checksum() string {
	var c sink.Checksum
	for k, h := range l.hash {
		c.Add(k, h)
	}
	return c.String()
}

func (c *kcluster) live(ctx context.Context, ns string) (liveSet, error) {
	list, err := c.kollect.KollectV1alpha1().InventoryItems(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return liveSet{}, err
	}
	l := liveSet{hash: map[string]string{}, uid: map[string]string{}}
	for _, it := range list.Items {
		key := it.Namespace + "/" + it.Name
		l.hash[key], l.uid[key] = it.Hash, string(it.UID)
	}
	return l, nil
}

// check compares what one sink holds with the live set.
type check struct {
	name string
	fn   func(ctx context.Context, l liveSet) error
}

// waitConverged waits until every check passes against the same reading
// of the live set, and returns that reading.
func (c *kcluster) waitConverged(ctx context.Context, t *testing.T, what, ns string, checks ...check) liveSet {
	t.Helper()
	var l liveSet
	eventually(ctx, t, what, func(ctx context.Context) (bool, string) {
		var err error
		if l, err = c.live(ctx, ns); err != nil {
			return false, err.Error()
		}
		var errs []error
		for _, ch := range checks {
			if err := ch.fn(ctx, l); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ch.name, err))
			}
		}
		if len(errs) > 0 {
			return false, errors.Join(errs...).Error()
		}
		return true, ""
	})
	return l
}

// diff describes how got (key to value) differs from want, naming up to 10
// keys; "" when equal.
func diff(got, want map[string]string) string {
	var d []string
	for k, v := range want {
		if g, ok := got[k]; !ok {
			d = append(d, "missing "+k)
		} else if g != v {
			d = append(d, fmt.Sprintf("different %s (%.12s, want %.12s)", k, g, v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k)
		}
	}
	if len(d) == 0 {
		return ""
	}
	sort.Strings(d)
	n := len(d)
	if n > 10 {
		d = append(d[:10], fmt.Sprintf("and %d more", n-10))
	}
	return fmt.Sprintf("%d differ: %s", n, strings.Join(d, "; "))
}

// waitSynced waits until the Inventory's every entry (sinks of them)
// reports checksum at the current generation, and Synced is True.
func (c *kcluster) waitSynced(ctx context.Context, t *testing.T, ns, name, checksum string, sinks int) {
	t.Helper()
	if err := c.pollSynced(ctx, ns, name, checksum, sinks); err != nil {
		t.Fatal(err)
	}
}

// pollSynced is waitSynced returning the last difference when ctx ends.
func (c *kcluster) pollSynced(ctx context.Context, ns, name, checksum string, sinks int) error {
	var last string
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		inv, err := c.kollect.KollectV1alpha1().Inventories(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		if len(inv.Status.SinkExports) != sinks {
			last = fmt.Sprintf("%d entries: %+v", len(inv.Status.SinkExports), inv.Status.SinkExports)
			return false, nil
		}
		for _, e := range inv.Status.SinkExports {
			if e.LastChecksum != checksum || e.ObservedGeneration != inv.Generation || e.Outcome == v1alpha1.OutcomeFailed {
				last = fmt.Sprintf("%s/%s: outcome %s reason %s checksum %.12s gen %d: %s", e.Family, e.Name, e.Outcome, e.Reason, e.LastChecksum, e.ObservedGeneration, e.Message)
				return false, nil
			}
		}
		cond := meta.FindStatusCondition(inv.Status.Conditions, v1alpha1.ConditionSynced)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != inv.Generation {
			last = fmt.Sprintf("Synced %+v", cond)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s: inventory %s/%s not synced at %.12s: %s", c.name, ns, name, checksum, last)
	}
	return nil
}

func inventoryPath(cluster, ns, name string) string {
	return sink.InventoryPath(sink.Inventory{Cluster: cluster, Kind: "Inventory", Namespace: ns, Name: name})
}

// lease reads the controllers' Lease.
func lease(ctx context.Context, kube kubernetes.Interface) (*coordinationv1.Lease, error) {
	return kube.CoordinationV1().Leases(localcluster.KollectNamespace).Get(ctx, "kollect-controllers", metav1.GetOptions{})
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func transitions(l *coordinationv1.Lease) int32 {
	if l == nil || l.Spec.LeaseTransitions == nil {
		return 0
	}
	return *l.Spec.LeaseTransitions
}

// replicaMetrics reads the /metrics of one replica, directly.
func (c *kcluster) replicaMetrics(ctx context.Context, p *localcluster.Process) (string, error) {
	cfg := c.cluster.KollectRESTConfig(p)
	cfg.Timeout = 5 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	body, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	return string(body), err
}

// leader waits until exactly one running replica reports that it leads
// (kollect_controllers_leader) and the Lease names a holder; it returns
// that replica and the Lease. skip are replicas not to ask (paused ones,
// whose /metrics would not answer).
func (c *kcluster) leader(ctx context.Context, t *testing.T, skip ...*localcluster.Process) (*localcluster.Process, *coordinationv1.Lease) {
	t.Helper()
	var (
		lead *localcluster.Process
		l    *coordinationv1.Lease
	)
	eventually(ctx, t, c.name+": one leader", func(ctx context.Context) (bool, string) {
		var leaders []*localcluster.Process
		var state []string
		for _, p := range c.replicas {
			if !p.Running() || contains(skip, p) {
				continue
			}
			m, err := c.replicaMetrics(ctx, p)
			if err != nil {
				return false, err.Error()
			}
			v := framework.SampleSum(m, "kollect_controllers_leader")
			state = append(state, fmt.Sprintf("%s=%v", p.Name(), v))
			if v == 1 {
				leaders = append(leaders, p)
			}
		}
		if len(leaders) != 1 {
			return false, strings.Join(state, " ")
		}
		var err error
		if l, err = lease(ctx, c.kube); err != nil || holder(l) == "" {
			return false, fmt.Sprintf("lease: %v, holder %q", err, holder(l))
		}
		lead = leaders[0]
		return true, ""
	})
	return lead, l
}

func contains(ps []*localcluster.Process, p *localcluster.Process) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// other is the replica that is not p (the cluster has two).
func (c *kcluster) other(p *localcluster.Process) *localcluster.Process {
	for _, q := range c.replicas {
		if q != p {
			return q
		}
	}
	return nil
}

// serveFrom points the APIService at p: the follower serves the API, so
// that killing or pausing the leader leaves the API up.
func (c *kcluster) serveFrom(ctx context.Context, t *testing.T, p *localcluster.Process) {
	t.Helper()
	if c.cluster.Kollect() == p {
		return
	}
	must(t, c.cluster.RegisterKollect(ctx, p), c.name+": register "+p.Name())
}

// signal sends sig to the replica's process group (SIGSTOP, SIGCONT).
func signal(p *localcluster.Process, sig syscall.Signal) error {
	pid := p.Pid()
	if pid == 0 {
		return fmt.Errorf("%s has no process", p.Name())
	}
	return syscall.Kill(-pid, sig)
}

// logSize is the current length of a replica's log, to read what it logs
// from now on (logSince).
func logSize(p *localcluster.Process) int64 {
	st, err := os.Stat(p.LogFile())
	if err != nil {
		return 0
	}
	return st.Size()
}

func logSince(p *localcluster.Process, offset int64) string {
	data, err := os.ReadFile(p.LogFile())
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	return string(data[offset:])
}

// linesWith returns the lines of log containing every fragment.
func linesWith(log string, fragments ...string) []string {
	var out []string
	for line := range strings.SplitSeq(log, "\n") {
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(line, f)
		}
		if ok && line != "" {
			out = append(out, line)
		}
	}
	return out
}
