// Package delivery is the end-to-end suite of export delivery across
// replicas and clusters (issue 11): a leader killed with SIGKILL in the
// middle of a publish batch, a leader paused with SIGSTOP while a follower
// takes over and resumed afterwards, and two clusters with different
// --cluster-name exporting same-named Inventories into one Postgres table,
// one git repository and one NATS stream. Every run ends with what each
// sink holds compared with the live items: the Postgres rows, the snapshot
// documents, and the event streams folded by the reference consumer
// (test/eventfold).
//
// TestMain builds the pinned tools and kollect-apiserver once and starts
// the cluster "east": the pinned etcd, kube-apiserver and
// kube-controller-manager, and two kollect-apiserver replicas on an etcd of
// their own (as test/collectenv starts one). The replicas compete for the
// Lease kollect-system/kollect-controllers with a short lease, so that a
// take-over is quick. The two-cluster test starts
// "west" for itself and stops it afterwards. Sinks are the machine's
// PostgreSQL and NATS JetStream, and git http-backend behind a TLS test
// server, all on 127.0.0.1 (hence --allow-private-sink-endpoints).
package delivery

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
)

// Timings of the replicas: a short lease, so that a take-over after a kill
// or a pause comes within seconds; a short watchdog, so that status
// follows quickly.
const (
	leaseDuration = 6 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = 1 * time.Second
	watchdog      = 2 * time.Second
)

var (
	postgresDSN string
	natsURL     string
	pg          *pgxpool.Pool
	nc          *nats.Conn
	js          jetstream.JetStream

	// toolsDir and binary are the pinned tools and kollect-apiserver, built
	// once: every cluster of the suite runs the same binary.
	toolsDir, binary string

	// east is the suite's cluster, with two replicas.
	east *kcluster
)

// kcluster is one local cluster (etcd, kube-apiserver,
// kube-controller-manager) with kollect-apiserver replicas on an etcd of
// their own, registered through the APIService, as test/collectenv starts
// them.
type kcluster struct {
	// name is the replicas' --cluster-name.
	name    string
	dir     string
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	kollect versioned.Interface
	// replicas share the cluster's kollect etcd (at etcdURL); replicas[0]
	// is registered first.
	replicas []*localcluster.Process
	etcdURL  string
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// kollectArgs are the flags of every replica of cluster name.
func kollectArgs(name string) []string {
	return []string{
		"--allow-private-sink-endpoints",
		"--cluster-name=" + name,
		"--export-watchdog-period=" + watchdog.String(),
		"--leader-election-lease-duration=" + leaseDuration.String(),
		"--leader-election-renew-deadline=" + renewDeadline.String(),
		"--leader-election-retry-period=" + retryPeriod.String(),
		"-v=2",
	}
}

// startCluster starts a cluster whose replicas run with --cluster-name
// name, in a new temporary directory. ctx bounds its life.
func startCluster(ctx context.Context, name string, replicas int) (_ *kcluster, err error) {
	dir, err := os.MkdirTemp("", "kollect-delivery-"+name+"-")
	if err != nil {
		return nil, err
	}
	lc, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, ToolsBinDir: toolsDir, Log: os.Stderr, FastEtcd: true})
	if err != nil {
		return nil, fmt.Errorf("cluster %s (logs in %s/logs): %w", name, dir, err)
	}
	c := &kcluster{name: name, dir: dir, cluster: lc}
	defer func() {
		if err != nil {
			_ = lc.Stop()
			err = fmt.Errorf("cluster %s (logs in %s/logs): %w", name, dir, err)
		}
	}()
	etcd, err := lc.StartEtcd(ctx, "kollect-etcd")
	if err != nil {
		return nil, err
	}
	c.etcdURL = etcd.URL()
	for i := range replicas {
		o := localcluster.KollectOptions{Name: fmt.Sprintf("kollect-%c", 'a'+i), Binary: binary, EtcdServers: etcd.URL(), Args: kollectArgs(name)}
		p, err := lc.StartKollect(ctx, o)
		if err != nil {
			return nil, err
		}
		c.replicas = append(c.replicas, p)
	}
	if err = lc.RegisterKollect(ctx, c.replicas[0]); err != nil {
		return nil, err
	}
	cfg := lc.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0 // the client must not be what is measured
	c.kube = kubernetes.NewForConfigOrDie(cfg)
	c.kollect = versioned.NewForConfigOrDie(cfg)
	return c, nil
}

// stop stops the cluster; it removes its directory unless keep.
func (c *kcluster) stop(keep bool) error {
	err := c.cluster.Stop()
	if !keep {
		_ = os.RemoveAll(c.dir)
	}
	return err
}

func TestMain(m *testing.M) {
	postgresDSN = getenv("KOLLECT_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	natsURL = getenv("KOLLECT_TEST_NATS_URL", "nats://127.0.0.1:4222")
	// The suite's budget: the clusters live as long as this context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	fail := func(format string, args ...any) {
		cancel()
		fmt.Fprintf(os.Stderr, "e2e/delivery: "+format+"\n", args...)
		os.Exit(1)
	}
	var err error
	if pg, err = pgxpool.New(ctx, postgresDSN); err == nil {
		err = pg.Ping(ctx)
	}
	if err != nil {
		fail("PostgreSQL at KOLLECT_TEST_POSTGRES_DSN is not reachable (%v); start it with `hack/services.sh start`", err)
	}
	if nc, err = nats.Connect(natsURL, nats.Timeout(5*time.Second)); err != nil {
		fail("NATS at KOLLECT_TEST_NATS_URL is not reachable (%v); start it with `hack/services.sh start`", err)
	}
	if js, err = jetstream.New(nc); err != nil {
		fail("JetStream: %v", err)
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		fail("%v", err)
	}
	if toolsDir, err = localcluster.BuildTools(ctx, root, os.Stderr); err != nil {
		fail("building the pinned tools: %v", err)
	}
	if binary, err = localcluster.KollectBinary(ctx, root, os.Stderr); err != nil {
		fail("building kollect-apiserver: %v", err)
	}
	if east, err = startCluster(ctx, "east", 2); err != nil {
		fail("%v", err)
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e/delivery: logs kept in %s/logs\n", east.dir)
	}
	if err := east.stop(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/delivery: stopping the cluster: %v\n", err)
	}
	nc.Close()
	pg.Close()
	cancel()
	os.Exit(code)
}
