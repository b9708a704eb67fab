// Package chart installs Kollect with its Helm chart (charts/kollect) into a
// real cluster with the real helm, and runs kollect-apiserver as the chart's
// ServiceAccount with the chart's RBAC. The local cluster has no kubelet, so
// the chart's pods never start: the harness runs the binary on loopback and
// routes the chart's APIService to it, as the main e2e package does for the
// plain manifests.
package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"kollect.dev/kollect/pkg/localcluster"
	"kollect.dev/kollect/test/e2e/framework"
)

var (
	env framework.Env
	// helm is the pinned helm binary (hack/tools/helm).
	helm string
)

const (
	release   = "kollect"
	namespace = "kollect-system"
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Options{
		Install: helmInstall,
		// As docs/quickstart.md installs it: its Postgres is in the cluster
		// (here: on loopback).
		AllowPrivateSinkEndpoints: true,
	}))
}

// helmInstall is `helm install` of the chart with its defaults (bundled etcd,
// generated certificates). The harness then takes over two fields of what
// the chart made, because the chart's pods cannot run here: the Service
// kollect-api becomes an ExternalName to loopback, and the APIService gets
// the loopback replica's port and CA. Everything else stays the chart's.
func helmInstall(ctx context.Context, e *framework.Env) error {
	tools, err := localcluster.BuildTools(ctx, e.Root, os.Stderr, "helm")
	if err != nil {
		return err
	}
	helm = filepath.Join(tools, "helm")
	if out, err := runHelm(ctx, "install", release, e.Path("charts/kollect"),
		"--namespace", namespace, "--create-namespace"); err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out)
	}
	return nil
}
