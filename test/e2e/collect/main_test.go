// Package collect is the end-to-end suite of collection (issue 4): real
// etcd, kube-apiserver and kube-controller-manager from the pinned sources,
// and the kollect-apiserver binary, all on 127.0.0.1 (pkg/localcluster via
// test/collectenv). kollect-apiserver stores its objects in an etcd of its
// own, so that two replicas can share it and the tests can compact it.
//
// One cluster serves every test; each test works in namespaces of its own
// and leaves the kollect-apiserver replica it found registered and running.
package collect

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

// Timings of the suite's replicas: a short lease, so that fail-over is
// quick to observe; the full walk keeps its production default, so that
// convergence after a restart is the walk at start, not a periodic one.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = 1 * time.Second
)

var (
	cluster *localcluster.Cluster
	// kollectEtcd is kollect-apiserver's own etcd.
	kollectEtcd *localcluster.Process
	// replicaOptions starts another replica like the first one.
	replicaOptions localcluster.KollectOptions
	// kube and kollect reach the host cluster and, through the
	// aggregation layer, kollect.dev.
	kube    kubernetes.Interface
	kollect versioned.Interface
)

func TestMain(m *testing.M) {
	// The cluster lives as long as this context: it bounds the whole suite.
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	env, err := collectenv.Start(ctx, collectenv.Options{
		FastEtcd: true,
		Log:      os.Stderr,
		KollectArgs: []string{
			"--leader-election-lease-duration=" + leaseDuration.String(),
			"--leader-election-renew-deadline=" + renewDeadline.String(),
			"--leader-election-retry-period=" + retryPeriod.String(),
			"-v=2",
		},
	})
	if err != nil {
		cancel()
		fmt.Fprintf(os.Stderr, "e2e/collect: %v\n", err)
		os.Exit(1)
	}
	cluster, kollectEtcd, replicaOptions, kube, kollect = env.Cluster, env.Etcd, env.Replica, env.Kube, env.Client
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e/collect: logs kept in %s/logs\n", env.Dir)
	}
	if err := env.Stop(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/collect: stopping the cluster: %v\n", err)
	}
	cancel()
	os.Exit(code)
}
