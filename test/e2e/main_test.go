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
	os.Exit(framework.Main(m, &env, framework.Options{}))
}
