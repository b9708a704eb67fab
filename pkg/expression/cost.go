package expression

import (
	"github.com/google/cel-go/checker"
	"github.com/google/cel-go/common/types"
)

// Size bounds for the cost estimate of values read from `object`, an object
// of at most MaxObjectBytes of JSON that CEL only knows as dyn.
//
// Without a schema every such value could be a list, a map or a string, so
// one bound serves them all: the number of items of the smallest items that
// attribute paths iterate over, objects with a name or a type such as
// {"name":""} and a comma (minItemBytes), that fit in the object. Lists of
// tinier items, and dyn strings, are larger than estimated; the runtime cost
// limit still stops expressions that are too expensive on them. Values
// reached by iterating a container share the object with their siblings:
// n items of size s need n*s <= MaxObjectBytes, so an item's own size is
// bounded by minItemBytes, which keeps a single loop linear in the size of
// the object while nested loops over the object's lists stay superlinear and
// are rejected.
const (
	minItemBytes   = 12
	maxObjectItems = MaxObjectBytes / minItemBytes
	// maxStringSize bounds values CEL knows to be strings or bytes.
	maxStringSize = MaxObjectBytes - 2
)

// sizeEstimator implements the size bounds above.
type sizeEstimator struct{}

var _ checker.CostEstimator = sizeEstimator{}

// EstimateSize bounds the size of values whose size CEL cannot compute. All
// of them are read from the object: the expression has no other input.
func (sizeEstimator) EstimateSize(node checker.AstNode) *checker.SizeEstimate {
	switch node.Type().Kind() {
	case types.DynKind, types.ListKind, types.MapKind:
		if isIterated(node.Path()) {
			return &checker.SizeEstimate{Min: 0, Max: minItemBytes}
		}
		return &checker.SizeEstimate{Min: 0, Max: maxObjectItems}
	case types.StringKind, types.BytesKind:
		if isIterated(node.Path()) {
			return &checker.SizeEstimate{Min: 0, Max: minItemBytes}
		}
		return &checker.SizeEstimate{Min: 0, Max: maxStringSize}
	default:
		return nil
	}
}

// isIterated reports whether a path goes through the items, keys or values
// of a container that the expression iterates over.
func isIterated(path []string) bool {
	for _, p := range path {
		switch p {
		case "@items", "@keys", "@values":
			return true
		}
	}
	return false
}

// EstimateCallCost leaves the cost of calls to CEL and its libraries.
func (sizeEstimator) EstimateCallCost(function, overloadID string, target *checker.AstNode, args []checker.AstNode) *checker.CallEstimate {
	return nil
}
