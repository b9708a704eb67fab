// Package tenantmode is the end-to-end suite of kollect-apiserver started
// with --tenant-mode (issue 6, acceptance point 5), through the real
// kube-apiserver with the real kubectl and client-go. It has a cluster of
// its own: the flag is per process, and the other suites need the cluster
// kinds.
package tenantmode

import (
	"fmt"
	"os"
	"testing"

	"kollect.dev/kollect/test/e2e/framework"
)

var env framework.Env

func TestMain(m *testing.M) {
	// File sinks (namespacedKindsWork) need a --file-sink-root.
	root, err := os.MkdirTemp("", "kollect-e2e-file-sinks-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	code := framework.Main(m, &env, framework.Options{KollectArgs: []string{"--tenant-mode", "--file-sink-root=" + root}})
	_ = os.RemoveAll(root)
	os.Exit(code)
}
