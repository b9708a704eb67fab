package localcluster

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// tools returns the directory of the pinned binaries, building them first
// when they are missing or stale (a no-op when they are current).
func tools(t *testing.T) string {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := BuildTools(t.Context(), root, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range Tools {
		if err := checkExecutable(filepath.Join(dir, tool)); err != nil {
			t.Fatalf("hack/build-tools.sh did not build %s: %v", tool, err)
		}
	}
	return dir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestCluster starts etcd and kube-apiserver (and kollect-apiserver when
// KOLLECT_BINARY names a binary), checks RBAC is enforced, that kubectl is
// the pinned release, stops everything and checks no process is left, then
// starts again on the same directory and checks the state persisted.
func TestCluster(t *testing.T) {
	tools := tools(t)
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	dir := t.TempDir()
	// The Makefile builds kollect-apiserver and exports KOLLECT_BINARY; a
	// bare `go test` of this package checks the cluster without it.
	kollect := os.Getenv("KOLLECT_BINARY")
	if kollect != "" {
		if err := checkExecutable(kollect); err != nil {
			t.Fatalf("KOLLECT_BINARY: %v", err)
		}
	}

	begin := time.Now()
	c, err := Start(ctx, Options{Dir: dir, ToolsBinDir: tools, KollectBinary: kollect, Log: t.Output(), FastEtcd: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	t.Logf("cluster start to ready: %.1fs", time.Since(begin).Seconds())

	// Everything listens on 127.0.0.1.
	for _, p := range []*Process{c.Etcd(), c.KubeAPIServer()} {
		if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") && !strings.HasPrefix(p.URL(), "https://127.0.0.1:") {
			t.Errorf("%s serves on %s", p.Name(), p.URL())
		}
	}

	// An unauthenticated request is refused (anonymous gets 403 from RBAC).
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.certs.CA.CertPEM())
	anon := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, path := range []string{"/api/v1/namespaces", "/api/v1/namespaces/kube-system/secrets", "/apis/apiregistration.k8s.io/v1/apiservices"} {
		resp, err := anon.Get(c.KubeAPIServer().URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Errorf("anonymous GET %s: %s, want 401 or 403", path, resp.Status)
		}
	}

	// The admin client works; a ServiceAccount with no binding is refused,
	// through the real kubectl; kubectl and kube-apiserver are v1.36.3.
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "persisted"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	saKubeconfig, err := c.ServiceAccountKubeconfig(ctx, "rbac-test", "nobody", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, err := c.Kubectl(ctx, "--kubeconfig", saKubeconfig, "get", "configmaps", "-n", "default")
	if err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("kubectl get configmaps as a ServiceAccount without bindings: err=%v stderr=%s", err, stderr)
	}
	out, _, err := c.Kubectl(ctx, "auth", "can-i", "get", "configmaps", "--as=system:serviceaccount:rbac-test:nobody")
	if err == nil || strings.TrimSpace(out) != "no" {
		t.Errorf("kubectl auth can-i for the ServiceAccount: %q, %v; want no", out, err)
	}
	// The built-in view role works (kube-controller-manager aggregated its
	// rules): a RoleBinding grants reading in that namespace only.
	if _, _, err := c.Kubectl(ctx, "create", "rolebinding", "nobody-view", "-n", "rbac-test", "--clusterrole=view", "--serviceaccount=rbac-test:nobody"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, stderr, err = c.Kubectl(ctx, "--kubeconfig", saKubeconfig, "get", "configmaps", "-n", "rbac-test")
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Errorf("get configmaps with view in rbac-test: %v", err)
	}
	if _, stderr, err = c.Kubectl(ctx, "--kubeconfig", saKubeconfig, "get", "configmaps", "-n", "default"); err == nil || !strings.Contains(stderr, "Forbidden") {
		t.Errorf("get configmaps in default with view in rbac-test only: err=%v stderr=%s", err, stderr)
	}
	// The namespace and ServiceAccount controllers run.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts("rbac-test").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Errorf("no default ServiceAccount in a new namespace: %v", err)
	}
	out, _, err = c.Kubectl(ctx, "version", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		ClientVersion struct{ GitVersion string } `json:"clientVersion"`
		ServerVersion struct{ GitVersion string } `json:"serverVersion"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err, out)
	}
	if v.ClientVersion.GitVersion != "v1.36.3" || v.ServerVersion.GitVersion != "v1.36.3" {
		t.Errorf("kubectl version: client %q server %q, want v1.36.3", v.ClientVersion.GitVersion, v.ServerVersion.GitVersion)
	}

	if kollect != "" {
		testKollect(ctx, t, c)
	} else {
		t.Log("KOLLECT_BINARY not set: kollect-apiserver steps skipped")
	}

	// Stop leaves no process behind.
	pids := c.pids()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("child processes left after Stop: %v", kids)
	}

	// Same directory again: same certificates and ports, data kept.
	caBefore, _ := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	kubePort := c.KubeAPIServer().Port()
	begin = time.Now()
	c2, err := Start(ctx, Options{Dir: dir, ToolsBinDir: tools, Log: t.Output(), FastEtcd: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Stop() })
	t.Logf("restart on existing data to ready: %.1fs", time.Since(begin).Seconds())
	caAfter, _ := os.ReadFile(filepath.Join(dir, "pki", "ca.crt"))
	if string(caBefore) != string(caAfter) {
		t.Error("the cluster CA changed across runs")
	}
	if c2.KubeAPIServer().Port() != kubePort {
		t.Logf("kube-apiserver port changed across runs (%d -> %d): it was taken", kubePort, c2.KubeAPIServer().Port())
	}
	cs2, err := kubernetes.NewForConfig(c2.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if cm, err := cs2.CoreV1().ConfigMaps("default").Get(ctx, "persisted", metav1.GetOptions{}); err != nil || cm.Data["k"] != "v" {
		t.Errorf("data did not persist: %v %v", cm, err)
	}
	pids = c2.pids()
	if err := c2.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if alive(pid) {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
}

// testKollect checks the registration, kill -9 and restart, and a second
// replica.
func testKollect(ctx context.Context, t *testing.T, c *Cluster) {
	k := c.Kollect()
	if k == nil {
		t.Fatal("no kollect-apiserver replica registered")
	}
	if _, _, err := c.Kubectl(ctx, "get", "--raw", "/apis/kollect.dev/v1alpha1"); err != nil {
		t.Fatal(err)
	}
	out, _, err := c.Kubectl(ctx, "get", "apiservice", APIServiceName, "-o", "jsonpath={.status.conditions[?(@.type==\"Available\")].status}")
	if err != nil || out != "True" {
		t.Fatalf("APIService Available: %q %v", out, err)
	}

	// kill -9, then the aggregator reports it unavailable; start again.
	pid := k.Pid()
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	if alive(pid) {
		t.Fatalf("kollect-apiserver pid %d alive after Kill", pid)
	}
	if _, _, err := c.Kubectl(ctx, "get", "--raw", "/apis/kollect.dev/v1alpha1"); err == nil {
		t.Error("discovery through kube-apiserver answered with kollect-apiserver killed")
	}
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterKollect(ctx, k); err != nil {
		t.Fatal(err)
	}

	// A second replica, with its own port and data directory.
	k2, err := c.StartKollect(ctx, KollectOptions{Name: "kollect-apiserver-2"})
	if err != nil {
		t.Fatal(err)
	}
	if k2.Port() == k.Port() {
		t.Fatalf("second replica on the same port %d", k.Port())
	}
	if err := c.RegisterKollect(ctx, k2); err != nil {
		t.Fatal(err)
	}
	if err := k2.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterKollect(ctx, k); err != nil {
		t.Fatal(err)
	}
	if err := k2.Stop(); err != nil {
		t.Fatal(err)
	}
}

// pids returns the pid of every process the cluster started.
func (c *Cluster) pids() map[string]int {
	m := map[string]int{}
	for _, p := range append([]*Process{c.etcd, c.kubeAPIServer, c.kcm}, c.extra...) {
		if p != nil && p.Pid() != 0 {
			m[p.Name()] = p.Pid()
		}
	}
	return m
}

// alive reports whether /proc/<pid> exists and is not a zombie.
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// children lists the processes whose parent is this test process.
func children(t *testing.T) []string {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("listing child processes needs Linux /proc: %v", err)
	}
	var kids []string
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		f, err := os.Open("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		var name string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "Name:"); ok {
				name = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(line, "PPid:"); ok && strings.TrimSpace(v) == self {
				kids = append(kids, e.Name()+" "+name)
			}
		}
		f.Close()
	}
	return kids
}

// TestParentDeathKillsChildren runs this test binary as a helper that
// starts etcd and then panics without stopping it; the kernel must kill
// etcd (Pdeathsig).
func TestParentDeathKillsChildren(t *testing.T) {
	if os.Getenv("LOCALCLUSTER_HELPER_DIR") != "" {
		helperStartEtcdAndPanic()
		return
	}
	tools := tools(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestParentDeathKillsChildren$", "-test.v")
	cmd.Env = append(os.Environ(), "LOCALCLUSTER_HELPER_DIR="+t.TempDir(), "KOLLECT_TOOLS_BIN="+tools)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var helperErr strings.Builder // the helper's panic, shown on failure only
	cmd.Stderr = &helperErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := 0
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ETCD_PID="); ok {
			pid, _ = strconv.Atoi(v)
		}
	}
	_ = cmd.Wait() // the helper panics: exit status 2
	if pid == 0 {
		t.Fatalf("the helper did not report an etcd pid:\n%s", helperErr.String())
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if alive(pid) {
		_ = signalGroup(pid, sigKill)
		t.Fatalf("etcd (pid %d) outlived its parent:\n%s", pid, helperErr.String())
	}
}

func helperStartEtcdAndPanic() {
	dir := os.Getenv("LOCALCLUSTER_HELPER_DIR")
	ports, _ := loadPortState(filepath.Join(dir, "ports.json"))
	_ = os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
	c := &Cluster{
		opts:  Options{Dir: dir, ToolsBinDir: os.Getenv("KOLLECT_TOOLS_BIN"), StartTimeout: time.Minute, StopTimeout: time.Second, FastEtcd: true},
		log:   io.Discard,
		ports: ports,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := c.newEtcd(ctx, "etcd", filepath.Join(dir, "etcd"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	fmt.Printf("ETCD_PID=%d\n", p.Pid())
	os.Stdout.Sync()
	panic("helper: dying without stopping etcd")
}
