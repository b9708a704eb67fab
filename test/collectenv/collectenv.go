// Package collectenv starts the cluster that the collection end-to-end tests
// (test/e2e/collect) and benchmarks (test/bench) run against: the pinned
// etcd, kube-apiserver and kube-controller-manager of pkg/localcluster, an
// etcd of kollect-apiserver's own (so that several replicas can share it and
// tests can compact it or read its size), and one kollect-apiserver replica
// registered through the APIService, running with the admin identity.
package collectenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
)

// Options tune the environment.
type Options struct {
	// KollectArgs are extra kollect-apiserver flags.
	KollectArgs []string
	// FastEtcd runs every etcd without fsync (tests; benchmarks keep it).
	FastEtcd bool
	// EtcdArgs are extra flags for every etcd.
	EtcdArgs []string
	// FileSinks creates <Dir>/file-sinks and passes it as --file-sink-root,
	// for tests that export to file sinks (Env.FileSinkRoot).
	FileSinks bool
	// Log receives progress lines.
	Log io.Writer
}

// Env is a running environment.
type Env struct {
	Dir     string
	Cluster *localcluster.Cluster
	// Etcd is kollect-apiserver's own etcd.
	Etcd *localcluster.Process
	// Replica starts more replicas like the first (change Name).
	Replica localcluster.KollectOptions
	// Kollect is the first replica.
	Kollect *localcluster.Process
	// FileSinkRoot is --file-sink-root with Options.FileSinks: a sink of
	// namespace N at file:///p writes under FileSinkRoot/N/p.
	FileSinkRoot string
	// Kube and Client reach the host cluster and, through the aggregation
	// layer, kollect.dev, as admin.
	Kube   kubernetes.Interface
	Client versioned.Interface
}

// Start builds what is missing (the pinned tools, kollect-apiserver) and
// starts the environment in a new temporary directory. ctx bounds the
// environment's life, not only the start: when it is done every process
// stops. On error everything started is stopped.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	log := opts.Log
	if log == nil {
		log = io.Discard
	}
	tools, err := localcluster.BuildTools(ctx, root, log)
	if err != nil {
		return nil, fmt.Errorf("building the pinned tools: %w", err)
	}
	binary, err := localcluster.KollectBinary(ctx, root, log)
	if err != nil {
		return nil, fmt.Errorf("building kollect-apiserver: %w", err)
	}
	dir, err := os.MkdirTemp("", "kollect-collect-")
	if err != nil {
		return nil, err
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: dir, ToolsBinDir: tools, Log: log, FastEtcd: opts.FastEtcd, EtcdArgs: opts.EtcdArgs})
	if err != nil {
		return nil, fmt.Errorf("starting the cluster (logs in %s/logs): %w", dir, err)
	}
	env := &Env{Dir: dir, Cluster: c}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	if env.Etcd, err = c.StartEtcd(ctx, "kollect-etcd"); err != nil {
		return nil, fmt.Errorf("starting kollect's etcd: %w", err)
	}
	args := opts.KollectArgs
	if opts.FileSinks {
		env.FileSinkRoot = filepath.Join(dir, "file-sinks")
		if err = os.Mkdir(env.FileSinkRoot, 0o750); err != nil {
			return nil, err
		}
		args = append([]string{"--file-sink-root=" + env.FileSinkRoot}, args...)
	}
	env.Replica = localcluster.KollectOptions{Binary: binary, EtcdServers: env.Etcd.URL(), Args: args}
	if env.Kollect, err = c.StartKollect(ctx, env.Replica); err != nil {
		return nil, fmt.Errorf("starting kollect-apiserver (logs in %s/logs): %w", dir, err)
	}
	if err = c.RegisterKollect(ctx, env.Kollect); err != nil {
		return nil, fmt.Errorf("registering kollect-apiserver: %w", err)
	}
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst = -1, 0 // the client must not be what is measured
	env.Kube = kubernetes.NewForConfigOrDie(cfg)
	env.Client = versioned.NewForConfigOrDie(cfg)
	return env, nil
}

// Stop stops every process; it removes the state directory unless keep.
func (env *Env) Stop(keep bool) error {
	err := env.Cluster.Stop()
	if !keep {
		_ = os.RemoveAll(env.Dir)
	}
	return err
}
