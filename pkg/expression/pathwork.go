package expression

import (
	"errors"
	"fmt"

	"k8s.io/client-go/util/jsonpath"
)

// The work of a JSONPath.
//
// client-go's evaluator cannot be interrupted and bounds nothing: a
// wildcard or a recursive descent yields every byte of a string as a
// value of its own; a union evaluates each branch on every value, so
// unions in a row multiply; each recursive descent walks everything the
// one before matched; every block starts again from the object; and the
// matches of an unordered path are sorted by their JSON encoding. A path
// of a few hundred characters made gigabytes, or never ended. So before
// the evaluator runs, pathWork follows the path over the object as it
// would, counting the values it would make and the bytes it would encode,
// and the object fails once they pass maxPathWork.

// maxPathWork bounds the work of one JSONPath evaluation: pathValueWork
// per value made (a reflect.Value and its share of the slices that hold
// it), pathByteWork per byte of a string made a value, pathStepWork per
// value a step is given (a lookup allocates even when it finds nothing),
// plus the bytes of the matches' JSON encoding when they are sorted. An
// evaluation at the bound allocates some tens of MiB.
const (
	maxPathWork   = 16 << 20
	pathValueWork = 64
	pathByteWork  = 16
	pathStepWork  = 8
	// pathSideWork is a value made on a side of a filter, dropped once
	// the item is decided.
	pathSideWork = 32
	// pathCompareBytes are the bytes of a string a filter compares for
	// one unit: at the bound, comparisons take some tens of milliseconds.
	pathCompareBytes = 128
)

var errPathWork = fmt.Errorf("the JSONPath would make more than %d values or encode more than %d MiB for this object (a wildcard or a recursive descent counts every byte of a string; unions and several descents multiply): name the fields to read instead",
	maxPathWork/pathValueWork, maxPathWork>>20)

// errOverWork stops a count past the bound.
var errOverWork = errors.New("over the work bound")

// pathWork counts what evaluating a JSONPath makes, up to limit, at
// valueWork per value made (pathValueWork; 0 counts that).
type pathWork struct{ n, limit, valueWork int64 }

func (w *pathWork) take(n int64) error {
	if w.n += n; w.n > w.limit {
		return errOverWork
	}
	return nil
}

// made counts one value made.
func (w *pathWork) made() error {
	if w.valueWork > 0 {
		return w.take(w.valueWork)
	}
	return w.take(pathValueWork)
}

// template counts the blocks of a template, as client-go's FindResults
// runs them over data, and returns every block's matches.
func (w *pathWork) template(data any, nodes []jsonpath.Node) ([]any, error) {
	var all []any
	cur := []any{data}
	for i := 0; i < len(nodes); i++ {
		block, ok := nodes[i].(*jsonpath.ListNode)
		if !ok {
			return nil, fmt.Errorf("unexpected block %v", nodes[i])
		}
		if isIdentifier(block, "end") {
			continue // the end of a range run below
		}
		if isIdentifier(block, "range") {
			results, err := w.list(cur, &jsonpath.ListNode{Nodes: block.Nodes[1:]})
			if err != nil {
				return nil, err
			}
			end := matchingEnd(nodes, i)
			body := nodes[i+1 : end]
			if len(results) == 0 {
				// client-go walks the body once, over nothing.
				results = []any{nil}
			}
			for _, r := range results {
				// client-go runs the body's blocks again for each value.
				if err := w.made(); err != nil {
					return nil, err
				}
				matches, err := w.template(r, body)
				if err != nil {
					return nil, err
				}
				all = append(all, matches...)
			}
			i = end
			continue
		}
		if err := w.made(); err != nil { // the block's own results
			return nil, err
		}
		results, err := w.list(cur, block)
		if err == nil {
			// kept with every other block's until the end
			err = w.take(int64(len(results)) * pathValueWork)
		}
		if err != nil {
			return nil, err
		}
		all = append(all, results...)
	}
	return all, nil
}

// isIdentifier reports whether a block is the identifier name (range,
// end) and what follows it.
func isIdentifier(block *jsonpath.ListNode, name string) bool {
	if len(block.Nodes) == 0 {
		return false
	}
	id, ok := block.Nodes[0].(*jsonpath.IdentifierNode)
	return ok && id.Name == name
}

// matchingEnd is the index of the {end} of the {range} at i, or
// len(nodes): checkRanges admits only closed ranges.
func matchingEnd(nodes []jsonpath.Node, i int) int {
	depth := 0
	for k := i; k < len(nodes); k++ {
		block, _ := nodes[k].(*jsonpath.ListNode)
		switch {
		case block == nil:
		case isIdentifier(block, "range"):
			depth++
		case isIdentifier(block, "end"):
			if depth--; depth == 0 {
				return k
			}
		}
	}
	return len(nodes)
}

func (w *pathWork) list(in []any, list *jsonpath.ListNode) ([]any, error) {
	var err error
	for _, node := range list.Nodes {
		// On, even over nothing: a string literal makes a value of nothing.
		if in, err = w.node(in, node); err != nil {
			return in, err
		}
	}
	return in, nil
}

// node counts one step as client-go evaluates it. Where client-go would
// stop, with an error or with what it has, it goes on to the next value:
// which value comes first may depend on a map's order, and the count must
// not (a count that stopped at the first value it could not follow passed
// a path one time in four that cost 9 GiB the other times). A filter
// passes every item: deciding it as client-go does means following its
// errors and early returns exactly, and a count that failed an item
// client-go passed counted nothing of what followed (1.5 to 8.7 GiB). It
// never counts less than client-go makes.
func (w *pathWork) node(in []any, node jsonpath.Node) ([]any, error) {
	if err := w.take(int64(len(in)) * pathStepWork); err != nil {
		return nil, err
	}
	var out []any
	keep := func(v any) error {
		out = append(out, v)
		return w.made()
	}
	switch n := node.(type) {
	case *jsonpath.ListNode:
		return w.list(in, n)
	case *jsonpath.FieldNode:
		for _, v := range in {
			if m, ok := v.(map[string]any); ok {
				if child, found := m[n.Value]; found {
					if err := keep(child); err != nil {
						return nil, err
					}
				}
			}
		}
	case *jsonpath.ArrayNode:
		for _, v := range in {
			l, ok := v.([]any)
			if !ok {
				continue // client-go skips nil, and stops at anything else
			}
			start, end, step, ok := sliceOf(n.Params, len(l))
			if !ok || start == end {
				continue // client-go stops here
			}
			// By offset, as client-go walks the slice it cut: a step near
			// MaxInt would wrap an index past the end.
			for k := 0; k < end-start; k += step {
				if err := keep(l[start+k]); err != nil {
					return nil, err
				}
			}
		}
	case *jsonpath.FilterNode:
		for _, v := range in {
			l, ok := v.([]any)
			if !ok {
				continue // client-go stops here
			}
			for _, item := range l {
				err := w.sides(item, n)
				if err == nil {
					err = keep(item)
				}
				if err != nil {
					return nil, err
				}
			}
		}
	case *jsonpath.IntNode, *jsonpath.FloatNode, *jsonpath.BoolNode:
		for range in {
			if err := keep(nil); err != nil {
				return nil, err
			}
		}
	case *jsonpath.TextNode:
		// client-go makes one value of a string literal, whatever it is
		// given, and the steps after it walk that string: '…'.* makes a
		// value of each of its bytes.
		if err := keep(n.Text); err != nil {
			return nil, err
		}
	case *jsonpath.WildcardNode:
		for _, v := range in {
			if err := w.children(v, func(c any) error { out = append(out, c); return nil }); err != nil {
				return nil, err
			}
		}
	case *jsonpath.RecursiveNode:
		// Every value with children, and below it every child, each
		// made again as a value of the next level; and each level copies
		// what was found below it into its own results.
		var descend func(v any) (int64, error)
		descend = func(v any) (found int64, err error) {
			if s, ok := v.(string); ok {
				// Its bytes are made values (about 120 bytes of
				// allocation each: {..a} over a 2 MiB string took 247
				// MiB), counted without making them here.
				if s == "" {
					return 0, nil
				}
				return 1, errors.Join(w.take(int64(len(s))*pathByteWork), keep(v))
			}
			var children []any
			if err := w.children(v, func(c any) error { children = append(children, c); return nil }); err != nil {
				return 0, err
			}
			if len(children) == 0 {
				return 0, nil
			}
			if err := keep(v); err != nil {
				return 0, err
			}
			for _, c := range children {
				below, err := descend(c)
				if err != nil {
					return 0, err
				}
				found += below
			}
			return 1 + found, w.take(found * pathValueWork / 2)
		}
		for _, v := range in {
			if _, err := descend(v); err != nil {
				return nil, err
			}
		}
	case *jsonpath.UnionNode:
		for _, branch := range n.Nodes {
			results, err := w.list(in, branch)
			if err != nil {
				return nil, err
			}
			for _, r := range results {
				if err := keep(r); err != nil {
					return nil, err
				}
			}
		}
	case *jsonpath.IdentifierNode:
		return in, nil // range and end: template runs them
	}
	return out, nil
}

// sides counts what evaluating a filter's two sides on one item makes.
func (w *pathWork) sides(item any, n *jsonpath.FilterNode) error {
	saved := w.valueWork
	w.valueWork = pathSideWork
	defer func() { w.valueWork = saved }()
	for _, side := range []*jsonpath.ListNode{n.Left, n.Right} {
		values, err := w.list([]any{item}, side)
		if err != nil {
			return err
		}
		// Comparing reads the strings, twice for <= and >=: 46,000
		// comparisons of 1.5 MB strings took 3 s of CPU for a count that
		// charged none of it.
		for _, v := range values {
			if s, ok := v.(string); ok {
				if err := w.take(2 * int64(len(s)) / pathCompareBytes); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// children gives, and counts, what a wildcard makes of v: a map's values,
// a list's items, a string's bytes (each byte a value, of no children).
func (w *pathWork) children(v any, each func(any) error) error {
	switch v := v.(type) {
	case map[string]any:
		for _, c := range v {
			if err := w.made(); err != nil {
				return err
			}
			if err := each(c); err != nil {
				return err
			}
		}
	case []any:
		for _, c := range v {
			if err := w.made(); err != nil {
				return err
			}
			if err := each(c); err != nil {
				return err
			}
		}
	case string:
		if err := w.take(int64(len(v)) * pathByteWork); err != nil {
			return err
		}
		for range len(v) {
			if err := each(byte(0)); err != nil {
				return err
			}
		}
	}
	return nil
}

// sliceOf is the part of a list of n items an array node selects, as
// client-go's evalArray computes it; ok is false where it fails.
func sliceOf(params [3]jsonpath.ParamsEntry, n int) (start, end, step int, ok bool) {
	if !params[0].Known {
		params[0].Value = 0
	}
	if params[0].Value < 0 {
		params[0].Value += n
	}
	if !params[1].Known {
		params[1].Value = n
	}
	if params[1].Value < 0 || (params[1].Value == 0 && params[1].Derived) {
		params[1].Value += n
	}
	start, end = params[0].Value, params[1].Value
	if start == end {
		return start, end, 1, true
	}
	if start >= n || start < 0 || end > n || end < 0 || start > end {
		return 0, 0, 0, false
	}
	step = 1
	if params[2].Known {
		if params[2].Value <= 0 {
			return 0, 0, 0, false
		}
		step = params[2].Value
	}
	return start, end, step, true
}

// encoded counts the JSON encoding of the matches, which an unordered
// path sorts by.
func (w *pathWork) encoded(matches []any) error {
	for _, m := range matches {
		if err := w.take(int64(jsonBytesOf(m, w.limit-w.n+1))); err != nil {
			return err
		}
	}
	return nil
}

// jsonBytesOf is what encoding v as JSON costs, counted no further than
// limit: its bytes, a character JSON escapes as 6, a number as 24, and
// 64 more per map or list (encoding/json sorts a map's keys, and past
// 1,000 levels tracks every value it enters).
func jsonBytesOf(v any, limit int64) int64 {
	switch v := v.(type) {
	case string:
		return encodedLen(v) + 2
	case map[string]any:
		n := int64(64)
		for k, c := range v {
			if n > limit {
				break
			}
			n += encodedLen(k) + 4 + jsonBytesOf(c, limit-n)
		}
		return n
	case []any:
		n := int64(64)
		for _, c := range v {
			if n > limit {
				break
			}
			n += 1 + jsonBytesOf(c, limit-n)
		}
		return n
	default:
		return 24
	}
}

// encodedLen is a string's length in JSON, counting every character that
// may be escaped (controls, quotes, <, >, &, and any non-ASCII byte) as 6.
func encodedLen(s string) int64 {
	n := int64(len(s))
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= 0x80 {
			n += 5
		}
	}
	return n
}

// checkPathWork refuses an evaluation of the template over obj whose work
// passes maxPathWork.
func checkPathWork(root *jsonpath.ListNode, obj map[string]any, unordered bool) (err error) {
	// A fault in the count must fail the object, not end the server.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("JSONPath evaluation failed: %v", r)
		}
	}()
	w := &pathWork{limit: maxPathWork}
	var matches []any
	matches, err = w.template(obj, root.Nodes)
	if err == nil && unordered {
		err = w.encoded(matches)
	}
	if errors.Is(err, errOverWork) {
		return errPathWork
	}
	return nil // anything else is the evaluator's to report
}
