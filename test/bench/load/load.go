// Package load runs a fixed number of operations at a given concurrency and
// reports throughput and latency percentiles, and prints them as tables.
// Benchmarks compare figures measured side by side in one run; nothing here
// asserts a number.
package load

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// Result is what one run measured.
type Result struct {
	Name        string
	Concurrency int
	Ops         int
	Errors      int64
	Elapsed     time.Duration
	P50, P99    time.Duration
	// latencies, sorted, so that Merge can pool the samples of several
	// rounds into one distribution.
	latencies []time.Duration
}

// Throughput is operations per second.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Run performs ops calls of op, by concurrency workers; op receives the
// operation index. The first error is returned along with the figures.
func Run(ctx context.Context, name string, concurrency, ops int, op func(ctx context.Context, i int) error) (Result, error) {
	lat := make([]time.Duration, ops)
	var next, errs atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= ops || ctx.Err() != nil {
					return
				}
				t := time.Now()
				if err := op(ctx, i); err != nil {
					errs.Add(1)
					once.Do(func() { firstErr = fmt.Errorf("%s op %d: %w", name, i, err) })
				}
				lat[i] = time.Since(t)
			}
		}()
	}
	wg.Wait()
	r := Result{Name: name, Concurrency: concurrency, Ops: ops, Errors: errs.Load(), Elapsed: time.Since(start)}
	r.setLatencies(lat)
	return r, firstErr
}

func (r *Result) setLatencies(lat []time.Duration) {
	slices.Sort(lat)
	r.latencies = lat
	r.P50, r.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
}

// Merge pools the rounds of one operation measured in parts: their
// operations, errors and wall times add up, and the percentiles are those
// of all their latencies together. A p99 of one short round is a handful
// of samples; pooled rounds interleaved with the other paths' give every
// path the same share of the machine's slow moments.
func Merge(rounds ...Result) Result {
	if len(rounds) == 0 {
		return Result{}
	}
	out := Result{Name: rounds[0].Name, Concurrency: rounds[0].Concurrency}
	var lat []time.Duration
	for _, r := range rounds {
		out.Ops += r.Ops
		out.Errors += r.Errors
		out.Elapsed += r.Elapsed
		lat = append(lat, r.latencies...)
	}
	out.setLatencies(lat)
	return out
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// Conditions describes the machine a table was measured on.
func Conditions(extra ...string) string {
	host, _ := os.Hostname()
	parts := []string{
		fmt.Sprintf("host=%s", host),
		fmt.Sprintf("cpus=%d", runtime.NumCPU()),
		fmt.Sprintf("GOMAXPROCS=%d", runtime.GOMAXPROCS(0)),
		runtime.Version(),
		time.Now().UTC().Format(time.RFC3339),
	}
	return strings.Join(append(parts, extra...), " ")
}

// PrintTable writes results as an aligned table under a title.
func PrintTable(w io.Writer, title, conditions string, results []Result) {
	fmt.Fprintf(w, "\n== %s\n   conditions: %s\n", title, conditions)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tclients\tops\terrors\tops/s\tp50\tp99\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t\n", r.Name, r.Concurrency, r.Ops, r.Errors, r.Throughput(), ms(r.P50), ms(r.P99))
	}
	tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }
