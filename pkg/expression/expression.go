// Package expression compiles and evaluates the attribute paths of Profiles.
//
// A path is either a kubectl JSONPath template such as
// "{.spec.template.spec.containers[*].image}", or "cel:" followed by a CEL
// expression over the variable `object`, such as "cel:object.spec.replicas".
// Validation compiles paths at admission; the collector evaluates them
// against each collected object.
package expression

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

const (
	// CELPrefix marks a path as a CEL expression.
	CELPrefix = "cel:"

	// StaticCostBudget is the largest estimated cost a CEL expression may
	// have, the same as Kubernetes allows a CRD validation rule.
	StaticCostBudget uint64 = 10_000_000
	// RuntimeCostLimit is the largest cost one evaluation of a CEL
	// expression may incur before it is stopped.
	RuntimeCostLimit uint64 = 1_000_000

	// MaxValueBytes is the largest JSON encoding of one evaluated value.
	MaxValueBytes = 256 * 1024
	// MaxObjectBytes is the largest object the cost estimates assume: the
	// API server's request size limit.
	MaxObjectBytes = 3 * 1024 * 1024
)

// Expression is a compiled attribute path. It is safe for concurrent use.
type Expression struct {
	path     string
	jsonPath *jsonPathExpression
	cel      *celExpression
}

// Compile parses a path and, for CEL, type-checks it and verifies that its
// estimated cost stays within StaticCostBudget. Errors are short sentences
// fit for a validation message.
func Compile(path string) (*Expression, error) {
	if expr, ok := strings.CutPrefix(path, CELPrefix); ok {
		c, err := compileCEL(expr)
		if err != nil {
			return nil, err
		}
		return &Expression{path: path, cel: c}, nil
	}
	j, err := compileJSONPath(path)
	if err != nil {
		return nil, err
	}
	return &Expression{path: path, jsonPath: j}, nil
}

// String returns the path the expression was compiled from.
func (e *Expression) String() string { return e.path }

// Evaluate applies the expression to an object in its unstructured form.
// found is false when the path matches nothing: a missing field or map key,
// an index out of range, or a JSONPath wildcard or filter without match.
// A JSONPath with [*], a slice, a union, a filter, recursive descent or a
// range yields a []any even for a single match; other paths yield the value
// itself. The matches of a JSONPath wildcard (.*) or recursive descent (..)
// are sorted by their JSON encoding, since maps have no order, and a path
// that cannot be followed from one of them matches nothing; CEL
// walks the object's maps and map literals in key order (orderedAdapter),
// but not the maps transformMap builds. CEL results are converted to plain JSON values (string, bool,
// int64, uint64, float64, nil, []any, map[string]any). Results may share
// memory with obj. A value whose JSON encoding exceeds MaxValueBytes
// is an error.
//
// CEL evaluation stops at RuntimeCostLimit and when ctx is done (checked
// every 100 comprehension iterations); a call that would walk or make
// more than MaxCallWork is refused before it runs (guard.go). Callers should set a deadline: with
// cost tracking, cel-go v0.26 spends time quadratic in the iterations of a
// comprehension, so a loop over a list of 100,000 items can take seconds.
func (e *Expression) Evaluate(ctx context.Context, obj map[string]any) (value any, found bool, err error) {
	value, _, found, err = e.evaluate(ctx, obj)
	return value, found, err
}

// EvaluateJSON is Evaluate, with the value as its JSON encoding: the size
// check encodes it anyway.
func (e *Expression) EvaluateJSON(ctx context.Context, obj map[string]any) (raw []byte, found bool, err error) {
	_, raw, found, err = e.evaluate(ctx, obj)
	return raw, found, err
}

func (e *Expression) evaluate(ctx context.Context, obj map[string]any) (value any, raw []byte, found bool, err error) {
	// A fault on one object's data fails that object, not the server.
	defer func() {
		if r := recover(); r != nil {
			value, raw, found, err = nil, nil, false, fmt.Errorf("evaluation failed: %v", r)
		}
	}()
	if e.cel != nil {
		value, found, err = e.cel.evaluate(ctx, obj)
	} else {
		value, found, err = e.jsonPath.evaluate(obj)
	}
	if err != nil || !found {
		return nil, nil, false, err
	}
	if raw, err = checkSize(value); err != nil {
		return nil, nil, false, err
	}
	return value, raw, true, nil
}

// errValueTooLarge is returned when an evaluated value is too large to store.
var errValueTooLarge = fmt.Errorf("the value is larger than %d KiB of JSON", MaxValueBytes/1024)

// checkSize returns the JSON of a value small enough to store.
func checkSize(value any) ([]byte, error) {
	// A value far too large (a list of the object's largest map, eight
	// times) is refused before it is encoded: encoding it whole took
	// longer than evaluating it.
	n, deep := jsonSizeAtLeast(value, MaxValueBytes+1, 0)
	if n > MaxValueBytes {
		return nil, errValueTooLarge
	}
	if deep {
		return nil, errTooDeep
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("the value cannot be encoded as JSON: %w", err)
	}
	if len(raw) > MaxValueBytes {
		return nil, errValueTooLarge
	}
	return raw, nil
}

// jsonSizeAtLeast returns a lower bound of the size of v's JSON encoding,
// and stops counting once it reaches limit. deep reports a value nested
// deeper than maxDepth: the object's own maps and lists reach here without
// conversion, and an item must stay decodable. Past maxDepth it counts a
// value as one byte and goes on, so that a value both too large and too
// deep is always found too large, whatever order its maps are walked in.
func jsonSizeAtLeast(v any, limit, depth int) (n int, deep bool) {
	if depth > maxDepth {
		return 1, true
	}
	switch v := v.(type) {
	case nil, bool:
		return 4, false // null, true
	case string:
		return len(v) + 2, false
	case map[string]any:
		if len(v) == 0 {
			return 2, false
		}
		n = 1 // {, then "key": and the value, each followed by , or }
		for k, child := range v {
			if n >= limit {
				return n, deep
			}
			c, d := jsonSizeAtLeast(child, limit-n, depth+1)
			n, deep = n+len(k)+4+c, deep || d
		}
		return n, deep
	case []any:
		if len(v) == 0 {
			return 2, false
		}
		n = 1 // [, then each value followed by , or ]
		for _, child := range v {
			if n >= limit {
				return n, deep
			}
			c, d := jsonSizeAtLeast(child, limit-n, depth+1)
			n, deep = n+1+c, deep || d
		}
		return n, deep
	default:
		return 1, false // a number
	}
}
