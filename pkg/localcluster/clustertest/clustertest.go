// Package clustertest gives a package's tests one local cluster (etcd and
// kube-apiserver, and whatever else Options asks for), started by the first
// test that needs it and stopped by TestMain after the last.
package clustertest

import (
	"context"
	"os"
	"sync"
	"testing"

	"kollect.dev/kollect/pkg/localcluster"
)

// Shared is a package's cluster. Options is used as given but for Dir (a
// new temporary directory) and ToolsBinDir (the pinned tools, built when
// missing or stale).
type Shared struct {
	Options localcluster.Options

	once    sync.Once
	cluster *localcluster.Cluster
	err     error
	cancel  context.CancelFunc
}

// Get returns the running cluster, starting it on the first call; a
// failure to start fails every test that asks.
func (s *Shared) Get(t testing.TB) *localcluster.Cluster {
	t.Helper()
	s.once.Do(func() {
		root, err := localcluster.RepoRoot()
		if err != nil {
			s.err = err
			return
		}
		opts := s.Options
		if opts.ToolsBinDir, err = localcluster.BuildTools(context.Background(), root, t.Output()); err != nil {
			s.err = err
			return
		}
		if opts.Dir, err = os.MkdirTemp("", "kollect-test-cluster-"); err != nil {
			s.err = err
			return
		}
		// Not the test's context: the cluster outlives the test that starts it.
		var ctx context.Context
		ctx, s.cancel = context.WithCancel(context.Background())
		s.cluster, s.err = localcluster.Start(ctx, opts)
	})
	if s.err != nil {
		t.Fatalf("starting the test cluster: %v", s.err)
	}
	return s.cluster
}

// Stop stops the cluster, if one was started, and removes its state.
func (s *Shared) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.cluster != nil {
		_ = s.cluster.Stop()
		_ = os.RemoveAll(s.cluster.Dir())
	}
}
