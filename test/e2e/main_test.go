// Package e2e drives kollect-apiserver through a real kube-apiserver with
// the real kubectl and client-go (issue 3), running as the ServiceAccount
// of the install manifests.
package e2e

import (
	"os"
	"testing"

	"kollect.dev/kollect/test/e2e/framework"
)

var env framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Options{
		// Short periods so that re-checks at reconcile (TestRevokedReferences)
		// happen within seconds: exporters re-check every watchdog period,
		// targets at every full walk.
		KollectArgs: []string{"--export-watchdog-period=5s", "--resync-period=30s"},
	}))
}
