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

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
	return upgradeThroughModes(ctx, e)
}

// upgrades records what the real `helm upgrade`s of upgradeThroughModes did,
// for TestHelmUpgrades: they run before the harness takes over the Service
// and the APIService, as on a real cluster.
var upgrades struct {
	errs []string
	// servingCert holds kollect-serving-cert's data after the install and
	// after each upgrade.
	servingCert []map[string][]byte
	// dataPVCKept: the embedded etcd's PVC outlived the switch back to the
	// bundled etcd.
	dataPVCKept bool
}

// upgradeThroughModes upgrades the release in place, to the embedded etcd
// and back to the defaults, as a platform team would.
func upgradeThroughModes(ctx context.Context, e *framework.Env) error {
	snapshot := func() {
		s, err := e.Kube(nil).CoreV1().Secrets(namespace).Get(ctx, "kollect-serving-cert", metav1.GetOptions{})
		if err != nil {
			upgrades.errs = append(upgrades.errs, err.Error())
			return
		}
		upgrades.servingCert = append(upgrades.servingCert, s.Data)
	}
	snapshot()
	// Without values, helm upgrade reuses the release's: going back to the
	// defaults takes --reset-values.
	for _, sets := range [][]string{
		nil, // the same values again
		{"--set", "etcd.mode=embedded", "--set", "replicas=1"},
		{"--reset-values"}, // back to the bundled etcd
	} {
		args := append([]string{"upgrade", release, e.Path("charts/kollect"), "--namespace", namespace}, sets...)
		if out, err := runHelm(ctx, args...); err != nil {
			upgrades.errs = append(upgrades.errs, fmt.Sprintf("helm %v: %v\n%s", args, err, out))
		}
		snapshot()
	}
	_, err := e.Kube(nil).CoreV1().PersistentVolumeClaims(namespace).Get(ctx, "kollect-data", metav1.GetOptions{})
	upgrades.dataPVCKept = err == nil
	return nil
}
