package server

import (
	"context"
	"net"
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
