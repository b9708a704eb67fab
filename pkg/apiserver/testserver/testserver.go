// Package testserver runs kollect-apiserver in process against a real
// embedded etcd, for registry tests and benchmarks. Authentication,
// authorization, admission and priority-and-fairness need a host cluster,
// so they are off here — and only here; the end-to-end suite runs the real
// binary behind kube-apiserver with all of them on.
package testserver

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apiserver"
	"kollect.dev/kollect/pkg/cmd/server"
	"kollect.dev/kollect/pkg/embeddedetcd"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// Server is a running in-process kollect-apiserver.
type Server struct {
	// Config reaches the server as its privileged loopback user.
	Config *rest.Config
	// Client is a typed client on Config.
	Client versioned.Interface
	// API is the server itself, for its in-process item writers.
	API *apiserver.Server
	// EtcdEndpoint is the client URL of the embedded etcd.
	EtcdEndpoint string
}

// Options tune the server under test.
type Options struct {
	// AllowPrivateSinkEndpoints mirrors --allow-private-sink-endpoints.
	AllowPrivateSinkEndpoints bool
}

// Start runs etcd and the server in a temporary directory; both stop when
// the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := tb.TempDir()

	etcd, err := embeddedetcd.Start(ctx, dir)
	if err != nil {
		cancel()
		tb.Fatalf("embedded etcd: %v", err)
	}

	o := server.NewOptions()
	o.AllowPrivateSinkEndpoints = opts.AllowPrivateSinkEndpoints
	rec := o.Recommended
	rec.Etcd.StorageConfig.Transport.ServerList = []string{etcd.Endpoint}
	rec.Authentication, rec.Authorization, rec.CoreAPI, rec.Admission = nil, nil, nil, nil
	rec.Features.EnablePriorityAndFairness = false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		etcd.Stop()
		tb.Fatalf("listen: %v", err)
	}
	rec.SecureServing.Listener = ln
	rec.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	rec.SecureServing.ServerCert.CertDirectory = dir

	cfg, err := o.Config()
	if err != nil {
		cancel()
		etcd.Stop()
		tb.Fatalf("server config: %v", err)
	}
	api, err := cfg.Complete().New()
	if err != nil {
		cancel()
		etcd.Stop()
		tb.Fatalf("server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- api.GenericAPIServer.PrepareRun().RunWithContext(ctx) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			tb.Errorf("server did not stop within 60s")
		}
		etcd.Stop()
	})

	loopback := rest.CopyConfig(cfg.GenericConfig.LoopbackClientConfig)
	loopback.QPS, loopback.Burst = -1, 0 // the client must not be the bottleneck of benchmarks
	client, err := versioned.NewForConfig(loopback)
	if err != nil {
		tb.Fatalf("client: %v", err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("server exited: %v", err)
		default:
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		tb.Fatalf("server not ready: %v", err)
	}
	return &Server{Config: loopback, Client: client, API: api, EtcdEndpoint: etcd.Endpoint}
}
