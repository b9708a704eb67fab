package server

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// TestEmbeddedEtcdKeepsObjectsAcrossRestart runs the server's real run loop
// without --etcd-servers twice on one --data-dir: the embedded etcd starts,
// the server stops cleanly when its context ends (what SIGTERM does), and
// the second run serves what the first stored.
func TestEmbeddedEtcdKeepsObjectsAcrossRestart(t *testing.T) {
	dataDir := t.TempDir()
	certDir := t.TempDir()

	client, stop := runServer(t, dataDir, certDir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created, err := client.KollectV1alpha1().Profiles("team-a").Create(ctx, &v1alpha1.Profile{
		ObjectMeta: metav1.ObjectMeta{Name: "deployments", Namespace: "team-a"},
		Spec: v1alpha1.ProfileSpec{
			TargetGVK:  v1alpha1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
			Attributes: []v1alpha1.Attribute{{Name: "image", Path: "{.spec.template.spec.containers[*].image}"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	stop()

	client, stop = runServer(t, dataDir, certDir)
	defer stop()
	got, err := client.KollectV1alpha1().Profiles("team-a").Get(ctx, "deployments", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion {
		t.Errorf("after restart uid/rv = %s/%s, want %s/%s", got.UID, got.ResourceVersion, created.UID, created.ResourceVersion)
	}
}

// runServer starts Options.Run with delegated authentication and
// authorization off (no host cluster in a unit test) and returns a client
// and a function that stops the server and waits until Run has returned.
func runServer(t *testing.T, dataDir, certDir string) (versioned.Interface, func()) {
	t.Helper()
	o := NewOptions()
	o.DataDir = dataDir
	rec := o.Recommended
	rec.Authentication, rec.Authorization, rec.CoreAPI, rec.Admission = nil, nil, nil, nil
	rec.Features.EnablePriorityAndFairness = false
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rec.SecureServing.Listener = ln
	rec.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	rec.SecureServing.ServerCert.CertDirectory = certDir

	if err := o.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	loopback := make(chan *rest.Config, 1)
	o.afterConfig = func(c *rest.Config) { loopback <- c }
	go func() { done <- o.Run(ctx) }()

	var cfg *rest.Config
	select {
	case cfg = <-loopback:
	case err := <-done:
		cancel()
		t.Fatalf("server exited before serving: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("server not configured within 2m")
	}
	client := versioned.NewForConfigOrDie(cfg)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		cancel()
		t.Fatalf("not ready: %v", err)
	}
	return client, func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run returned %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("server did not stop within 1m")
		}
	}
}

// TestSelfSignedCertificateNames: without --tls-cert-file the server makes a
// certificate valid for the Service the APIService routes through.
func TestSelfSignedCertificateNames(t *testing.T) {
	o := NewOptions()
	o.ServiceName, o.ServiceNamespace = "api", "platform"
	rec := o.Recommended
	rec.Authentication, rec.Authorization, rec.CoreAPI, rec.Admission = nil, nil, nil, nil
	rec.Features.EnablePriorityAndFairness = false
	rec.Etcd.StorageConfig.Transport.ServerList = []string{"http://127.0.0.1:2379"} // never dialled by Config
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rec.SecureServing.Listener, rec.SecureServing.BindPort = ln, ln.Addr().(*net.TCPAddr).Port
	rec.SecureServing.ServerCert.CertDirectory = t.TempDir()
	if _, err := o.Config(); err != nil {
		t.Fatalf("config: %v", err)
	}
	pemBytes, err := os.ReadFile(filepath.Join(rec.SecureServing.ServerCert.CertDirectory, "apiserver.crt"))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemBytes)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"api.platform.svc", "api.platform.svc.cluster.local", "localhost"} {
		if err := cert.VerifyHostname(name); err != nil {
			t.Errorf("serving certificate not valid for %s: %v (SANs %v)", name, err, cert.DNSNames)
		}
	}
}
