package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestInstallManifestsDryRun: the whole install is accepted by the real
// kube-apiserver's validation and admission (server-side dry run). The RBAC
// part of it is what kollect-apiserver runs with in this whole suite.
func TestInstallManifestsDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env.Kubectl(t, ctx, "apply", "--dry-run=server", "-f", env.Path("artifacts/deploy"))
	// Server-side too; the RBAC part is applied already (client-side) and the
	// harness owns the Service and APIService, hence --force-conflicts.
	env.Kubectl(t, ctx, "apply", "--dry-run=server", "--server-side", "--force-conflicts", "-f", env.Path("artifacts/deploy"))

	// And the server really runs as the manifests' ServiceAccount.
	if env.KollectKubeconfig == env.Cluster.AdminKubeconfig() {
		t.Fatal("kollect-apiserver runs with the admin kubeconfig")
	}
	crb, err := env.Kube(t).RbacV1().ClusterRoleBindings().Get(ctx, "kollect-apiserver", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the manifests' ClusterRoleBinding: %v", err)
	}
	if len(crb.Subjects) == 0 || crb.Subjects[0].Name != "kollect-apiserver" {
		t.Errorf("ClusterRoleBinding subjects %+v", crb.Subjects)
	}
}

// TestRestartKeepsObjects: kollect-apiserver without --etcd-servers keeps
// its objects in the embedded etcd across a restart (SIGTERM, start again).
func TestRestartKeepsObjects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env.Kubectl(t, ctx, "create", "namespace", "restart")
	client := env.KollectClient(t).KollectV1alpha1()
	before, err := client.Scopes("restart").Create(ctx, scope("kept"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := env.Kollect.Restart(ctx); err != nil {
		t.Fatalf("restart: %v", err)
	}
	if err := env.Cluster.RegisterKollect(ctx, env.Kollect); err != nil {
		t.Fatalf("available again: %v", err)
	}
	after, err := client.Scopes("restart").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if after.UID != before.UID {
		t.Errorf("uid %s after restart, want %s", after.UID, before.UID)
	}
}
