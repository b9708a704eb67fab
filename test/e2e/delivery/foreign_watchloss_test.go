package delivery

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
)

// TestItemWatchLost: a single replica (no leader election) is
// paused while a foreign writer stores a stale item and floods the item
// prefix with writes, and its etcd is compacted; on resume its watch of
// the stored items has lost its place (410). The docs: "When that watch
// loses its place (its position expired), a full walk runs at once" — the
// stale item must be healed within the minute, and the watch must not
// retry in a loop.
func TestItemWatchLost(t *testing.T) {
	ctx := testContext(t, 6*time.Minute)
	dir, err := os.MkdirTemp("", "kollect-delivery-wl-")
	must(t, err, "tempdir")
	lc, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, ToolsBinDir: toolsDir, Log: os.Stderr, FastEtcd: true})
	must(t, err, "cluster wl")
	t.Cleanup(func() { _ = lc.Stop() })
	etcdP, err := lc.StartEtcd(ctx, "kollect-etcd")
	must(t, err, "etcd")
	args := append(kollectArgs("wl"), "--leader-elect=false")
	p, err := lc.StartKollect(ctx, localcluster.KollectOptions{Name: "kollect-a", Binary: binary, EtcdServers: etcdP.URL(), Args: args})
	must(t, err, "kollect")
	must(t, lc.RegisterKollect(ctx, p), "register")
	cfg := lc.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0
	c := &kcluster{name: "wl", dir: dir, cluster: lc, kube: kubernetes.NewForConfigOrDie(cfg), kollect: versioned.NewForConfigOrDie(cfg),
		replicas: []*localcluster.Process{p}, etcdURL: etcdP.URL()}

	ns := "f-wl-" + randomSuffix()
	c.namespace(ctx, t, ns)
	w := world{"cm-a": "a1", "cm-b": "b1"}
	c.workload(ctx, t, ns, w)
	etcd := etcdClient(t, c)
	key, item := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-a")
	_, ghost := itemOf(itemsByKey(ctx, t, etcd, ns), "web", "cm-b")
	offset := logSize(p)

	must(t, signal(p, syscall.SIGSTOP), "SIGSTOP")
	paused := true
	t.Cleanup(func() {
		if paused {
			_ = signal(p, syscall.SIGCONT)
		}
	})
	item["attributes"].(map[string]any)["value"] = "stale"
	item["hash"] = fakeHash("stale")
	put(ctx, t, etcd, key, item)
	gm := ghost["metadata"].(map[string]any)
	gm["name"] = "flood"
	gm["namespace"] = ns + "-flood"
	gm["uid"] = "00000000-0000-0000-0000-0000000000ff"
	gm["labels"].(map[string]any)[kollect.LabelTarget] = "nobody"
	ghostKey := strings.Replace(key[:strings.LastIndex(key, "/")+1], "/"+ns+"/", "/"+ns+"-flood/", 1) + "flood"
	pad := strings.Repeat("x", 60000)
	for i := range 400 {
		ghost["attributes"].(map[string]any)["value"] = fmt.Sprintf("%d-%s", i, pad)
		put(ctx, t, etcd, ghostKey, ghost)
	}
	resp, err := etcd.Get(ctx, "compaction-probe")
	must(t, err, "probe")
	_, err = etcd.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
	must(t, err, "compact")
	time.Sleep(time.Second)
	must(t, signal(p, syscall.SIGCONT), "SIGCONT")
	paused = false
	resumed := time.Now()

	c.waitItems(testContext(t, time.Minute), t, ns, w)
	t.Logf("healed %s after the resume", time.Since(resumed).Round(time.Millisecond))
	// The flood item names a target that does not exist: deleted.
	eventually(ctx, t, "the flood item of no target deleted", func(ctx context.Context) (bool, string) {
		flood, err := c.kollect.KollectV1alpha1().InventoryItems(ns+"-flood").List(ctx, metav1.ListOptions{})
		return err == nil && len(flood.Items) == 0, fmt.Sprint(len(flood.Items), err)
	})
	time.Sleep(10 * time.Second)
	log := logSince(p, offset)
	retries := len(linesWith(log, "Watching the stored items failed")) + len(linesWith(log, "The stored items' watch ended"))
	t.Logf("log since the pause: %d watch retries, %d full walks", retries, len(linesWith(log, "ull walk")))
	if retries > 10 {
		t.Errorf("the item watch retried %d times since the resume: a loop", retries)
	}
}
