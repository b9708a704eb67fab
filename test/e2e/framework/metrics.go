package framework

import (
	"fmt"
	"strings"
)

// SampleSum sums the samples, in a Prometheus text exposition, of the
// metric name whose labels contain every fragment (`operation="get"`).
func SampleSum(metrics, name string, fragments ...string) float64 {
	var sum float64
	for line := range strings.SplitSeq(metrics, "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, f := range fragments {
			ok = ok && strings.Contains(line, f)
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v); ok && err == nil {
			sum += v
		}
	}
	return sum
}
