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

// compileCEL checks expr in a checker process (checker.go) and plans the
// checked expression here.
func compileCEL(expr string) (c *celExpression, err error) {
	// cel-go panics on some input while it plans, such as a bytes key in
	// a constant map literal: that must reject the expression, not crash
	// the caller (admission, or a collector reading a stored Profile).
	defer func() {
		if r := recover(); r != nil {
			c, err = nil, fmt.Errorf("invalid CEL expression: %v", r)
		}
	}()
	ast, err := checkInChild(expr)
	if err != nil {
		return nil, err
	}
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("the CEL environment is broken: %v", err)
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

// checkCEL parses and type-checks expr and estimates its cost, refusing
// what the counts below find too large to check and what costs more than
// StaticCostBudget. It runs in the checker process.
func checkCEL(expr string) (checked *cel.Ast, err error) {
	defer func() {
		if r := recover(); r != nil {
			checked, err = nil, fmt.Errorf("invalid CEL expression: %v", r)
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
	if !skipCounts {
		if err := countBeforeCheck(parsed); err != nil {
			return nil, err
		}
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
	return ast, nil
}

// countBeforeCheck refuses what cel-go's checker would take too long or
// too much memory to check, with a message that says why: each count
// below bounds a way reviews found. The checker process bounds the rest.
func countBeforeCheck(parsed *cel.Ast) error {
	nodes := celast.MatchDescendants(celast.NavigateAST(parsed.NativeRep()), everyNode)
	if len(nodes) > maxNodes {
		return fmt.Errorf("invalid CEL expression: %d operations once its macros are expanded, at most %d", len(nodes), maxNodes)
	}
	if err := uncountedSyntax(nodes); err != nil {
		return err
	}
	if err := foldedInAll(nodes); err != nil {
		return err
	}
	if err := literalShapes(nodes); err != nil {
		return err
	}
	if w := substitutionWork(parsed.NativeRep().Expr()); w > maxSubstitutionWork {
		return fmt.Errorf("invalid CEL expression: too many overloads to check against its type variables (%d, at most %d): fewer indexes, comparisons or generic calls", w, maxSubstitutionWork)
	}
	depth, work := typeShape(parsed.NativeRep().Expr())
	if depth > maxTypeDepth {
		return fmt.Errorf("invalid CEL expression: values nested %d deep (lists, maps, optionals), at most %d", depth, maxTypeDepth)
	}
	if work > maxTypeWork {
		return fmt.Errorf("invalid CEL expression: its values' types are too large to check (%d, at most %d): fewer nested lists and maps, or fewer uses of them", work, maxTypeWork)
	}
	return nil
}

// maxNodes bounds the expression once parsed, macros expanded:
// type-checking takes time and memory quadratic in the nodes (14,000
// nodes took 5.5 s and 2.4 GB). Ordinary expressions have about one node
// per four characters.
const maxNodes = 2000

func everyNode(celast.NavigableExpr) bool { return true }

// uncountedSyntax refuses, before the checker runs, what the counts below
// do not follow. Message construction, refused after checking anyway
// (noMessages): the checker checks its fields, which substitutionWork and
// typeShape do not walk (google.protobuf.Int64Value{value: …}, 3.2 KB,
// took 18 s and 6.4 GiB to check). A function called with a leading dot
// (.dyn(x), .type(x)): the checker resolves the name without it, the
// counts do not know it (.type nested 90 deep counted depth 3: 4 s and
// 1.6 GiB). A variable with one (.object) names the root's, as without.
func uncountedSyntax(nodes []celast.NavigableExpr) error {
	for _, node := range nodes {
		switch node.Kind() {
		case celast.StructKind:
			return fmt.Errorf("invalid CEL expression: message construction (%s{...}) is not supported; use a map", node.AsStruct().TypeName())
		case celast.CallKind:
			if name := node.AsCall().FunctionName(); strings.HasPrefix(name, ".") {
				return fmt.Errorf("invalid CEL expression: a function called with a leading dot (%s): write it without the dot", name)
			}
		}
	}
	return nil
}

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

// maxSubstitutionWork bounds what cel-go's checker copies: before every
// overload it tries and every list or map element it joins, it copies its
// substitution, which holds every type variable bound so far, and each
// generic call (an index, ==, in, …) binds some. 450 indexes then 364
// comparisons (2.8 KB) copied 640 MiB in 0.8 s; at the bound it is some
// tens of MiB. 48 label and replica tests joined by || (3.8 KB) count
// 257,000; the expressions of the docs a few hundred.
const maxSubstitutionWork = 500_000

// substitutionWork follows the checker's order, counting for each
// overload tried and each element joined the type variables bound before
// it: at most the type parameters of every overload tried, and one for
// each empty literal.
func substitutionWork(root celast.Expr) int64 {
	shapes := overloads().shapes
	var vars, work int64
	var walk func(e celast.Expr)
	walk = func(e celast.Expr) {
		switch e.Kind() {
		case celast.SelectKind:
			walk(e.AsSelect().Operand())
		case celast.CallKind:
			call := e.AsCall()
			member := call.IsMemberFunction()
			if member {
				walk(call.Target())
			}
			for _, a := range call.Args() {
				walk(a)
			}
			// sets.contains(a, b): a namespaced function, parsed as a
			// member call, which the checker looks for first.
			shape, ok := overloadShape{}, false
			if member {
				if name, qualified := qualifiedName(call.Target()); qualified {
					shape, ok = shapes[overloadKey{name + "." + call.FunctionName(), false}]
				}
			}
			if !ok {
				shape = shapes[overloadKey{call.FunctionName(), member}]
			}
			work += shape.tried*(vars+1) + shape.boundBefore
			vars += shape.bound
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				walk(el)
				work += vars + 1
			}
			if e.AsList().Size() == 0 {
				vars++
			}
		case celast.MapKind:
			for _, entry := range e.AsMap().Entries() {
				walk(entry.AsMapEntry().Key())
				walk(entry.AsMapEntry().Value())
				work += 2 * (vars + 1)
			}
			if e.AsMap().Size() == 0 {
				vars += 2
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			for _, sub := range []celast.Expr{c.IterRange(), c.AccuInit(), c.LoopCondition(), c.LoopStep(), c.Result()} {
				walk(sub)
			}
			work += 2 * (vars + 1)
		}
	}
	walk(root)
	return work
}

// overloadKey names the overloads of a function called one way.
type overloadKey struct {
	name   string
	member bool
}

// overloadShape is what trying a function's overloads in turn binds: tried
// overloads, bound type parameters in all, and the sum over the overloads
// of the parameters bound before each.
type overloadShape struct{ tried, bound, boundBefore int64 }

// overloadTables are what the pre-checks know of the environment's
// overloads, read in one pass: the shape of each function's overloads,
// and the functions with an overload whose result type names one of its
// type parameters.
type overloadTables struct {
	shapes  map[overloadKey]overloadShape
	generic map[string]bool
}

var overloads = sync.OnceValue(func() overloadTables {
	t := overloadTables{shapes: map[overloadKey]overloadShape{}, generic: map[string]bool{}}
	env, err := celEnv()
	if err != nil {
		return t
	}
	for name, fn := range env.Functions() {
		for _, o := range fn.OverloadDecls() {
			k := overloadKey{name, o.IsMemberFunction()}
			shape := t.shapes[k]
			shape.tried++
			shape.boundBefore += shape.bound
			shape.bound += int64(len(o.TypeParams()))
			t.shapes[k] = shape
			for _, p := range o.TypeParams() {
				if strings.Contains(o.ResultType().String(), "<"+p+">") {
					t.generic[name] = true
				}
			}
		}
	}
	return t
})

// qualifiedName is the dotted name an identifier or a chain of selects
// spells.
func qualifiedName(e celast.Expr) (string, bool) {
	switch e.Kind() {
	case celast.IdentKind:
		return e.AsIdent(), true
	case celast.SelectKind:
		if prefix, ok := qualifiedName(e.AsSelect().Operand()); ok {
			return prefix + "." + e.AsSelect().FieldName(), true
		}
	}
	return "", false
}

// typeShape bounds, before type-checking, the types of a parsed
// expression: the deepest any part can have, and the work of checking
// them (maxTypeWork). A list or map literal or a wrapping call adds a
// level to its deepest part (a map's size is its key's and its value's);
// a comprehension's variables are a level under what they walk, and its
// result is as large as what its steps build.
//
// A type variable ([], {}, optional.none()) takes, once bound, whatever
// type the checker finds for it, and every node typed with it is then
// checked at that size: [].map(x, [x, x, …]) == [[{'a': {…}}]] (3.7 KB)
// took 2.6 s and 850 MiB. So a second walk gives each of them the largest
// type the first found anywhere, grown by what wraps a variable and
// doubled by each map (or index) of two.
func typeShape(root celast.Expr) (deepest, work int) {
	first := typeShapeWith(root, typeSize{})
	// A variable may be bound to a type that wraps another variable's
	// (x == [[y]] binds x deeper than y): the sum of every wrapping of a
	// value that holds a variable bounds the chain.
	unbound := typeSize{first.largest.depth + first.growDepth, first.largest.size + first.growSize}
	unbound.size <<= min(first.doublings, 16)
	second := typeShapeWith(root, unbound)
	return second.deepest, second.work
}

// isEmptyLiteral reports whether e is [] or {}.
func isEmptyLiteral(e celast.Expr) bool {
	switch e.Kind() {
	case celast.ListKind:
		return e.AsList().Size() == 0
	case celast.MapKind:
		return e.AsMap().Size() == 0
	}
	return false
}

// typeSize is the depth and size of a type.
type typeSize struct{ depth, size int }

// typeShapes are what a walk of typeShapeWith found.
type typeShapes struct {
	deepest, work int
	largest       typeSize
	// growDepth and growSize sum what the lists, maps and wrapping calls
	// around a value that holds a type variable add; doublings counts
	// the maps whose key and value both hold one.
	growDepth, growSize, doublings int
}

// typeShapeWith walks the expression as typeShape does, the element of an
// empty list or map and the value of optional.none() taking the type
// unbound.
func typeShapeWith(root celast.Expr, unbound typeSize) (found typeShapes) {
	// key is, for a map, 1 + the size of its key type (0: not known to be
	// a map), for the variable that iterates it.
	type shape struct {
		depth, size, key int
		v                bool // holds a type variable
	}
	var walk func(e celast.Expr, vars map[string]shape) shape
	walk = func(e celast.Expr, vars map[string]shape) shape {
		var r shape
		widen := func(o shape) {
			r.depth, r.size, r.key, r.v = max(r.depth, o.depth), max(r.size, o.size), max(r.key, o.key), r.v || o.v
		}
		grow := func() {
			if r.v {
				found.growDepth++
				found.growSize++
			}
		}
		switch e.Kind() {
		case celast.IdentKind:
			r = vars[e.AsIdent()]
		case celast.SelectKind:
			r = walk(e.AsSelect().Operand(), vars)
		case celast.ListKind:
			for _, el := range e.AsList().Elements() {
				widen(walk(el, vars))
			}
			if e.AsList().Size() == 0 {
				widen(shape{depth: unbound.depth, size: unbound.size, v: true})
			} else {
				grow()
			}
			r.depth, r.size, r.key = r.depth+1, r.size+1, 0
		case celast.MapKind:
			keys, values := 0, 0
			for _, entry := range e.AsMap().Entries() {
				me := entry.AsMapEntry()
				k, v := walk(me.Key(), vars), walk(me.Value(), vars)
				r.depth = max(r.depth, k.depth, v.depth)
				if k.v || v.v {
					r.v = true
					found.growDepth++
					found.growSize += 1 + k.size
				}
				if k.v && v.v {
					found.doublings++
				}
				keys, values = max(keys, k.size), max(values, v.size)
			}
			if e.AsMap().Size() == 0 {
				// map(K, V): K and V may be bound to one type, twice.
				r.depth, keys, values, r.v = unbound.depth, unbound.size, unbound.size, true
				found.doublings++
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
			// A generic call whose result names a type parameter leaves it
			// free when an argument is dyn (object.value(), dyn(x),
			// [1, 'a'][0], flatten, math.greatest): which may be any
			// argument, so every generic result counts as a variable, as
			// none()'s. transformMap's step is counted below.
			if overloads().generic[call.FunctionName()] && call.FunctionName() != "cel.@mapInsert" {
				widen(shape{depth: unbound.depth, size: unbound.size, v: true})
			}
			// An index or in on a container holding a variable, with a key
			// holding one (not an int), binds the container to map(K, V),
			// K the key's type, V unified later: a doubling, as {k: v}.
			var container, key shape
			switch {
			case (call.FunctionName() == operators.Index || call.FunctionName() == operators.OptIndex) && len(args) == 2:
				container, key = args[0], args[1]
			case (call.FunctionName() == operators.In || call.FunctionName() == "in") && len(args) == 2:
				container, key = args[1], args[0]
			}
			if container.v && key.v {
				found.doublings++
				found.growDepth++
				found.growSize += 1 + key.size
			}
			if call.FunctionName() == "none" {
				widen(shape{depth: unbound.depth, size: unbound.size, v: true})
			} else if typeWrappers[call.FunctionName()] {
				grow()
			}
			if typeWrappers[call.FunctionName()] || call.FunctionName() == "none" {
				r.depth, r.size, r.key = r.depth+1, r.size+1, 0
			}
			// transformMap's step makes map(K, V), as a map literal.
			if call.FunctionName() == "cel.@mapInsert" && len(args) == 3 {
				if args[1].v || args[2].v {
					found.growDepth++
					found.growSize += 1 + args[1].size
				}
				if args[1].v && args[2].v {
					found.doublings++
				}
				r.size, r.key = max(r.size, 1+args[1].size+args[2].size), max(r.key, 1+args[1].size)
			}
		case celast.ComprehensionKind:
			c := e.AsComprehension()
			inner := maps.Clone(vars)
			if inner == nil {
				inner = map[string]shape{}
			}
			walked := walk(c.IterRange(), vars)
			item := shape{depth: max(walked.depth-1, 0), size: max(walked.size-1, 0), v: walked.v}
			inner[c.IterVar()] = item
			if walked.key > 0 {
				// A map's iteration variable is its key.
				inner[c.IterVar()] = shape{depth: item.depth, size: walked.key - 1, v: walked.v}
			}
			if c.HasIterVar2() {
				inner[c.IterVar2()] = item
			}
			// A macro's empty accumulator is bound to what its steps
			// build, below; only other type variables are unbound.
			start := shape{depth: 1, size: 1}
			if c.AccuInit().Kind() == celast.MapKind {
				start.key = 1
			}
			if !isEmptyLiteral(c.AccuInit()) {
				start = walk(c.AccuInit(), vars)
			}
			inner[c.AccuVar()] = start
			step := walk(c.LoopStep(), inner)
			inner[c.AccuVar()] = shape{max(start.depth, step.depth), max(start.size, step.size), max(start.key, step.key), start.v || step.v}
			walk(c.LoopCondition(), inner)
			r = walk(c.Result(), inner)
		}
		found.deepest = max(found.deepest, r.depth)
		found.work += max(r.size, 1) * max(r.depth, 1)
		found.largest = typeSize{max(found.largest.depth, r.depth), max(found.largest.size, r.size)}
		return r
	}
	walk(root, nil)
	return found
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

// foldedInAll bounds the runes case folding walks in all the patterns of
// an expression: each is parsed twice, and a bound per pattern let 4 KB
// of them fold millions.
func foldedInAll(nodes []celast.NavigableExpr) error {
	var n int64
	for _, node := range nodes {
		if node.Kind() != celast.CallKind || node.AsCall().FunctionName() != "matches" {
			continue
		}
		args := node.AsCall().Args()
		if len(args) == 0 || args[len(args)-1].Kind() != celast.LiteralKind {
			continue
		}
		if s, ok := args[len(args)-1].AsLiteral().(types.String); ok {
			n += foldedRunes(string(s))
		}
	}
	if n > maxFoldedRunes {
		return fmt.Errorf("invalid CEL expression: its regular expressions fold the case of too many characters: about %d in their classes under (?i), at most %d", n, maxFoldedRunes)
	}
	return nil
}
