// Package requesterage is the end-to-end suite of kollect-apiserver started
// with --requester-max-age (issue 12), through the real kube-apiserver. It
// has a cluster of its own: the flag is per process, and would expire the
// objects of the other suites.
package requesterage

import (
	"fmt"
	"os"
	"testing"
	"time"

	"kollect.dev/kollect/test/e2e/framework"
)

var env framework.Env

// maxAge is long enough for the objects to work before they expire, and
// to recover after they are re-affirmed, on a loaded machine.
const maxAge = 40 * time.Second

func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "kollect-e2e-file-sinks-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	code := framework.Main(m, &env, framework.Options{KollectArgs: []string{
		"--requester-max-age=" + maxAge.String(),
		// Short periods, so that the re-checks come within seconds: the
		// exporters and the sink check every watchdog period, targets at
		// every full walk.
		"--export-watchdog-period=2s", "--resync-period=5s",
		"--file-sink-root=" + root,
	}})
	_ = os.RemoveAll(root)
	os.Exit(code)
}
