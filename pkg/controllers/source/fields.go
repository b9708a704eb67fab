package source

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/client-go/util/jsonpath"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/expression"
)

// The informers of collected kinds keep only the parts of objects that
// extraction reads, when that is known: in Attributes mode, the fields the
// attribute paths select, each with everything under it. A path that is not
// understood here keeps the whole object, so the content extracted from a
// trimmed object is always the content of the whole one.
//
// A set of fields is encoded in a string, so that informer shapes compare
// with ==: "" is the whole object, otherwise the JSON of the sorted paths,
// none the prefix of another.

// fieldPath is a path of map keys from the object's root.
type fieldPath []string

// alwaysKept are read whatever the paths: extraction checks them to redact
// Secrets collected by mistake.
var alwaysKept = []fieldPath{{"apiVersion"}, {"kind"}}

// ProfileFields is what extraction with a Profile reads of objects, as a
// Shape's Fields.
func ProfileFields(p *v1alpha1.Profile) string {
	if p.Spec.Export.Mode != v1alpha1.ExportModeAttributes && p.Spec.Export.Mode != "" {
		return "" // Resource mode keeps the object
	}
	if len(p.Spec.Attributes) == 0 {
		return ""
	}
	paths := slices.Clone(alwaysKept)
	for _, a := range p.Spec.Attributes {
		var read []fieldPath
		var ok bool
		if expr, isCEL := strings.CutPrefix(a.Path, expression.CELPrefix); isCEL {
			read, ok = celFields(expr)
		} else {
			read, ok = jsonPathFields(a.Path)
		}
		if !ok {
			return ""
		}
		paths = append(paths, read...)
	}
	return encodeFields(paths)
}

// jsonPathFields are the fields a JSONPath template selects: in each {}
// block, the leading .field steps; what follows (indexes, wildcards,
// filters, recursive descent) reads within that field. {range} and {end}
// move the current object and are not followed.
func jsonPathFields(path string) ([]fieldPath, bool) {
	parser, err := jsonpath.Parse("fields", path)
	if err != nil {
		return nil, false
	}
	var out []fieldPath
	for _, block := range parser.Root.Nodes {
		list, ok := block.(*jsonpath.ListNode)
		if !ok {
			return nil, false
		}
		for _, n := range list.Nodes {
			if n.Type() == jsonpath.NodeIdentifier || n.Type() == jsonpath.NodeText {
				return nil, false
			}
		}
		var p fieldPath
		for _, n := range list.Nodes {
			field, ok := n.(*jsonpath.FieldNode)
			if !ok || field.Value == "" {
				break
			}
			p = append(p, field.Value)
		}
		if len(p) == 0 {
			return nil, false
		}
		out = append(out, p)
	}
	return out, len(out) > 0
}

// celParser parses CEL as pkg/expression does (its extensions add macros
// and the optional syntax); libraries missing here would only turn macros
// into calls, which keep more, never less.
var celParser = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(expression.ObjectVariable, cel.DynType),
		cel.OptionalTypes(),
		ext.Strings(), ext.Lists(), ext.Sets(), ext.Math(), ext.Encoders(), ext.TwoVarComprehensions(),
	)
})

// celFields are the fields a CEL expression reads: for every reference to
// `object`, the chain of constant field selections (object.a.b,
// object["a"], object.?a) applied to it. Anything else done with a value
// (a call, a comprehension, a computed index) reads all of it.
func celFields(expr string) ([]fieldPath, bool) {
	env, err := celParser()
	if err != nil {
		return nil, false
	}
	parsed, iss := env.Parse(expr)
	if len(iss.Errors()) > 0 { // not iss.Err(): it formats them all
		return nil, false
	}
	root := celast.NavigateAST(parsed.NativeRep())
	refs := celast.MatchDescendants(root, func(e celast.NavigableExpr) bool {
		// ".object" is the same variable, named from the root scope.
		return e.Kind() == celast.IdentKind && strings.TrimPrefix(e.AsIdent(), ".") == expression.ObjectVariable
	})
	var out []fieldPath
	for _, ref := range refs {
		var p fieldPath
		for cur := ref; ; {
			parent, ok := cur.Parent()
			if !ok {
				break
			}
			field, ok := selectedField(parent, cur)
			if !ok {
				break
			}
			p, cur = append(p, field), parent
		}
		if len(p) == 0 {
			return nil, false // the whole object
		}
		out = append(out, p)
	}
	// An expression that never reads the object reads nothing of it.
	return out, true
}

// selectedField is the constant field that parent selects of operand.
func selectedField(parent, operand celast.NavigableExpr) (string, bool) {
	switch parent.Kind() {
	case celast.SelectKind:
		sel := parent.AsSelect()
		return sel.FieldName(), sel.Operand().ID() == operand.ID()
	case celast.CallKind:
		call := parent.AsCall()
		switch call.FunctionName() {
		case operators.Index, operators.OptIndex, operators.OptSelect:
		default:
			return "", false
		}
		args := call.Args()
		if len(args) != 2 || args[0].ID() != operand.ID() || args[1].Kind() != celast.LiteralKind {
			return "", false
		}
		s, ok := args[1].AsLiteral().(types.String)
		return string(s), ok
	}
	return "", false
}

// encodeFields is the canonical string of a set of paths.
func encodeFields(paths []fieldPath) string {
	paths = slices.Clone(paths)
	slices.SortFunc(paths, func(a, b fieldPath) int { return slices.Compare(a, b) })
	var out []fieldPath
	for _, p := range paths {
		// Sorted, a path follows its prefixes: one kept prefix covers it.
		if len(out) > 0 && isPrefix(out[len(out)-1], p) {
			continue
		}
		out = append(out, p)
	}
	raw, _ := json.Marshal(out)
	return string(raw)
}

func isPrefix(prefix, p fieldPath) bool {
	return len(prefix) <= len(p) && slices.Equal(prefix, p[:len(prefix)])
}

func decodeFields(fields string) ([]fieldPath, bool) {
	var paths []fieldPath
	if fields == "" || json.Unmarshal([]byte(fields), &paths) != nil {
		return nil, false
	}
	return paths, true
}

// unionFields is the set of fields two users read together.
func unionFields(a, b string) string {
	pa, okA := decodeFields(a)
	pb, okB := decodeFields(b)
	if !okA || !okB {
		return ""
	}
	return encodeFields(append(pa, pb...))
}

// fieldTree is a set of paths as a tree: a node without children keeps
// everything under it.
type fieldTree map[string]fieldTree

func newFieldTree(fields string) fieldTree {
	paths, ok := decodeFields(fields)
	if !ok {
		return nil
	}
	root := fieldTree{}
	for _, p := range paths {
		node := root
		for _, key := range p {
			next := node[key]
			if next == nil {
				next = fieldTree{}
				node[key] = next
			}
			node = next
		}
	}
	return root
}
