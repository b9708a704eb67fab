package load

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func sample(path string, c int, ms ...int) Sample {
	lat := make([]time.Duration, len(ms))
	for i, m := range ms {
		lat[i] = time.Duration(m) * time.Millisecond
	}
	return Sample{Path: path, Result: FromLatencies("get", c, lat, time.Second)}
}

// TestPoolMergesPasses: the pooled sample holds every pass's latencies, so
// its p99 is the tail of all of them, not of one pass.
func TestPoolMergesPasses(t *testing.T) {
	fast := make([]int, 100)
	slow := make([]int, 100)
	for i := range fast {
		fast[i], slow[i] = 1, 1
	}
	slow[99], slow[98], slow[97] = 50, 50, 50
	pooled := Pool(
		[]Sample{sample("CRD", 8, fast...), sample("aggregated", 8, fast...)},
		[]Sample{sample("CRD", 8, fast...), sample("aggregated", 8, slow...)},
	)
	if len(pooled) != 2 {
		t.Fatalf("pooled %d samples, want 2", len(pooled))
	}
	agg := pooled[1]
	if agg.Path != "aggregated" || agg.Ops != 200 || agg.Elapsed != 2*time.Second {
		t.Fatalf("pooled aggregated sample: %+v", agg.Result)
	}
	if agg.P99 != 50*time.Millisecond {
		t.Errorf("pooled p99 %s, want 50ms (3 slow of 200)", agg.P99)
	}
	var out bytes.Buffer
	PrintPassRatios(&out, "passes", "CRD", "aggregated", [][]Sample{
		{sample("CRD", 8, fast...), sample("aggregated", 8, fast...)},
		{sample("CRD", 8, fast...), sample("aggregated", 8, slow...)},
	})
	if row := strings.Fields(strings.Split(out.String(), "\n")[3]); strings.Join(row, " ") != "get 8 1.00 50.00" {
		t.Errorf("pass ratios row %q, want get 8 1.00 50.00:\n%s", row, out.String())
	}
}
