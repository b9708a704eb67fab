// Package testserver runs kollect-apiserver in process against a real
// embedded etcd, for registry tests and benchmarks. Authentication,
// authorization, admission and priority-and-fairness need a host cluster,
// so they are off here — and only here; the end-to-end suite runs the real
// binary behind kube-apiserver with all of them on. Tests of the registry's
// own authorization checks (`use`, `list`) plug users, an authorizer and a
// RESTMapper through Options.
package testserver

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apiserver"
	"kollect.dev/kollect/pkg/cmd/server"
	"kollect.dev/kollect/pkg/embeddedetcd"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/tenancy"
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
	// TenantMode mirrors --tenant-mode.
	TenantMode bool
	// Quotas mirror the --default-max-* flags. Unlike the server's, the
	// zero value sets no default quota: registry tests and benchmarks
	// create more objects in a namespace than the defaults allow, and tests
	// of the quotas set what they test.
	Quotas tenancy.Quotas
	// FileSinkRoot mirrors --file-sink-root: file sinks are admitted when
	// it is set. No controller runs here, so nothing is written there.
	FileSinkRoot string
	// AllowLocalGitSinks mirrors --allow-local-git-sinks.
	AllowLocalGitSinks bool
	// Users, when set, turns authentication on: a request with the bearer
	// token T is the user Users[T] (see Server.ConfigFor), the loopback
	// client stays system:apiserver in system:masters, and other tokens are
	// refused. Every authenticated request passes the HTTP authorization
	// filter, so what the registry checks itself is what a test observes.
	Users map[string]user.Info
	// Authorizer, when set, answers the registry's `use` and `list` checks
	// (a real server asks its delegated authorizer). Without one the test
	// server, which runs without authorization, skips those checks.
	Authorizer authorizer.Authorizer
	// RESTMapper, when set, maps the kinds Profiles collect to resources for
	// the `list` check; there is no host cluster to discover them from, and
	// without one that check is skipped.
	RESTMapper meta.RESTMapper
	// EtcdEndpoint, when set, is the etcd of another test server to share
	// (two servers configured differently over the same objects); this
	// server then neither starts nor stops an etcd of its own.
	EtcdEndpoint string
}

// Start runs etcd and the server in a temporary directory; both stop when
// the test ends.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	dir := tb.TempDir()

	endpoint, stopEtcd := opts.EtcdEndpoint, func() {}
	if endpoint == "" {
		etcd, err := embeddedetcd.Start(ctx, dir)
		if err != nil {
			cancel()
			tb.Fatalf("embedded etcd: %v", err)
		}
		endpoint, stopEtcd = etcd.Endpoint, etcd.Stop
	}

	o := server.NewOptions()
	o.AllowPrivateSinkEndpoints = opts.AllowPrivateSinkEndpoints
	o.TenantMode = opts.TenantMode
	o.Quotas = opts.Quotas
	o.FileSinkRoot, o.AllowLocalGitSinks = opts.FileSinkRoot, opts.AllowLocalGitSinks
	rec := o.Recommended
	rec.Etcd.StorageConfig.Transport.ServerList = []string{endpoint}
	rec.Authentication, rec.Authorization, rec.CoreAPI, rec.Admission = nil, nil, nil, nil
	rec.Features.EnablePriorityAndFairness = false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		stopEtcd()
		tb.Fatalf("listen: %v", err)
	}
	rec.SecureServing.Listener = ln
	rec.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	rec.SecureServing.ServerCert.CertDirectory = dir

	cfg, err := o.Config()
	if err != nil {
		cancel()
		stopEtcd()
		tb.Fatalf("server config: %v", err)
	}
	if len(opts.Users) > 0 {
		users := opts.Users
		cfg.GenericConfig.Authentication.Authenticator = bearertoken.New(authenticator.TokenFunc(
			func(_ context.Context, token string) (*authenticator.Response, bool, error) {
				u, ok := users[token]
				if !ok {
					return nil, false, nil
				}
				return &authenticator.Response{User: u}, true, nil
			}))
		// Completing the configuration adds the loopback token only when
		// there is an authorizer too.
		cfg.GenericConfig.Authorization.Authorizer = authorizerfactory.NewAlwaysAllowAuthorizer()
	}
	cfg.ExtraConfig.Registry.Tenancy.Authorizer = opts.Authorizer
	cfg.ExtraConfig.Registry.Tenancy.RESTMapper = opts.RESTMapper
	api, err := cfg.Complete().New()
	if err != nil {
		cancel()
		stopEtcd()
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
		stopEtcd()
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
	return &Server{Config: loopback, Client: client, API: api, EtcdEndpoint: endpoint}
}

// ConfigFor reaches the server as the user of a token of Options.Users.
func (s *Server) ConfigFor(token string) *rest.Config {
	cfg := rest.CopyConfig(s.Config)
	cfg.BearerToken = token
	return cfg
}

// ClientFor is a typed client acting as the user of a token of Options.Users.
func (s *Server) ClientFor(token string) versioned.Interface {
	return versioned.NewForConfigOrDie(s.ConfigFor(token))
}
