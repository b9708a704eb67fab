package localcluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Names the harness registers kollect-apiserver under.
const (
	KollectGroup         = "kollect.dev"
	KollectVersion       = "v1alpha1"
	APIServiceName       = KollectVersion + "." + KollectGroup // v1alpha1.kollect.dev
	KollectNamespace     = "kollect-system"
	KollectServiceName   = "kollect-api"
	FrontProxyClientName = "front-proxy-client"
	// ServiceClusterIPRange is kube-apiserver's --service-cluster-ip-range.
	// Nothing is ever sent to these addresses: no kube-proxy runs, and the
	// aggregator reaches kollect-apiserver through an ExternalName Service.
	ServiceClusterIPRange = "10.0.0.0/24"
	// ServiceAccountIssuer is kube-apiserver's --service-account-issuer.
	ServiceAccountIssuer = "https://kubernetes.default.svc.cluster.local"
)

// Tools are the binaries hack/build-tools.sh builds into the tools
// directory.
var Tools = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl"}

// DefaultControllers are the kube-controller-manager controllers the local
// cluster runs: RBAC role aggregation (the built-in view/edit/admin roles
// and Kollect's aggregated roles get their rules), namespace deletion, the
// "default" ServiceAccount of each namespace, ownerReference garbage
// collection and the kube-root-ca.crt ConfigMaps. Workload controllers are
// left out: there is no scheduler or kubelet to run Pods.
var DefaultControllers = []string{
	"clusterrole-aggregation-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"garbage-collector-controller",
	"root-ca-certificate-publisher-controller",
}

// TokenController is the kube-controller-manager controller that puts a
// token into Secrets of type kubernetes.io/service-account-token. It is not
// among DefaultControllers; tests of long-lived token Secrets add it.
const TokenController = "serviceaccount-token-controller"

// Options configure a local cluster.
type Options struct {
	// Dir holds all state (required): pki/, etcd/, logs/, kubeconfig,
	// ports.json and each kollect-apiserver replica's data. Everything in
	// it is reused by the next Start on the same Dir; two clusters cannot
	// share one Dir at the same time.
	Dir string
	// ToolsBinDir holds the etcd, kube-apiserver, kube-controller-manager
	// and kubectl binaries that
	// hack/build-tools.sh builds. Default: $KOLLECT_TOOLS_BIN, else
	// _output/tools/bin of the repository containing the working directory
	// (see DefaultToolsBinDir).
	ToolsBinDir string
	// KollectBinary is the kollect-apiserver binary. When set, Start also
	// starts a replica named "kollect-apiserver" with the admin kubeconfig
	// and KollectArgs, registers it and waits until it is Available. When
	// empty, Start brings up etcd and kube-apiserver only; call
	// StartKollect and RegisterKollect yourself (to run it with a
	// ServiceAccount token, say).
	KollectBinary string
	// KollectArgs are extra flags for the replica Start starts.
	KollectArgs []string
	// KubeAPIServerArgs are extra flags for kube-apiserver; a flag given
	// here wins over the harness' own (kube-apiserver takes the last).
	KubeAPIServerArgs []string
	// NoControllerManager skips kube-controller-manager. Without it,
	// aggregated ClusterRoles stay empty: the built-in view, edit and admin
	// roles grant nothing, and neither does any role of Kollect's manifests
	// built by aggregation. Namespaces never finish deleting.
	NoControllerManager bool
	// ControllerManagerArgs are extra flags for kube-controller-manager
	// (--controllers=... here replaces DefaultControllers).
	ControllerManagerArgs []string
	// Log receives progress lines ("starting etcd... ready in 1.2s").
	// Nil discards them.
	Log io.Writer
	// EtcdArgs are extra flags for every etcd of the cluster (a larger
	// --quota-backend-bytes for a benchmark of a million objects, say).
	EtcdArgs []string
	// FastEtcd runs every etcd of the cluster with --unsafe-no-fsync: much
	// faster, and a crash of the machine can lose or corrupt data. For
	// tests only.
	FastEtcd bool
	// StartTimeout bounds each wait for a process to be ready and for the
	// APIService to be Available. Default 3 minutes.
	StartTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL.
	// Default 15 seconds.
	StopTimeout time.Duration
}

// Cluster is a running local cluster: etcd, kube-apiserver,
// kube-controller-manager and any number of kollect-apiserver replicas, all
// on 127.0.0.1.
//
// Everything it started is stopped by Stop, and also when the context given
// to Start is done. On Linux the kernel kills the children if the parent
// process dies without stopping them (a panic, a test timeout, kill -9).
type Cluster struct {
	opts     Options
	log      io.Writer
	certs    *certs
	ports    *portState
	lock     *os.File
	restCfg  *rest.Config
	stopOnce sync.Once
	stopped  chan struct{}
	stopErr  error

	etcd          *Process
	kubeAPIServer *Process
	kcm           *Process

	mu      sync.Mutex
	extra   []*Process // StartKollect and StartEtcd processes, in start order
	kollect *Process   // the replica the APIService points to
}

// Start brings up a local cluster and returns when kube-apiserver is ready
// (and, with Options.KollectBinary, when the kollect.dev APIService is
// Available and its discovery answers through kube-apiserver). ctx bounds
// the start and the cluster's life: when it is done, every process is
// stopped. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Dir == "" {
		return nil, errors.New("localcluster: Options.Dir is required")
	}
	if opts.Dir, err = filepath.Abs(opts.Dir); err != nil {
		return nil, err
	}
	if opts.ToolsBinDir == "" {
		if opts.ToolsBinDir, err = DefaultToolsBinDir(); err != nil {
			return nil, err
		}
	}
	if opts.ToolsBinDir, err = filepath.Abs(opts.ToolsBinDir); err != nil {
		return nil, err
	}
	for _, tool := range Tools {
		if tool == "kube-controller-manager" && opts.NoControllerManager {
			continue
		}
		if err := checkExecutable(filepath.Join(opts.ToolsBinDir, tool)); err != nil {
			return nil, fmt.Errorf("localcluster: %w; run hack/build-tools.sh (or make tools) first", err)
		}
	}
	if opts.KollectBinary != "" {
		if opts.KollectBinary, err = filepath.Abs(opts.KollectBinary); err != nil {
			return nil, err
		}
		if err := checkExecutable(opts.KollectBinary); err != nil {
			return nil, fmt.Errorf("localcluster: kollect-apiserver: %w", err)
		}
	}
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 3 * time.Minute
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 15 * time.Second
	}
	for _, d := range []string{opts.Dir, filepath.Join(opts.Dir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	lock, err := lockDir(opts.Dir)
	if err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, log: opts.Log, lock: lock, stopped: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = c.Stop()
		}
	}()
	fmt.Fprintf(c.log, "local cluster in %s (logs in %s)\n", opts.Dir, filepath.Join(opts.Dir, "logs"))
	if c.certs, err = loadOrCreateCerts(filepath.Join(opts.Dir, "pki")); err != nil {
		return nil, fmt.Errorf("localcluster: certificates: %w", err)
	}
	if c.ports, err = loadPortState(filepath.Join(opts.Dir, "ports.json")); err != nil {
		return nil, err
	}

	startCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	if c.etcd, err = c.newEtcd(startCtx, "etcd", filepath.Join(opts.Dir, "etcd")); err != nil {
		return nil, err
	}
	if c.kubeAPIServer, err = c.startKubeAPIServer(startCtx); err != nil {
		return nil, err
	}
	if err := c.writeAdminKubeconfig(); err != nil {
		return nil, err
	}
	if err := c.waitAuthenticationConfigMap(startCtx); err != nil {
		return nil, err
	}
	if !opts.NoControllerManager {
		if c.kcm, err = c.startControllerManager(startCtx); err != nil {
			return nil, err
		}
	}
	if opts.KollectBinary != "" {
		p, err := c.StartKollect(ctx, KollectOptions{Args: opts.KollectArgs})
		if err != nil {
			return nil, err
		}
		if err := c.RegisterKollect(ctx, p); err != nil {
			return nil, err
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			fmt.Fprintf(c.log, "context done (%v): stopping the local cluster\n", context.Cause(ctx))
			_ = c.Stop()
		case <-c.stopped:
		}
	}()
	return c, nil
}

// Stop stops every process of the cluster (kollect-apiserver replicas
// first, then extra etcds, kube-controller-manager, kube-apiserver and
// its etcd): SIGTERM, then SIGKILL after
// Options.StopTimeout. It waits until they have exited and releases the
// state directory. Calling it again returns the first result.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		defer close(c.stopped)
		c.mu.Lock()
		procs := append([]*Process(nil), c.extra...)
		c.mu.Unlock()
		var errs []error
		stop := func(p *Process) {
			if p == nil || !p.Running() {
				return
			}
			begin := time.Now()
			fmt.Fprintf(c.log, "stopping %s (pid %d)...", p.Name(), p.Pid())
			if err := p.Stop(); err != nil {
				errs = append(errs, err)
				fmt.Fprintln(c.log, " failed")
				return
			}
			fmt.Fprintf(c.log, " stopped in %.1fs\n", time.Since(begin).Seconds())
		}
		// kollect-apiserver replicas, then the etcds they may use; each
		// group in parallel, as each member may take its stop timeout.
		for _, etcds := range []bool{false, true} {
			var wg sync.WaitGroup
			var emu sync.Mutex
			for _, p := range procs {
				if p == nil || p.isEtcd != etcds || !p.Running() {
					continue
				}
				wg.Go(func() {
					begin, pid := time.Now(), p.Pid()
					err := p.Stop()
					emu.Lock()
					defer emu.Unlock()
					if err != nil {
						errs = append(errs, err)
						fmt.Fprintf(c.log, "stopping %s (pid %d) failed: %v\n", p.Name(), pid, err)
						return
					}
					fmt.Fprintf(c.log, "stopped %s (pid %d) in %.1fs\n", p.Name(), pid, time.Since(begin).Seconds())
				})
			}
			wg.Wait()
		}
		stop(c.kcm)
		stop(c.kubeAPIServer)
		stop(c.etcd)
		if c.lock != nil {
			c.lock.Close()
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// Done is closed when Stop has finished.
func (c *Cluster) Done() <-chan struct{} { return c.stopped }

// Dir is the cluster's state directory (absolute).
func (c *Cluster) Dir() string { return c.opts.Dir }

// ToolsBinDir is the directory of the binaries hack/build-tools.sh built
// (absolute).
func (c *Cluster) ToolsBinDir() string { return c.opts.ToolsBinDir }

// KubectlPath is the path of the pinned kubectl binary.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.opts.ToolsBinDir, "kubectl") }

// AdminKubeconfig is the path of a kubeconfig file for kube-apiserver with
// a system:masters client certificate (<Dir>/kubeconfig).
func (c *Cluster) AdminKubeconfig() string { return filepath.Join(c.opts.Dir, "kubeconfig") }

// RESTConfig returns a new copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restCfg) }

// KubeAPIServer is the kube-apiserver process.
func (c *Cluster) KubeAPIServer() *Process { return c.kubeAPIServer }

// ControllerManager is the kube-controller-manager process, nil with
// Options.NoControllerManager.
func (c *Cluster) ControllerManager() *Process { return c.kcm }

// Etcd is kube-apiserver's etcd.
func (c *Cluster) Etcd() *Process { return c.etcd }

// Kollect is the kollect-apiserver replica the APIService points to (the
// last one given to RegisterKollect), nil before any.
func (c *Cluster) Kollect() *Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kollect
}

// KollectCAFile is the CA that signed every kollect-apiserver serving
// certificate (the APIService caBundle).
func (c *Cluster) KollectCAFile() string { return c.certs.KollectCA.CertFile }

// KollectCAPEM is the APIService caBundle.
func (c *Cluster) KollectCAPEM() []byte { return c.certs.KollectCA.CertPEM() }

// ClusterCAFile is the CA of kube-apiserver's serving and client
// certificates.
func (c *Cluster) ClusterCAFile() string { return c.certs.CA.CertFile }

func (c *Cluster) track(p *Process) {
	c.mu.Lock()
	c.extra = append(c.extra, p)
	c.mu.Unlock()
}

func (c *Cluster) newProcess(name, binary, dir string, port int, url string, args []string, ready func(context.Context) error) *Process {
	return &Process{
		name:        name,
		binary:      binary,
		args:        args,
		dir:         dir,
		env:         childEnv(),
		logPath:     filepath.Join(c.opts.Dir, "logs", name+".log"),
		port:        port,
		url:         url,
		stopTimeout: c.opts.StopTimeout,
		progress:    c.log,
		ready:       ready,
	}
}

// childEnv is the environment of the children: the parent's without
// KUBECONFIG, so that nothing reaches a cluster other than this one.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			env = append(env, kv)
		}
	}
	return env
}

// startWithPortRetry builds and starts a process, picking new ports and
// trying again when one of its ports was taken in between (ports are
// chosen free, then bound by the child: another program can be quicker).
func (c *Cluster) startWithPortRetry(ctx context.Context, portNames []string, build func() (*Process, error)) (*Process, error) {
	for attempt := 1; ; attempt++ {
		p, err := build()
		if err != nil {
			return nil, err
		}
		err = p.startAndWait(ctx)
		if err == nil {
			return p, nil
		}
		if attempt < 3 && ctx.Err() == nil && strings.Contains(err.Error(), "address already in use") {
			fmt.Fprintf(c.log, "%s: a port was taken; retrying with other ports\n", p.Name())
			c.ports.forget(portNames...)
			continue
		}
		return nil, err
	}
}

// StartEtcd starts another etcd (besides kube-apiserver's), with data in
// <Dir>/<name>, on free loopback ports, for example to give several
// kollect-apiserver replicas one external etcd (--etcd-servers=p.URL()).
// Its log is logs/<name>.log. Cluster.Stop stops it.
func (c *Cluster) StartEtcd(ctx context.Context, name string) (*Process, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	p, err := c.newEtcd(ctx, name, filepath.Join(c.opts.Dir, name))
	if err != nil {
		return nil, err
	}
	c.track(p)
	return p, nil
}

func (c *Cluster) newEtcd(ctx context.Context, name, dataDir string) (*Process, error) {
	return c.startWithPortRetry(ctx, []string{name + "-client", name + "-peer"}, func() (*Process, error) {
		clientPort, err := c.ports.pick(name + "-client")
		if err != nil {
			return nil, err
		}
		peerPort, err := c.ports.pick(name + "-peer")
		if err != nil {
			return nil, err
		}
		clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
		args := []string{
			"--name=" + name,
			"--data-dir=" + dataDir,
			"--listen-client-urls=" + clientURL,
			"--advertise-client-urls=" + clientURL,
			"--listen-peer-urls=" + peerURL,
			"--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=" + name + "=" + peerURL,
			"--initial-cluster-state=new",
			"--log-level=warn",
		}
		if c.opts.FastEtcd {
			args = append(args, "--unsafe-no-fsync")
		}
		args = append(args, c.opts.EtcdArgs...)
		client := &http.Client{Timeout: 2 * time.Second}
		ready := func(ctx context.Context) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var h struct{ Health string }
			if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK || h.Health != "true" {
				return fmt.Errorf("%s/health: %s %q", clientURL, resp.Status, h.Health)
			}
			return nil
		}
		p := c.newProcess(name, filepath.Join(c.opts.ToolsBinDir, "etcd"), filepath.Dir(dataDir), clientPort, clientURL, args, ready)
		p.isEtcd = true
		return p, nil
	})
}

func (c *Cluster) startKubeAPIServer(ctx context.Context) (*Process, error) {
	certDir := filepath.Join(c.opts.Dir, "kube-apiserver")
	return c.startWithPortRetry(ctx, []string{"kube-apiserver"}, func() (*Process, error) {
		port, err := c.ports.pick("kube-apiserver")
		if err != nil {
			return nil, err
		}
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		cs := c.certs
		args := []string{
			"--etcd-servers=" + c.etcd.URL(),
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + certDir,
			"--tls-cert-file=" + cs.APIServer.CertFile,
			"--tls-private-key-file=" + cs.APIServer.KeyFile,
			"--client-ca-file=" + cs.CA.CertFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=" + ServiceAccountIssuer,
			"--service-account-key-file=" + cs.ServiceAccountPubKeyFile,
			"--service-account-signing-key-file=" + cs.ServiceAccountKeyFile,
			"--service-cluster-ip-range=" + ServiceClusterIPRange,
			// Front proxy: kube-apiserver (the aggregator) authenticates to
			// aggregated servers with this client certificate and passes the
			// user in these headers; the delegated authentication of
			// kollect-apiserver trusts them through the
			// kube-system/extension-apiserver-authentication ConfigMap.
			"--requestheader-client-ca-file=" + cs.FrontProxyCA.CertFile,
			"--requestheader-allowed-names=" + FrontProxyClientName,
			"--requestheader-username-headers=X-Remote-User",
			"--requestheader-uid-headers=X-Remote-Uid",
			"--requestheader-group-headers=X-Remote-Group",
			"--requestheader-extra-headers-prefix=X-Remote-Extra-",
			"--proxy-client-cert-file=" + cs.FrontProxy.CertFile,
			"--proxy-client-key-file=" + cs.FrontProxy.KeyFile,
			// false, not true: with aggregator routing kube-apiserver sends
			// aggregated requests to the Service's EndpointSlices and rejects
			// any Service type but ClusterIP/NodePort/LoadBalancer
			// ("unsupported service type \"ExternalName\""), and
			// EndpointSlice validation forbids loopback addresses. Routing
			// by Service (this setting) resolves an ExternalName Service to
			// https://<externalName>:<APIService port>, which is how the
			// harness reaches kollect-apiserver on 127.0.0.1. See doc.go.
			"--enable-aggregator-routing=false",
			// The "kubernetes" Service's endpoint would be 127.0.0.1, which
			// Endpoints validation rejects; nothing here needs it.
			"--endpoint-reconciler-type=none",
			"--profiling=false",
		}
		args = append(args, c.opts.KubeAPIServerArgs...)
		httpClient, err := rest.HTTPClientFor(c.adminConfig(url))
		if err != nil {
			return nil, err
		}
		ready := func(ctx context.Context) error { return getOK(ctx, httpClient, url+"/readyz") }
		return c.newProcess("kube-apiserver", filepath.Join(c.opts.ToolsBinDir, "kube-apiserver"), certDir, port, url, args, ready), nil
	})
}

// startControllerManager starts kube-controller-manager with
// DefaultControllers, each controller under its own ServiceAccount as in a
// kubeadm cluster, and waits until its /healthz answers and the built-in
// "view" ClusterRole has rules (role aggregation ran).
func (c *Cluster) startControllerManager(ctx context.Context) (*Process, error) {
	dir := filepath.Join(c.opts.Dir, "kube-controller-manager")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	cfg := c.adminConfig(c.kubeAPIServer.URL())
	cfg.TLSClientConfig.CertData = c.certs.KCM.CertPEM()
	keyPEM, err := c.certs.KCM.KeyPEM()
	if err != nil {
		return nil, err
	}
	cfg.TLSClientConfig.KeyData = keyPEM
	if err := writeKubeconfig(kubeconfig, cfg, "system:kube-controller-manager"); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	return c.startWithPortRetry(ctx, []string{"kube-controller-manager"}, func() (*Process, error) {
		port, err := c.ports.pick("kube-controller-manager")
		if err != nil {
			return nil, err
		}
		url := "https://127.0.0.1:" + strconv.Itoa(port)
		args := []string{
			"--kubeconfig=" + kubeconfig,
			"--authentication-kubeconfig=" + kubeconfig,
			"--authorization-kubeconfig=" + kubeconfig,
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--cert-dir=" + dir, // its self-signed serving certificate
			"--leader-elect=false",
			"--use-service-account-credentials=true",
			"--root-ca-file=" + c.certs.CA.CertFile,
			// Read only by TokenController, when a test turns it on.
			"--service-account-private-key-file=" + c.certs.ServiceAccountKeyFile,
			"--controllers=" + strings.Join(DefaultControllers, ","),
		}
		args = append(args, c.opts.ControllerManagerArgs...)
		// Its serving certificate is self-signed, in cert-dir; the probe
		// only reads /healthz on loopback.
		healthClient := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // loopback health probe
		}}
		ready := func(ctx context.Context) error {
			if err := getOK(ctx, healthClient, url+"/healthz"); err != nil {
				return err
			}
			view, err := cs.RbacV1().ClusterRoles().Get(ctx, "view", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(view.Rules) == 0 {
				return errors.New(`ClusterRole "view" has no rules yet (role aggregation)`)
			}
			return nil
		}
		return c.newProcess("kube-controller-manager", filepath.Join(c.opts.ToolsBinDir, "kube-controller-manager"), dir, port, url, args, ready), nil
	})
}

func (c *Cluster) adminConfig(host string) *rest.Config {
	keyPEM, _ := c.certs.Admin.KeyPEM()
	return &rest.Config{
		Host: host,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.certs.CA.CertPEM(),
			CertData: c.certs.Admin.CertPEM(),
			KeyData:  keyPEM,
		},
		QPS:   100,
		Burst: 200,
	}
}

func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (c *Cluster) writeAdminKubeconfig() error {
	c.restCfg = c.adminConfig(c.kubeAPIServer.URL())
	return writeKubeconfig(c.AdminKubeconfig(), c.restCfg, "kollect-admin")
}

// waitAuthenticationConfigMap waits for the ConfigMap that delegated
// authentication of aggregated servers reads (written by a kube-apiserver
// post-start hook that /readyz does not wait for).
func (c *Cluster) waitAuthenticationConfigMap(ctx context.Context) error {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return err
	}
	var lastErr error
	err = wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, lastErr = cs.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
		return lastErr == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for kube-system/extension-apiserver-authentication: %w (last: %v)", err, lastErr)
	}
	return nil
}

// Kubectl runs the pinned kubectl with the admin kubeconfig and args, and
// returns its stdout and stderr. A later --kubeconfig in args wins (to act
// as a ServiceAccount, pass "--kubeconfig", path from
// ServiceAccountKubeconfig). err is an *exec.ExitError when kubectl failed.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	cmd := c.KubectlCmd(ctx, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

// KubectlCmd returns an unstarted kubectl command with the admin kubeconfig,
// for streaming (get --watch) or stdin (apply -f -). It runs in its own
// process group, is killed (with everything it spawned) when ctx is done,
// and on Linux when the parent dies.
func (c *Cluster) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.KubectlPath(), append([]string{"--kubeconfig=" + c.AdminKubeconfig()}, args...)...)
	cmd.Env = append(childEnv(), "KUBECACHEDIR="+filepath.Join(c.opts.Dir, "kubectl-cache"))
	cmd.SysProcAttr = childSysProcAttr()
	cmd.Cancel = func() error { return signalGroup(cmd.Process.Pid, sigKill) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// portState remembers the ports chosen for each component in ports.json,
// so that a restart on the same Dir reuses them while they are free (the
// kubeconfig and the APIService keep working across runs).
type portState struct {
	path string
	mu   sync.Mutex
	// Ports maps a component port name to its port.
	Ports map[string]int `json:"ports"`
	used  map[int]bool   // handed out by this process
}

func loadPortState(path string) (*portState, error) {
	s := &portState{path: path, Ports: map[string]int{}, used: map[int]bool{}}
	if data, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(data, s) // a damaged file only costs new ports
		if s.Ports == nil {
			s.Ports = map[string]int{}
		}
	}
	return s, nil
}

// pick returns the port remembered for name if it is free, otherwise a new
// free loopback port, and remembers it.
func (s *portState) pick(name string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.Ports[name]; ok && !s.used[p] && portFree(p) {
		s.used[p] = true
		return p, nil
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("finding a free port on 127.0.0.1: %w", err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if s.used[p] || s.takenByOther(name, p) {
			continue
		}
		s.used[p] = true
		s.Ports[name] = p
		return p, s.save()
	}
	return 0, errors.New("no free port on 127.0.0.1")
}

func (s *portState) takenByOther(name string, port int) bool {
	for n, p := range s.Ports {
		if n != name && p == port {
			return true
		}
	}
	return false
}

func (s *portState) forget(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		delete(s.used, s.Ports[n])
		delete(s.Ports, n)
	}
}

func (s *portState) save() error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path, data, 0o644)
}

func portFree(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func checkExecutable(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// DefaultToolsBinDir is where hack/build-tools.sh puts the binaries:
// $KOLLECT_TOOLS_BIN if set, else _output/tools/bin in the repository that
// contains the working directory (found by walking up to
// hack/build-tools.sh).
func DefaultToolsBinDir() (string, error) {
	if d := os.Getenv("KOLLECT_TOOLS_BIN"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "_output", "tools", "bin"), nil
}

// RepoRoot walks up from the working directory to the directory that holds
// hack/build-tools.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "hack", "build-tools.sh")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no hack/build-tools.sh above %s: set Options.ToolsBinDir or KOLLECT_TOOLS_BIN", dir)
		}
	}
}

// BuildTools runs hack/build-tools.sh of the repository at root for the
// given tool sets (none: "kube", the cluster's binaries; also "helm",
// "promtool"), cheap when the binaries are up to date, with its output to
// log, and returns the binaries' directory. The first build of the kube set
// takes about 10 minutes on 2 cores.
func BuildTools(ctx context.Context, root string, log io.Writer, sets ...string) (string, error) {
	if log == nil {
		log = io.Discard
	}
	if len(sets) == 0 {
		sets = []string{"kube"}
	}
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(root, "hack", "build-tools.sh")}, sets...)...)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/build-tools.sh: %w", err)
	}
	if d := os.Getenv("KOLLECT_TOOLS_BIN"); d != "" {
		return d, nil
	}
	return filepath.Join(root, "_output", "tools", "bin"), nil
}

// KollectBinary returns $KOLLECT_BINARY when it names an executable (the
// Makefile builds it and exports it), else builds ./cmd/kollect-apiserver of
// the repository at root into _output/bin and returns that path.
func KollectBinary(ctx context.Context, root string, log io.Writer) (string, error) {
	if b := os.Getenv("KOLLECT_BINARY"); b != "" {
		if err := checkExecutable(b); err != nil {
			return "", fmt.Errorf("KOLLECT_BINARY: %w", err)
		}
		return b, nil
	}
	if log == nil {
		log = io.Discard
	}
	out := filepath.Join(root, "_output", "bin", "kollect-apiserver")
	fmt.Fprintln(log, "building kollect-apiserver...")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/kollect-apiserver")
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building kollect-apiserver: %w", err)
	}
	return out, nil
}
