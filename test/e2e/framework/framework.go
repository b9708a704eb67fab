// Package framework starts the real cluster an end-to-end test package runs
// against: pinned etcd, kube-apiserver and kube-controller-manager, and
// kollect-apiserver authenticating to kube-apiserver as the ServiceAccount of
// artifacts/deploy with exactly the RBAC those manifests grant, registered
// through the APIService. Every scenario therefore also proves that the
// install manifests' least-privilege RBAC is sufficient.
package framework

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/pkg/localcluster"
)

// Env is the running cluster of a test package.
type Env struct {
	Root    string
	Cluster *localcluster.Cluster
	// Kollect is the kollect-apiserver replica the APIService points to.
	Kollect *localcluster.Process
	// KollectKubeconfig is the ServiceAccount identity Kollect runs with.
	KollectKubeconfig string
	// KollectOptions are the options Kollect was started with: a test
	// starts another replica like it (other flags, the same data) from a
	// copy.
	KollectOptions localcluster.KollectOptions
}

// Options tune the environment.
type Options struct {
	// KollectArgs are extra kollect-apiserver flags.
	KollectArgs []string
	// AllowPrivateSinkEndpoints passes --allow-private-sink-endpoints
	// (tests whose sinks listen on 127.0.0.1 need it, and say so).
	AllowPrivateSinkEndpoints bool
	// Install grants Kollect its identity and permissions in the fresh
	// cluster: it must create the ServiceAccount kollect-system/kollect-apiserver
	// and its RBAC. Default: kubectl apply of the RBAC files of
	// artifacts/deploy. The chart's package installs the Helm chart instead.
	Install func(ctx context.Context, env *Env) error
}

// rbacManifests are the files of artifacts/deploy that grant Kollect its
// permissions; the workloads and the APIService are the harness's job.
var rbacManifests = []string{"00-namespace.yaml", "01-serviceaccount.yaml", "02-clusterroles.yaml", "03-clusterrolebindings.yaml", "04-roles.yaml", "05-rolebindings.yaml"}

// Main builds what the tests need, starts the environment, runs the tests
// and stops everything. Use it from TestMain: os.Exit(framework.Main(m, &env, opts)).
func Main(m *testing.M, env *Env, opts Options) int {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	if err := env.start(ctx, opts); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		if env.Cluster != nil {
			_ = env.Cluster.Stop()
		}
		return 1
	}
	code := m.Run()
	if err := env.Cluster.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stopping the cluster: %v\n", err)
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: logs of every process are in %s\n", filepath.Join(env.Cluster.Dir(), "logs"))
	} else {
		_ = os.RemoveAll(env.Cluster.Dir())
	}
	return code
}

func (env *Env) start(ctx context.Context, opts Options) error {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return err
	}
	env.Root = root
	tools, err := localcluster.BuildTools(ctx, root, os.Stderr)
	if err != nil {
		return err
	}
	binary, err := localcluster.KollectBinary(ctx, root, os.Stderr)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "kollect-e2e-")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "e2e: cluster state in %s\n", dir)
	env.Cluster, err = localcluster.Start(ctx, localcluster.Options{
		Dir: dir, ToolsBinDir: tools, KollectBinary: "", FastEtcd: true, Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	install := opts.Install
	if install == nil {
		install = applyRBACManifests
	}
	if err := install(ctx, env); err != nil {
		return err
	}
	env.KollectKubeconfig, err = env.Cluster.ServiceAccountKubeconfig(ctx, "kollect-system", "kollect-apiserver", 2*time.Hour)
	if err != nil {
		return err
	}
	env.KollectOptions = localcluster.KollectOptions{
		Binary: binary, Kubeconfig: env.KollectKubeconfig,
		AllowPrivateSinkEndpoints: opts.AllowPrivateSinkEndpoints, Args: opts.KollectArgs,
	}
	env.Kollect, err = env.Cluster.StartKollect(ctx, env.KollectOptions)
	if err != nil {
		return err
	}
	return env.Cluster.RegisterKollect(ctx, env.Kollect)
}

func applyRBACManifests(ctx context.Context, env *Env) error {
	args := []string{"apply"}
	for _, f := range rbacManifests {
		args = append(args, "-f", env.Path(filepath.Join("artifacts", "deploy", f)))
	}
	if _, _, err := env.Cluster.Kubectl(ctx, args...); err != nil {
		return fmt.Errorf("applying the install RBAC: %w", err)
	}
	return nil
}

// Admin is an admin client configuration through kube-apiserver.
func (env *Env) Admin() *rest.Config { return env.Cluster.RESTConfig() }

// Kollect returns a typed Kollect client through kube-apiserver as admin.
func (env *Env) KollectClient(t testing.TB) versioned.Interface {
	return versioned.NewForConfigOrDie(env.Admin())
}

// Kube returns a typed Kubernetes client as admin.
func (env *Env) Kube(t testing.TB) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(env.Admin())
}

// Dynamic returns a dynamic client as admin.
func (env *Env) Dynamic(t testing.TB) dynamic.Interface {
	return dynamic.NewForConfigOrDie(env.Admin())
}

// Kubectl runs the pinned kubectl as admin and fails the test on error.
func (env *Env) Kubectl(t testing.TB, ctx context.Context, args ...string) string {
	t.Helper()
	out, _, err := env.Cluster.Kubectl(ctx, args...)
	if err != nil {
		t.Fatalf("%v", err)
	}
	return out
}

// KubectlFails runs kubectl expecting failure and returns its stderr.
func (env *Env) KubectlFails(t testing.TB, ctx context.Context, args ...string) string {
	t.Helper()
	out, stderr, err := env.Cluster.Kubectl(ctx, args...)
	if err == nil {
		t.Fatalf("kubectl %s succeeded, want failure; stdout:\n%s", strings.Join(args, " "), out)
	}
	return stderr
}

// Path resolves a repository-relative path.
func (env *Env) Path(rel string) string { return filepath.Join(env.Root, rel) }
