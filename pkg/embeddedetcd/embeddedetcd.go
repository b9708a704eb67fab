// Package embeddedetcd runs a single-member etcd inside kollect-apiserver,
// so that trying Kollect needs no etcd cluster. Production runs an external
// three-member cluster (--etcd-servers).
package embeddedetcd

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap/zapcore"
)

// Etcd is a running embedded etcd.
type Etcd struct {
	etcd *embed.Etcd
	// Endpoint is the client URL, on loopback.
	Endpoint string
}

// Start runs etcd with its data in dataDir, listening on a free loopback
// port, and waits until it serves. Data survives restarts.
func Start(ctx context.Context, dataDir string) (*Etcd, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded etcd data dir: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "kollect"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	cfg.LogLevel = zapcore.ErrorLevel.String()
	// etcd advertises (and its gateway dials) the client URL, so it needs the
	// real port up front: take free ones from the kernel.
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	client := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peer := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.ListenMetricsUrls = nil
	// The API server compacts (--etcd-compaction-interval); a large quota
	// leaves room for 100,000s of items.
	cfg.QuotaBackendBytes = 8 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd: %w", err)
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s did not become ready within 60s", cfg.Dir)
	case <-ctx.Done():
		e.Close()
		return nil, ctx.Err()
	}
	return &Etcd{etcd: e, Endpoint: "http://" + e.Clients[0].Addr().String()}, nil
}

// freePorts returns n distinct loopback ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port for embedded etcd: %w", err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Stop shuts etcd down cleanly, flushing its data.
func (e *Etcd) Stop() {
	e.etcd.Close()
}
