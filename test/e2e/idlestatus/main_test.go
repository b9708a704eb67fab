// Package idlestatus measures how often Inventories at rest write their
// status (issue 11, acceptance point 5), through the real kube-apiserver.
// It has a cluster of its own because it needs the default 30s export
// watchdog: the export suite runs with 2s to observe debouncing quickly.
package idlestatus

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
	"kollect.dev/kollect/test/collectenv"
)

var (
	env     *collectenv.Env
	kube    kubernetes.Interface
	kollect versioned.Interface
)

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	e, err := collectenv.Start(ctx, collectenv.Options{
		FastEtcd:  true,
		FileSinks: true,
		Log:       os.Stderr,
		KollectArgs: []string{
			// The webhook receiver listens on 127.0.0.1.
			"--allow-private-sink-endpoints",
			"--cluster-name=idle",
			"-v=2",
		},
	})
	if err != nil {
		cancel()
		fmt.Fprintf(os.Stderr, "e2e/idlestatus: %v\n", err)
		os.Exit(1)
	}
	env, kube, kollect = e, e.Kube, e.Client
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e/idlestatus: logs kept in %s/logs\n", e.Dir)
	}
	if err := e.Stop(code != 0); err != nil {
		fmt.Fprintf(os.Stderr, "e2e/idlestatus: stopping the cluster: %v\n", err)
	}
	cancel()
	os.Exit(code)
}
