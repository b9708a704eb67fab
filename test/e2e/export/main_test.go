// Package export is the end-to-end suite of export (issue 5): the pinned
// etcd, kube-apiserver and kube-controller-manager, the kollect-apiserver
// binary on an etcd of its own (test/collectenv), and real sinks on
// 127.0.0.1: a directory, git http-backend behind a TLS test server, the
// machine's PostgreSQL and NATS JetStream, and a TLS webhook receiver.
//
// The replica runs with --allow-private-sink-endpoints because every sink
// here listens on loopback; admission rejects such endpoints without it
// (pkg/apiserver TestPrivateSinkEndpoints). It runs with --file-sink-root
// (collectenv's FileSinks) for the file sinks: without it they are refused
// (TestFileSinkConfinement). The export watchdog runs every
// 2s instead of 30s so that the debounce behaviour is quick to observe.
package export

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/collectenv"
)

const watchdog = 2 * time.Second

// clusterName is the replica's --cluster-name: in every key a sink stores.
const clusterName = "e2e"

var (
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	kollect versioned.Interface

	postgresDSN string
	natsURL     string
	pg          *pgxpool.Pool
	nc          *nats.Conn

	// fileSinkRoot is the replica's --file-sink-root; replica its options,
	// for more replicas like it.
	fileSinkRoot string
	replica      localcluster.KollectOptions
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	postgresDSN = env("KOLLECT_TEST_POSTGRES_DSN", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	natsURL = env("KOLLECT_TEST_NATS_URL", "nats://127.0.0.1:4222")
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	fail := func(format string, args ...any) {
		cancel()
		fmt.Fprintf(os.Stderr, "e2e/export: "+format+"\n", args...)
		os.Exit(1)
	}
	var err error
	if pg, err = pgxpool.New(ctx, postgresDSN); err == nil {
		err = pg.Ping(ctx)
	}
	if err != nil {
		fail("PostgreSQL at KOLLECT_TEST_POSTGRES_DSN is not reachable (%v); start it with `hack/services.sh start` (pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start)", err)
	}
	if nc, err = nats.Connect(natsURL, nats.Timeout(5*time.Second)); err != nil {
		fail("NATS at KOLLECT_TEST_NATS_URL is not reachable (%v); start it with `hack/services.sh start`", err)
	}
	e, err := collectenv.Start(ctx, collectenv.Options{
		FastEtcd:  true,
		FileSinks: true,
		Log:       os.Stderr,
		KollectArgs: []string{
			"--allow-private-sink-endpoints",
			"--export-watchdog-period=" + watchdog.String(),
			"--cluster-name=" + clusterName,
			// Sink clients are rebuilt every 2s instead of 5m: changes
			// flow across rebuilds (TestDeliveryFaults/delivery-client-rebuild).
			"--sink-client-max-age=2s",
			"-v=2",
		},
	})
	if err != nil {
		fail("%v", err)
	}
	cluster, kube, kollect = e.Cluster, e.Kube, e.Client
	fileSinkRoot, replica = e.FileSinkRoot, e.Replica
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e/export: logs kept in %s/logs\n", e.Dir)
	}
	if err := e.Stop(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/export: stopping the cluster: %v\n", err)
	}
	nc.Close()
	pg.Close()
	cancel()
	os.Exit(code)
}
