package load

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// Sample is a Result measured on one path: one way of reaching a server
// ("CRD", "aggregated", "direct"...).
type Sample struct {
	Path string
	Result
}

// FromLatencies builds a Result from latencies measured elsewhere (for
// example per watch event rather than per call): ops is len(lat), elapsed
// the wall time they were spread over.
func FromLatencies(name string, concurrency int, lat []time.Duration, elapsed time.Duration) Result {
	r := Result{Name: name, Concurrency: concurrency, Ops: len(lat), Elapsed: elapsed}
	r.setLatencies(slices.Clone(lat))
	return r
}

// PrintComparison writes one operation's samples as a table under a title:
// a row per concurrency and path, in the order given, with the ratios of p99
// and throughput to the baseline path's sample at the same concurrency
// (p99 ×base above 1 is slower than the baseline, ops/s ×base below 1 is
// slower). conditions may be empty.
func PrintComparison(w io.Writer, title, conditions, baseline string, samples []Sample) {
	fmt.Fprintf(w, "\n== %s\n", title)
	if conditions != "" {
		fmt.Fprintf(w, "   conditions: %s\n", conditions)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "clients\tpath\tops\terrors\tops/s\tp50\tp99\tp99 ×%s\tops/s ×%s\t\n", baseline, baseline)
	for _, s := range samples {
		p99, tput := "-", "-"
		if base, ok := find(samples, baseline, s.Name, s.Concurrency); ok && s.Path != baseline {
			p99, tput = ratio(float64(s.P99), float64(base.P99)), ratio(s.Throughput(), base.Throughput())
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%.0f\t%s\t%s\t%s\t%s\t\n",
			s.Concurrency, s.Path, s.Ops, s.Errors, s.Throughput(), ms(s.P50), ms(s.P99), p99, tput)
	}
	tw.Flush()
}

// PrintRatios writes a summary: a row per operation and concurrency (in the
// order they first appear in samples), and for each of paths the ratio of
// its p99 and throughput to the baseline's.
func PrintRatios(w io.Writer, title, baseline string, paths []string, samples []Sample) {
	fmt.Fprintf(w, "\n== %s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\tclients\t")
	for _, p := range paths {
		fmt.Fprintf(tw, "%s p99 ×%s\t%s ops/s ×%s\t", p, baseline, p, baseline)
	}
	fmt.Fprintln(tw)
	type key struct {
		name string
		c    int
	}
	seen := map[key]bool{}
	for _, s := range samples {
		k := key{s.Name, s.Concurrency}
		if seen[k] {
			continue
		}
		seen[k] = true
		base, ok := find(samples, baseline, s.Name, s.Concurrency)
		fmt.Fprintf(tw, "%s\t%d\t", s.Name, s.Concurrency)
		for _, p := range paths {
			o, ook := find(samples, p, s.Name, s.Concurrency)
			if !ok || !ook {
				fmt.Fprint(tw, "-\t-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t", ratio(float64(o.P99), float64(base.P99)), ratio(o.Throughput(), base.Throughput()))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

func find(samples []Sample, path, name string, concurrency int) (Sample, bool) {
	for _, s := range samples {
		if s.Path == path && s.Name == name && s.Concurrency == concurrency {
			return s, true
		}
	}
	return Sample{}, false
}

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// Pool merges the samples of several passes of the same comparison: one
// sample per path, operation and concurrency (in the first pass's order),
// its latencies those of every pass together.
func Pool(passes ...[]Sample) []Sample {
	if len(passes) == 0 {
		return nil
	}
	var out []Sample
	for _, s := range passes[0] {
		parts := []Result{s.Result}
		for _, other := range passes[1:] {
			if o, ok := find(other, s.Path, s.Name, s.Concurrency); ok {
				parts = append(parts, o.Result)
			}
		}
		out = append(out, Sample{Path: s.Path, Result: Merge(parts...)})
	}
	return out
}

// PrintPassRatios writes, for each operation and concurrency, path's p99
// ratio to the baseline's in every pass on its own: how far one pass's
// tail strays from the pooled figure.
func PrintPassRatios(w io.Writer, title, baseline, path string, passes [][]Sample) {
	if len(passes) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== %s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "operation\tclients\t")
	for i := range passes {
		fmt.Fprintf(tw, "pass %d\t", i+1)
	}
	fmt.Fprintln(tw)
	for _, s := range passes[0] {
		if s.Path != path {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t", s.Name, s.Concurrency)
		for _, samples := range passes {
			o, ook := find(samples, path, s.Name, s.Concurrency)
			base, ok := find(samples, baseline, s.Name, s.Concurrency)
			if !ok || !ook {
				fmt.Fprint(tw, "-\t")
				continue
			}
			fmt.Fprintf(tw, "%s\t", ratio(float64(o.P99), float64(base.P99)))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
