package expression

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common"
	celast "github.com/google/cel-go/common/ast"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// ObjectVariable is the name CEL expressions use for the collected object.
const ObjectVariable = "object"

// celExpression is a compiled CEL program.
type celExpression struct {
	program cel.Program
}

// celEnv is shared by all expressions: building it is expensive and it is
// safe for concurrent use.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable(ObjectVariable, cel.DynType),
		cel.CustomTypeAdapter(&orderedAdapter{Adapter: types.DefaultTypeAdapter}),
		cel.OptionalTypes(),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserRecursionLimit(100),
		ext.Strings(),
		ext.Lists(),
		ext.Sets(),
		ext.Math(),
		ext.Encoders(),
		ext.TwoVarComprehensions(),
	)
})

// callGuardOf holds the bindings guardedCall runs, read from celEnv once.
var callGuardOf = sync.OnceValues(func() (*callGuard, error) {
	env, err := celEnv()
	if err != nil {
		return nil, err
	}
	return newCallGuard(env)
})

func compileCEL(expr string) (c *celExpression, err error) {
	// cel-go panics on some input while it plans, such as a bytes key in
	// a constant map literal: that must reject the expression, not crash
	// the caller (admission, or a collector reading a stored Profile).
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("invalid CEL expression: %v", r)
		}
	}()
	if strings.TrimSpace(expr) == "" {
		return nil, errors.New("the CEL expression is empty")
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment is broken: %v", err)
	}
	// optMap and optFlatMap copy their target as the parser expands them:
	// chained, the expression doubles at every step before any count of
	// its nodes could stop it.
	if n := strings.Count(expr, "optMap") + strings.Count(expr, "optFlatMap"); n > maxOptMaps {
		return nil, fmt.Errorf("invalid CEL expression: %d uses of optMap or optFlatMap, at most %d", n, maxOptMaps)
	}
	parsed, issues := env.Parse(expr)
	if hasErrors(issues) {
		return nil, celIssue(issues.Errors())
	}
	nodes := celast.MatchDescendants(celast.NavigateAST(parsed.NativeRep()), everyNode)
	if len(nodes) > maxNodes {
		return nil, fmt.Errorf("invalid CEL expression: %d operations once its macros are expanded, at most %d", len(nodes), maxNodes)
	}
	if err := literalShapes(nodes); err != nil {
		return nil, err
	}
	depth, work := typeShape(parsed.NativeRep().Expr())
	if depth > maxTypeDepth {
		return nil, fmt.Errorf("invalid CEL expression: values nested %d deep (lists, maps, optionals), at most %d", depth, maxTypeDepth)
	}
	if work > maxTypeWork {
		return nil, fmt.Errorf("invalid CEL expression: its values' types are too large to check (%d, at most %d): fewer nested lists and maps, or fewer uses of them", work, maxTypeWork)
	}
	ast, issues := env.Check(parsed)
	if hasErrors(issues) {
		return nil, celIssue(issues.Errors())
	}
	if err := noMessages(ast); err != nil {
		return nil, err
	}
	if err := mapKeys(ast); err != nil {
		return nil, err
	}
	if err := optionalElements(ast); err != nil {
		return nil, err
	}
	cost, err := env.EstimateCost(ast, sizeEstimator{})
	if err != nil {
		return nil, fmt.Errorf("the cost of the CEL expression cannot be estimated: %v", err)
	}
	if cost.Max > StaticCostBudget {
		return nil, fmt.Errorf("the CEL expression is too expensive: its estimated cost exceeds the budget by a factor of %s (avoid nested loops over lists of the object)",
			costFactor(cost.Max))
	}
	guard, err := callGuardOf()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment is broken: %v", err)
	}
	// Not cel.OptOptimize: it compiles constant regular expressions
	// whatever their size, and replaces the calls the guard wraps.
	program, err := env.Program(ast,
		cel.CostLimit(RuntimeCostLimit),
		cel.CostTracking(workCost{}),
		cel.CustomDecorator(guard.decorate),
		// Every iteration: one step may hash a 3 MiB map key a thousand
		// times (about 55 ms), for a cost of one each.
		cel.InterruptCheckFrequency(1),
	)
	if err != nil {
		return nil, fmt.Errorf("invalid CEL expression: %v", err)
	}
	return &celExpression{program: program}, nil
}

// maxNodes bounds the expression once parsed, macros expanded:
// type-checking takes time and memory quadratic in the nodes (14,000
// nodes took 5.5 s and 2.4 GB). Ordinary expressions have about one node
// per four characters.
const maxNodes = 2000

func everyNode(celast.NavigableExpr) bool { return true }

// maxOptMaps bounds the optMap and optFlatMap calls of an expression: six
// copy a target 64 times.
const maxOptMaps = 6

// maxComputedKeys bounds the map literals whose keys are computed. The
// type of {v: v} names v's type twice, so a chain of them doubles the
// type at every step and type-checking eighteen took 26 GB.
const maxComputedKeys = 6

// maxEmptyLiterals bounds [] and {} (macros start their results with one):
// each leaves the checker a type variable, and the checker copies all of
// them for every overload it tries at every call. 900 of them and 250
// comparisons took 721 MiB to check.
const maxEmptyLiterals = 64

// literalShapes counts the map literals with computed keys and the empty
// literals of a parsed expression.
func literalShapes(nodes []celast.NavigableExpr) error {
	n, empty := 0, 0
	for _, node := range nodes {
		switch {
		case node.Kind() == celast.ListKind && node.AsList().Size() == 0,
			node.Kind() == celast.MapKind && node.AsMap().Size() == 0:
			empty++
		}
		if node.Kind() != celast.MapKind {
			continue
		}
		for _, entry := range node.AsMap().Entries() {
			if entry.AsMapEntry().Key().Kind() != celast.LiteralKind {
				n++
				break
			}
		}
	}
	if n > maxComputedKeys {
		return fmt.Errorf("invalid CEL expression: %d map literals with computed keys, at most %d", n, maxComputedKeys)
	}
	if empty > maxEmptyLiterals {
		return fmt.Errorf("invalid CEL expression: %d empty lists or maps (a macro makes one), at most %d", empty, maxEmptyLiterals)
	}
	return nil
}

// maxTypeDepth bounds how deeply the types of an expression can nest.
// cel-go's checker prints a type to look it up while it substitutes type
// parameters, so checking costs about the cube of the depth, once per
// comprehension: [1].map(x, [[…[x]…]]) at depth 270 took 2 s and 1.7 GB,
// at 800 two minutes and 136 GB.
const maxTypeDepth = 48

// typeWrappers are the calls whose type holds their arguments' one level
// down: optional(T), map(K, V), type(T). Before checking, optional.of is the
// member call "of" on the identifier optional.
var typeWrappers = map[string]bool{
	"of": true, "ofNonZeroValue": true, "first": true, "last": true, "type": true,
	operators.OptIndex: true, operators.OptSelect: true, "cel.@mapInsert": true,
}

// maxTypeWork bounds the sum, over an expression's nodes, of their type's
// size times its depth: what the checker prints. Six {v: v} make a type of
// 64 branches without making it deeper: at depth 42, 300 uses of it took
// 23 s and 6.4 GB. Ordinary expressions of 4,000 characters are under
// 2,000.
const maxTypeWork = 500_000

// typeShape bounds, before type-checking, the types of a parsed
// expression: the deepest any part can have, and the work of checking
// them (maxTypeWork). A list or map literal or a wrapping call adds a
// level to its deepest part (a map's size is its key's and its value's);
// a comprehension's variables are a level under what they walk, and its
// result is as large as what its steps build.
func typeShape(root celast.Expr) (deepest, work int) {
	// key is, for a map, 1 + the size of its key type (0: not known to be
	// a map), for the variable that iterates it.
	type shape struct{ depth, size, key int }
	var walk func(e celast.Expr, vars map[string]shape) shape
	walk = func(e celast.Expr, vars map[string]shape) shape {
		var r shape
		widen := func(o shape) { r.depth, r.size, r.key = max(r.depth, o.depth), max(r.size, o.size), max(r.key, o.key) }
		switch e.Kind() {
		case celast.IdentKind:
			r = vars[e.AsIdent()]
		case celast.SelectKind:
			r = walk(e.AsSelect().Operand(), vars)
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				widen(walk(el, vars))
			}
			r.depth, r.size, r.key = r.depth+1, r.size+1, 0
		case celast.MapKind:
			keys, values := 0, 0
			for _, entry := range e.AsMap().Entries() {
				me := entry.AsMapEntry()
				k, v := walk(me.Key(), vars), walk(me.Value(), vars)
				r.depth = max(r.depth, k.depth, v.depth)
				keys, values = max(keys, k.size), max(values, v.size)
			}
			r.depth, r.size, r.key = r.depth+1, 1+keys+values, 1+keys
		case celast.CallKind:
			call := e.AsCall()
			if call.IsMemberFunction() {
				widen(walk(call.Target(), vars))
			}
			var args []shape
			for _, arg := range call.Args() {
				args = append(args, walk(arg, vars))
				widen(args[len(args)-1])
			}
			if typeWrappers[call.FunctionName()] {
				r.depth, r.size, r.key = r.depth+1, r.size+1, 0
			}
			// transformMap's step makes map(K, V), as a map literal.
			if call.FunctionName() == "cel.@mapInsert" && len(args) == 3 {
				r.size, r.key = max(r.size, 1+args[1].size+args[2].size), max(r.key, 1+args[1].size)
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			inner := maps.Clone(vars)
			if inner == nil {
				inner = map[string]shape{}
			}
			walked := walk(c.IterRange(), vars)
			item := shape{depth: max(walked.depth-1, 0), size: max(walked.size-1, 0)}
			inner[c.IterVar()] = item
			if walked.key > 0 {
				// A map's iteration variable is its key.
				inner[c.IterVar()] = shape{depth: item.depth, size: walked.key - 1}
			}
			if c.HasIterVar2() {
				inner[c.IterVar2()] = item
			}
			start := walk(c.AccuInit(), vars)
			inner[c.AccuVar()] = start
			step := walk(c.LoopStep(), inner)
			inner[c.AccuVar()] = shape{max(start.depth, step.depth), max(start.size, step.size), max(start.key, step.key)}
			walk(c.LoopCondition(), inner)
			r = walk(c.Result(), inner)
		}
		deepest = max(deepest, r.depth)
		work += max(r.size, 1) * max(r.depth, 1)
		return r
	}
	walk(root, nil)
	return deepest, work
}

// optionalElements rejects [?x] and {?k: x} where x is not known to be an
// optional: cel-go's error for a value that is not one prints the value,
// however large, and one of the object's values never is one.
func optionalElements(ast *cel.Ast) error {
	native := ast.NativeRep()
	isOptional := func(e celast.Expr) bool {
		t := native.GetType(e.ID())
		return t.Kind() == types.OpaqueKind && t.TypeName() == "optional_type"
	}
	const msg = "invalid CEL expression: an optional element (%s) must be an optional value, such as object.?field or optional.of(x)"
	root := celast.NavigateAST(native)
	for _, l := range celast.MatchDescendants(root, celast.KindMatcher(celast.ListKind)) {
		list := l.AsList()
		for _, i := range list.OptionalIndices() {
			if !isOptional(list.Elements()[i]) {
				return fmt.Errorf(msg, "[?x]")
			}
		}
	}
	for _, m := range celast.MatchDescendants(root, celast.KindMatcher(celast.MapKind)) {
		for _, entry := range m.AsMap().Entries() {
			if e := entry.AsMapEntry(); e.IsOptional() && !isOptional(e.Value()) {
				return fmt.Errorf(msg, "{?k: x}")
			}
		}
	}
	return nil
}

// noMessages rejects message construction (google.protobuf.Struct{...}):
// cel-go builds messages without the adapter, so a Struct made of the
// object's map would be walked in Go's random order, and an attribute gains
// nothing from messages that a map does not give.
func noMessages(ast *cel.Ast) error {
	found := celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.StructKind))
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("invalid CEL expression: message construction (%s{...}) is not supported; use a map", found[0].AsStruct().TypeName())
}

// mapKeys rejects map literals whose keys are known to be of a type CEL
// maps do not take (bytes, double, a list): cel-go would fail to build
// them at every evaluation. Keys typed dyn are checked as maps are built
// (orderedAdapter).
func mapKeys(ast *cel.Ast) error {
	for _, m := range celast.MatchDescendants(celast.NavigateAST(ast.NativeRep()), celast.KindMatcher(celast.MapKind)) {
		for _, entry := range m.AsMap().Entries() {
			key := entry.AsMapEntry().Key()
			switch t := ast.NativeRep().GetType(key.ID()); t.Kind() {
			case types.BoolKind, types.IntKind, types.UintKind, types.StringKind, types.DynKind, types.AnyKind, types.TypeParamKind:
			default:
				return fmt.Errorf("invalid CEL expression: a map key of type %s: CEL map keys are bool, int, uint or string", t)
			}
		}
	}
	return nil
}

// celIssue turns the first compile error into one line with its position.
// hasErrors reports whether issues hold an error without formatting them:
// Issues.Err prints up to 100, each with a caret line built one column at
// a time (a 4 KB expression with a few hundred errors took 800 MiB).
func hasErrors(issues *cel.Issues) bool {
	return issues != nil && len(issues.Errors()) > 0
}

func celIssue(errs []*common.Error) error {
	if len(errs) == 0 {
		return errors.New("invalid CEL expression")
	}
	first := errs[0]
	// The parser lists every token it expected; the position says enough.
	detail, _, _ := strings.Cut(first.Message, " expecting ")
	msg := "invalid CEL expression: " + detail
	// Some errors, such as exceeding the parser's recursion limit, are
	// about the whole expression and have no position (line -1).
	if line := first.Location.Line(); line >= 1 {
		msg = fmt.Sprintf("invalid CEL expression at line %d, column %d: %s", line, first.Location.Column()+1, detail)
	}
	if len(errs) > 1 {
		msg += fmt.Sprintf(" (and %d more errors)", len(errs)-1)
	}
	return errors.New(msg)
}

func costFactor(cost uint64) string {
	factor := float64(cost) / float64(StaticCostBudget)
	if factor > 1000 {
		return "more than 1000"
	}
	return fmt.Sprintf("%.1f", factor)
}

func (c *celExpression) evaluate(ctx context.Context, obj map[string]any) (any, bool, error) {
	out, _, err := c.program.ContextEval(ctx, map[string]any{ObjectVariable: forEvaluation().NativeToValue(obj)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, fmt.Errorf("CEL evaluation cancelled: %w", context.Cause(ctx))
		}
		return nil, false, evalError(err)
	}
	// A result that uses a value many times is measured before it is
	// converted: converting it whole took gigabytes. The measure is never
	// more than its JSON encoding.
	if jsonBytes.size(out, MaxValueBytes) > MaxValueBytes {
		return nil, false, errValueTooLarge
	}
	return toJSON(out)
}

// evalError makes a CEL evaluation error short, and nil when it only says
// that the object lacks what the expression reads.
func evalError(err error) error {
	var cancelled interpreter.EvalCancelledError
	if errors.As(err, &cancelled) {
		if cancelled.Cause == interpreter.CostLimitExceeded {
			return fmt.Errorf("CEL evaluation exceeded the runtime cost limit of %d", RuntimeCostLimit)
		}
		return fmt.Errorf("CEL evaluation cancelled: %v", cancelled.Message)
	}
	if isMissing(err) {
		return nil
	}
	return fmt.Errorf("CEL evaluation failed: %v", err)
}

// missingMarkers are the messages of the CEL errors that mean the object
// lacks a key or an index the expression reads; cel-go has no error types
// for them. The tests pin them.
var missingMarkers = []string{
	"no such key",
	"index out of bounds",
	"out of range in list size",
}

// isMissing reports whether a CEL error makes the attribute not found.
func isMissing(err error) bool {
	msg := err.Error()
	for _, marker := range missingMarkers {
		if strings.Contains(msg, marker) {
			return true
		}
	}
	return false
}
