package fleet

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/localcluster"
)

// startSideAPIServer starts a second kube-apiserver on member's etcd, with
// member's flags but on another port, which no kubeconfig of the hub
// names: the member's objects can change while the address the hub knows
// does not answer. It returns an admin configuration for it and a func
// that stops it (also run at cleanup).
func startSideAPIServer(ctx context.Context, t *testing.T, member *localcluster.Cluster) (*rest.Config, func()) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	_ = l.Close()
	args := member.KubeAPIServer().Args()
	i := slices.IndexFunc(args, func(a string) bool { return strings.HasPrefix(a, "--secure-port=") })
	if i < 0 {
		t.Fatalf("kube-apiserver has no --secure-port: %q", args)
	}
	args[i] = "--secure-port=" + port

	logPath := filepath.Join(member.Dir(), "logs", "kube-apiserver-side.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(member.ToolsBinDir(), "kube-apiserver"), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.WaitDelay = 5 * time.Second
	started := time.Now()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logFile.Close()
		close(exited)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
		})
	}
	t.Cleanup(stop)

	cfg := member.RESTConfig()
	cfg.Host = "https://127.0.0.1:" + port
	kube := kubernetes.NewForConfigOrDie(cfg)
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("the side kube-apiserver exited")
		default:
		}
		_, lastErr = kube.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return lastErr == nil, nil
	})
	if err != nil {
		b, _ := os.ReadFile(logPath)
		t.Fatalf("the side kube-apiserver did not get ready: %v (last: %v); its log:\n%s", err, lastErr, tail(string(b), 30))
	}
	t.Logf("a side kube-apiserver on %s serves %s's etcd (ready in %.1fs)", cfg.Host, filepath.Base(member.Dir()), time.Since(started).Seconds())
	return cfg, stop
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
