// Package tenantmode is the end-to-end suite of kollect-apiserver started
// with --tenant-mode (issue 6, acceptance point 5), through the real
// kube-apiserver with the real kubectl and client-go. It has a cluster of
// its own: the flag is per process, and the other suites need the cluster
// kinds.
package tenantmode

import (
	"os"
	"testing"

	"kollect.dev/kollect/test/e2e/framework"
)

var env framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Options{KollectArgs: []string{"--tenant-mode"}}))
}
