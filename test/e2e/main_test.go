// Package e2e drives kollect-apiserver through a real kube-apiserver with
// the real kubectl and client-go (issue 3), running as the ServiceAccount
// of the install manifests.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"kollect.dev/kollect/test/e2e/framework"
)

var env framework.Env

// fileSinkRoot is the server's --file-sink-root: a file sink of namespace
// N at file:///p writes under fileSinkRoot/N/p.
var fileSinkRoot string

func TestMain(m *testing.M) {
	var err error
	if fileSinkRoot, err = os.MkdirTemp("", "kollect-e2e-file-sinks-"); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	code := framework.Main(m, &env, framework.Options{
		// Short periods so that re-checks at reconcile (TestRevokedReferences)
		// happen within seconds: exporters re-check every watchdog period,
		// targets at every full walk.
		KollectArgs: []string{"--export-watchdog-period=5s", "--resync-period=30s", "--file-sink-root=" + fileSinkRoot},
	})
	_ = os.RemoveAll(fileSinkRoot)
	os.Exit(code)
}
