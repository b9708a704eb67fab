package memberconfig

import (
	"context"
	"io"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/pkg/netguard"
)

// The member cluster is started by the first test that needs one and shared
// by the others; the unit tests and the fuzz target never start it.
var (
	memberOnce   sync.Once
	member       *localcluster.Cluster
	memberErr    error
	memberCancel context.CancelFunc = func() {}
	toolsOnce    sync.Once
	toolsDir     string
	toolsErr     error
)

func TestMain(m *testing.M) {
	code := m.Run()
	memberCancel()
	if member != nil {
		_ = member.Stop()
		_ = os.RemoveAll(member.Dir())
	}
	os.Exit(code)
}

// tools returns the pinned binaries' directory ($KOLLECT_TOOLS_BIN, else
// _output/tools/bin), building them when missing or stale.
func tools(t *testing.T) string {
	t.Helper()
	toolsOnce.Do(func() {
		var root string
		if root, toolsErr = localcluster.RepoRoot(); toolsErr == nil {
			toolsDir, toolsErr = localcluster.BuildTools(context.Background(), root, t.Output())
		}
	})
	if toolsErr != nil {
		t.Fatal(toolsErr)
	}
	return toolsDir
}

// memberCluster returns the shared member: etcd, kube-apiserver and
// kube-controller-manager with the token controller, which fills in the
// long-lived token Secret hack/register-member.sh creates.
func memberCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	dir := tools(t)
	memberOnce.Do(func() {
		var stateDir string
		if stateDir, memberErr = os.MkdirTemp("", "kollect-member-"); memberErr != nil {
			return
		}
		// Not the test's context: the cluster outlives the test that starts it.
		var ctx context.Context
		ctx, memberCancel = context.WithCancel(context.Background())
		begin := time.Now()
		member, memberErr = localcluster.Start(ctx, localcluster.Options{
			Dir: stateDir, ToolsBinDir: dir, FastEtcd: true, Log: progress(),
			ControllerManagerArgs: []string{"--controllers=" + strings.Join(append(localcluster.DefaultControllers, localcluster.TokenController), ",")},
		})
		t.Logf("member cluster start to ready: %.1fs", time.Since(begin).Seconds())
	})
	if memberErr != nil {
		t.Fatalf("starting the member cluster: %v", memberErr)
	}
	return member
}

// progress is where the shared clusters report starting and stopping: not
// a test's log, since they stop after the tests.
func progress() io.Writer {
	if testing.Verbose() {
		return os.Stderr
	}
	return io.Discard
}

// loopbackDialer may reach loopback addresses only, through an allowed
// prefix, as a server run with --allowed-sink-cidrs=127.0.0.0/8,::1 does.
func loopbackDialer(t testing.TB) *netguard.Dialer {
	t.Helper()
	d, err := netguard.New(netguard.Config{Policy: netguard.Policy{
		AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// defaultDialer is the policy of a server run without flags; dnsServer,
// when set, answers its lookups.
func defaultDialer(t testing.TB, dnsServer string) *netguard.Dialer {
	t.Helper()
	d, err := netguard.New(netguard.Config{DNSServer: dnsServer})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Credentials in the test kubeconfigs: no error message may hold them.
// FuzzRESTConfig knows credentials by the mark SECRET.
const (
	testToken    = "tok-SECRET-3e1f9c2a7b5d4e6f8a0b1c2d"
	testPassword = "pw-SECRET-9a8b7c6d5e4f3a2b"
)

// kubeconfig returns a kubeconfig with context "ctx", cluster "c" (server
// https://203.0.113.10:6443, a documentation address the policy allows) and
// user "u" (a token), after edit changes it.
func kubeconfig(t testing.TB, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: "https://203.0.113.10:6443", CertificateAuthorityData: testCAPEM}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: testToken}
	cfg.Contexts["ctx"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "ctx"
	if edit != nil {
		edit(cfg)
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// testCAPEM is a CA certificate no server uses, for kubeconfigs that must
// load but never verify a real server.
var testCAPEM = mustCA()
