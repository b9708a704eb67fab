//go:build !race

package expression

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Not under the race detector, whose shadow memory leaves checkers
// unbounded (raceBuild).

// TestCheckerBoundsMemory: a check that needs more memory than the
// checker may have ends the checker, not the server, and says so.
func TestCheckerBoundsMemory(t *testing.T) {
	withCheckers(t, func() { skipCounts, checkerMemory, checkCPU = true, 160<<20, time.Minute })
	_, err := Compile(reviewedExpressions["index doubling (helper 60: out of memory)"])
	if err == nil || !strings.Contains(err.Error(), "too much memory") {
		t.Fatalf("%v; want it refused for its memory", err)
	}
	if errors.Is(err, ErrCheckerUnavailable) {
		t.Errorf("%v: a property of the expression, not the server's", err)
	}
}
