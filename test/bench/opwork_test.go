package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

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
	cpu float64 // seconds
	ops int
}

func (w opWork) add(path, op string, clients int, cpu float64, ops int) {
	k := opWorkKey{path, op, clients}
	if w[k] == nil {
		w[k] = &opWorkSum{}
	}
	w[k].cpu += cpu
	w[k].ops += ops
}

// perOp is the CPU per operation in milliseconds, 0 when nothing ran.
func (w opWork) perOp(path, op string, clients int) float64 {
	s := w[opWorkKey{path, op, clients}]
	if s == nil || s.ops == 0 {
		return 0
	}
	return 1000 * s.cpu / float64(s.ops)
}

// print writes CPU per operation for the CRD and aggregated paths and
// their ratio.
func (w opWork) print(out io.Writer, background float64, ops []string, levels []int) {
	fmt.Fprintf(out, "\n== CPU per operation (context): kollect-apiserver, kube-apiserver and both etcds together, over the measured rounds of every pass, less the idle fleet's %.1f %% of a core for each round's duration; watch fan-out counts events delivered. Work a round leaves running lands in later rounds, of any path: kollect's Warning Events about \"create, exported\" objects go out at its host client's 20/s\n", 100*background)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tclients\t"+pathCRD+" ms/op\t"+pathAggregated+" ms/op\t×"+pathCRD+"\t"+pathDirect+" ms/op\t")
	for _, op := range ops {
		for _, c := range levels {
			crd, agg, dir := w.perOp(pathCRD, op, c), w.perOp(pathAggregated, op, c), w.perOp(pathDirect, op, c)
			r := "-"
			if crd > 0 {
				r = fmt.Sprintf("%.2f", agg/crd)
			}
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%s\t%.2f\t\n", op, c, crd, agg, r, dir)
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
