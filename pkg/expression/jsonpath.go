package expression

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"k8s.io/client-go/util/jsonpath"
)

// jsonPathExpression is a parsed kubectl JSONPath template. The client-go
// evaluator keeps state while it runs a range, so each evaluation parses the
// template again; the parse at compile time only validates it.
type jsonPathExpression struct {
	template string
	// multi is true when the template can match several values, so that
	// results are always a list.
	multi bool
	// root is the parsed template, which checkPathWork follows.
	root *jsonpath.ListNode
	// unordered is true when the template has a wildcard (.*) or recursive
	// descent (..), which visit maps in no particular order: results are
	// then sorted, so that an unchanged object yields an unchanged value.
	unordered bool
}

// errOutOfRange is an index out of range, which run reports as not found.
var errOutOfRange = errors.New("index out of range")

// outOfBounds is client-go's whole message for an index out of range:
// other messages quote the object's values, which could hold these words.
var outOfBounds = regexp.MustCompile(`^array index out of bounds: index -?\d+, length \d+$`)

var errNoBraces = errors.New(`a JSONPath must be enclosed in braces, such as "{.spec.replicas}" (CEL expressions start with "cel:")`)

func compileJSONPath(path string) (*jsonPathExpression, error) {
	if !strings.HasPrefix(path, "{") || !strings.HasSuffix(path, "}") {
		return nil, errNoBraces
	}
	parser, err := jsonpath.Parse("path", path)
	if err != nil {
		return nil, fmt.Errorf("invalid JSONPath: %v", err)
	}
	if err := checkNoText(parser.Root); err != nil {
		return nil, err
	}
	if err := checkStatic(parser.Root); err != nil {
		return nil, err
	}
	if err := checkRanges(parser.Root); err != nil {
		return nil, err
	}
	j := &jsonPathExpression{
		template:  path,
		multi:     len(parser.Root.Nodes) > 1 || anyNode(parser.Root, selectsMany),
		unordered: anyNode(parser.Root, visitsMaps),
		root:      parser.Root,
	}
	// A dry run catches what the parser accepts but no evaluation can
	// succeed with, such as an {end} without {range}. It is an evaluation
	// like any other, counted first.
	if err := checkPathWork(j.root, map[string]any{}, j.unordered); err != nil {
		return nil, err
	}
	if _, _, err := j.run(map[string]any{}, false); err != nil {
		return nil, err
	}
	return j, nil
}

// checkRanges admits {range} and {end} only as blocks of their own (the
// identifier first), each {range} closed by its {end}, nested at most
// maxRangeDepth deep. client-go runs the rest of the template again for
// each {range} that is not closed, so each doubled the work: thirty of
// them took a minute and 24 GB, at admission.
func checkRanges(root *jsonpath.ListNode) error {
	depth := 0
	for _, node := range root.Nodes {
		block, ok := node.(*jsonpath.ListNode)
		if !ok {
			continue
		}
		for i, n := range block.Nodes {
			if err := identifiersAt(n, i == 0); err != nil {
				return err
			}
		}
		switch {
		case isIdentifier(block, "range"):
			if depth++; depth > maxRangeDepth {
				return fmt.Errorf("invalid JSONPath: {range} nested more than %d deep", maxRangeDepth)
			}
		case isIdentifier(block, "end"):
			if len(block.Nodes) > 1 {
				return errors.New("invalid JSONPath: {end} takes nothing after it")
			}
			if depth--; depth < 0 {
				return errors.New("invalid JSONPath: {end} without its {range}")
			}
		}
	}
	if depth > 0 {
		return errors.New("invalid JSONPath: {range} without its {end}")
	}
	return nil
}

// maxRangeDepth bounds the nesting of {range}.
const maxRangeDepth = 4

// identifiersAt refuses range and end anywhere but first in a block.
func identifiersAt(n jsonpath.Node, first bool) error {
	if _, ok := n.(*jsonpath.IdentifierNode); ok && !first {
		return errors.New("invalid JSONPath: {range} and {end} must each begin a block of their own")
	}
	for _, child := range childNodes(n) {
		if list, ok := child.(*jsonpath.ListNode); ok {
			for _, c := range list.Nodes {
				if err := identifiersAt(c, false); err != nil {
					return err
				}
			}
		} else if err := identifiersAt(child, false); err != nil {
			return err
		}
	}
	return nil
}

// checkNoText rejects literal text outside braces and string literals
// outside filters: kubectl prints them, an attribute has no use for them.
func checkNoText(root *jsonpath.ListNode) error {
	for _, block := range root.Nodes {
		if _, ok := block.(*jsonpath.ListNode); !ok {
			return errors.New("invalid JSONPath: text outside {} is not supported")
		}
	}
	// Filters are where literals belong; anywhere else (a union's branch
	// too) one is a value made of nothing, which steps after it can
	// multiply.
	if textOutsideFilters(root) {
		return errors.New("invalid JSONPath: string literals are only supported in filters")
	}
	return nil
}

func textOutsideFilters(node jsonpath.Node) bool {
	switch node.(type) {
	case *jsonpath.TextNode:
		return true
	case *jsonpath.FilterNode:
		return false
	}
	return slices.ContainsFunc(childNodes(node), textOutsideFilters)
}

// anyNode reports whether pred holds for a node of the tree.
func anyNode(node jsonpath.Node, pred func(jsonpath.Node) bool) bool {
	if pred(node) {
		return true
	}
	return slices.ContainsFunc(childNodes(node), func(child jsonpath.Node) bool { return anyNode(child, pred) })
}

func childNodes(node jsonpath.Node) []jsonpath.Node {
	var children []jsonpath.Node
	switch n := node.(type) {
	case *jsonpath.ListNode:
		children = n.Nodes
	case *jsonpath.UnionNode:
		for _, list := range n.Nodes {
			children = append(children, list)
		}
	case *jsonpath.FilterNode:
		children = []jsonpath.Node{n.Left, n.Right}
	}
	return children
}

// checkStatic rejects what fails on any data but only once data reaches it,
// which the dry run on {} cannot show: an unquoted literal in a filter, a
// step of 0, a start after the end. Under a wildcard such a failure would
// read as matching nothing (run), on every object.
func checkStatic(node jsonpath.Node) error {
	switch n := node.(type) {
	case *jsonpath.IdentifierNode:
		if n.Name != "range" && n.Name != "end" {
			return fmt.Errorf("invalid JSONPath: unrecognized identifier %s (quote a string literal: \"%s\")", n.Name, n.Name)
		}
	case *jsonpath.ArrayNode:
		start, end, step := n.Params[0], n.Params[1], n.Params[2]
		if step.Known && step.Value <= 0 {
			return fmt.Errorf("invalid JSONPath: the step of a slice must be greater than 0")
		}
		// Ends of one sign keep their order whatever the list's length.
		if start.Known && end.Known && !end.Derived && (start.Value >= 0) == (end.Value >= 0) && start.Value > end.Value {
			return fmt.Errorf("invalid JSONPath: the slice starts at %d, after its end %d", start.Value, end.Value)
		}
	}
	for _, child := range childNodes(node) {
		if err := checkStatic(child); err != nil {
			return err
		}
	}
	return nil
}

// selectsMany reports whether a node can select more than one value.
func selectsMany(node jsonpath.Node) bool {
	switch n := node.(type) {
	case *jsonpath.ArrayNode:
		return !isSingleIndex(n)
	case *jsonpath.IdentifierNode:
		return n.Name == "range"
	case *jsonpath.FilterNode, *jsonpath.WildcardNode, *jsonpath.RecursiveNode, *jsonpath.UnionNode:
		return true
	default:
		return false
	}
}

// visitsMaps reports whether a node visits the entries of maps, which it
// does in no particular order.
func visitsMaps(node jsonpath.Node) bool {
	return node.Type() == jsonpath.NodeWildcard || node.Type() == jsonpath.NodeRecursive
}

// sortByJSON orders values by their JSON encoding.
func sortByJSON(values []any) {
	type keyed struct {
		key   string
		value any
	}
	items := make([]keyed, len(values))
	for i, v := range values {
		raw, _ := json.Marshal(v)
		items[i] = keyed{string(raw), v}
	}
	sort.SliceStable(items, func(a, b int) bool { return items[a].key < items[b].key })
	for i, item := range items {
		values[i] = item.value
	}
}

// isSingleIndex reports whether an array node is [i] rather than a slice:
// the parser derives the end of [i] as i+1.
func isSingleIndex(n *jsonpath.ArrayNode) bool {
	return n.Params[0].Known && n.Params[1].Derived && !n.Params[2].Known
}

func (j *jsonPathExpression) evaluate(obj map[string]any) (value any, found bool, err error) {
	if err := checkPathWork(j.root, obj, j.unordered); err != nil {
		return nil, false, err
	}
	return j.run(obj, j.unordered)
}

// run evaluates the template. An index out of range is not found. With
// unordered, so is any other failure: the evaluator stops at the first
// value the rest of the path cannot follow, an index out of range or a
// value of another type, and which one comes first depends on the map's
// order, so only one outcome for all of them is stable. A wildcard that
// reaches values of several shapes matches nothing rather than failing
// the object, as a missing key does.
func (j *jsonPathExpression) run(obj map[string]any, unordered bool) (value any, found bool, err error) {
	// The evaluator walks arbitrary data by reflection; a panic in it must
	// fail this evaluation, not the server.
	defer func() {
		if r := recover(); r != nil {
			value, found, err = nil, false, fmt.Errorf("JSONPath evaluation failed: %v", r)
		}
		if errors.Is(err, errOutOfRange) || (err != nil && unordered) {
			value, found, err = nil, false, nil
		}
	}()
	jp := jsonpath.New("path").AllowMissingKeys(true)
	if err := jp.Parse(j.template); err != nil {
		return nil, false, fmt.Errorf("invalid JSONPath: %v", err)
	}
	results, err := jp.FindResults(obj)
	if err != nil {
		if outOfBounds.MatchString(err.Error()) {
			return nil, false, errOutOfRange
		}
		return nil, false, fmt.Errorf("JSONPath evaluation failed: %v", err)
	}
	var values []any
	for _, block := range results {
		for _, r := range block {
			if r.IsValid() && r.CanInterface() {
				values = append(values, r.Interface())
			}
		}
	}
	if j.unordered {
		sortByJSON(values)
	}
	switch {
	case len(values) == 0:
		return nil, false, nil
	case len(values) == 1 && !j.multi:
		return values[0], true, nil
	default:
		return values, true, nil
	}
}
