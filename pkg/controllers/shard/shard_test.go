package shard

import (
	"fmt"
	"testing"
)

// TestOwnerMovesOnlyWhatItMust: a replica that joins takes keys only for
// itself, every other key stays where it was; when it leaves, every key
// goes back; and the keys are spread over the replicas.
func TestOwnerMovesOnlyWhatItMust(t *testing.T) {
	keys := make([]string, 3000)
	for i := range keys {
		keys[i] = fmt.Sprintf("member-%d", i)
	}
	two, three := []string{"kollect-0", "kollect-1"}, []string{"kollect-0", "kollect-1", "kollect-2"}
	moved, per := 0, map[string]int{}
	for _, k := range keys {
		before, after := Owner(two, k), Owner(three, k)
		per[after]++
		if before != after {
			moved++
			if after != "kollect-2" {
				t.Fatalf("%s moved from %s to %s, not to the replica that joined", k, before, after)
			}
		}
		if back := Owner(two, k); back != before {
			t.Fatalf("%s: owner %s after kollect-2 left, %s before it joined", k, back, before)
		}
	}
	t.Logf("a third replica took %d of %d keys; spread %v", moved, len(keys), per)
	for id, n := range per {
		// 1000 expected each; 800 is more than six standard deviations off.
		if n < 800 {
			t.Errorf("%s owns %d of %d keys: not spread", id, n, len(keys))
		}
	}
	if Owner(nil, "x") != "" {
		t.Error("no replicas must mean no owner")
	}
}

func TestLeaseName(t *testing.T) {
	a, b := LeaseName("host_0a1b2c3d"), LeaseName("host_0a1b2c3e")
	if a == b || len(a) != len(LeasePrefix)+16 {
		t.Errorf("lease names %q and %q", a, b)
	}
}
