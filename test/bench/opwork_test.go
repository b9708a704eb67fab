package bench

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// backgroundWindow is how long the idle fleet's CPU is measured before the
// comparison: longer than the longest periodic work (a minute).
const backgroundWindow = 90 * time.Second

// opWork adds up, per (path, operation, level), the CPU that the four
// server processes spent on the measured rounds, and their operations. On
// two shared cores a path's tail under load follows the work each of its
// operations costs: this is the table that says how much.
type opWork map[opWorkKey]*opWorkSum

type opWorkKey struct {
	path, op string
	clients  int
}

type opWorkSum struct {
	cpu        float64 // seconds, as measured
	background float64 // seconds of it the idle fleet's rate accounts for
	ops        int
	// unsettled counts rounds whose caused work was not seen done in time:
	// some of it fell outside them.
	unsettled int
}

func (w opWork) add(path, op string, clients int, cpu, background float64, ops int, unsettled bool) {
	k := opWorkKey{path, op, clients}
	if w[k] == nil {
		w[k] = &opWorkSum{}
	}
	w[k].cpu += cpu
	w[k].background += background
	w[k].ops += ops
	if unsettled {
		w[k].unsettled++
	}
}

// perOp is the CPU per operation in milliseconds, as measured and less the
// background; ok is false when nothing ran.
func (w opWork) perOp(path, op string, clients int) (raw, net float64, ok bool) {
	s := w[opWorkKey{path, op, clients}]
	if s == nil || s.ops == 0 {
		return 0, 0, false
	}
	return 1000 * s.cpu / float64(s.ops), 1000 * (s.cpu - s.background) / float64(s.ops), true
}

// unsettled is how many of the rounds ended before their work did.
func (w opWork) unsettled(path, op string, clients int) int {
	if s := w[opWorkKey{path, op, clients}]; s != nil {
		return s.unsettled
	}
	return 0
}

// print writes CPU per operation for every path and the aggregated path's
// ratio to the CRD's. A figure whose background share is over 30 % of
// what was measured is marked "*": the background's estimate moves it.
func (w opWork) print(out io.Writer, background float64, ops []string, levels []int) {
	less := "nothing subtracted: no idle fleet"
	if background > 0 {
		less = fmt.Sprintf("less the idle fleet's %.1f %% of a core (measured just before the comparison) for each round's duration", 100*background)
	}
	fmt.Fprintf(out, "\n== CPU per operation (context): kollect-apiserver, kube-apiserver and both etcds together, over the first pass's measured rounds, without the clean-up after them; a round ends with its last response, except \"create, exported\" on kollect's paths, which ends once every object's Warning Event is posted (kollect posts them at its host client's 20/s; † marks rounds that ended first); %s; * marks a figure, or a ratio of figures, the subtraction moved by over 30 %%; watch fan-out divides the writer's updates and their deliveries by the deliveries\n", less)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tclients\t"+pathCRD+" ms/op\t"+pathAggregated+" ms/op\t×"+pathCRD+"\t"+pathDirect+" ms/op\t")
	moved := func(raw, net float64) bool { return net <= 0 || raw-net > 0.3*raw }
	cell := func(path, op string, c int) string {
		raw, net, ok := w.perOp(path, op, c)
		var s string
		switch {
		case !ok:
			return "-"
		case net <= 0:
			s = fmt.Sprintf("≤0 (%.2f raw)*", raw)
		case moved(raw, net):
			s = fmt.Sprintf("%.2f*", net)
		default:
			s = fmt.Sprintf("%.2f", net)
		}
		if n := w.unsettled(path, op, c); n > 0 {
			s += fmt.Sprintf("†%d", n)
		}
		return s
	}
	for _, op := range ops {
		for _, c := range levels {
			cRaw, crd, cOK := w.perOp(pathCRD, op, c)
			aRaw, agg, aOK := w.perOp(pathAggregated, op, c)
			r := "-"
			if cOK && aOK && crd > 0 && agg > 0 {
				r = fmt.Sprintf("%.2f", agg/crd)
				if moved(cRaw, crd) || moved(aRaw, agg) {
					r += "*"
				}
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", op, c, cell(pathCRD, op, c), cell(pathAggregated, op, c), r, cell(pathDirect, op, c))
		}
	}
	tw.Flush()
}

// totalCPU is the CPU time the processes used so far, in seconds.
func totalCPU(procs []process) (float64, error) {
	var sum float64
	for _, p := range procs {
		c, err := cpuSeconds(p.pid)
		if err != nil {
			return 0, err
		}
		sum += c
	}
	return sum, nil
}

// cpuRate is the processes' CPU over window, in seconds per second.
func cpuRate(ctx context.Context, procs []process, window time.Duration) (float64, error) {
	c0, err := totalCPU(procs)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c1, err := totalCPU(procs)
	if err != nil {
		return 0, err
	}
	return (c1 - c0) / time.Since(start).Seconds(), nil
}
