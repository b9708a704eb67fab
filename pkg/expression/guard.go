package expression

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/functions"
	"github.com/google/cel-go/common/operators"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
	"github.com/google/cel-go/interpreter"
	"github.com/google/cel-go/parser"
)

// Work limits of single CEL calls.
//
// cel-go charges a call that walks its arguments (join, format, ==, in,
// flatten, …) one unit however large they are, and the object does not
// bound them: a value used twice is counted twice. [object.s, object.s, …]
// costs one list to build and joins into hundreds of copies of object.s;
// lists.range(1000).map(i, object.s) builds a thousand. One such call is
// never interrupted, so gigabytes were allocated, or the server ran out of
// memory, before any limit applied. And replace('', s) and split make more
// than they read; indexOf and matches work in the product of their
// arguments' sizes.
//
// So each of these calls first measures what it would walk or make, its
// work, counting every use of a value (workOf), and is refused past
// MaxCallWork; and it is charged work/10 of the runtime cost, as cel-go
// charges a string walk, so that an evaluation walks or makes about ten
// megabytes before RuntimeCostLimit stops it.

// MaxCallWork bounds the work of one CEL call: roughly bytes of strings
// plus one per scalar and containerWork per list or map, for everything it
// walks or makes. Twice the largest object, so a call over the whole
// object passes.
const MaxCallWork = 2 * MaxObjectBytes

// containerWork is the work of a list or a map besides its items: a call
// that walks one wraps it for CEL, 250 to 420 bytes each (a list of a
// million empty maps, 3 MB of JSON, took 1.6 GB to flatten six times when
// each counted 1).
const containerWork = 32

// workOf gives, by function name, how much a guarded call walks or makes,
// measured no further than limit. Functions not listed cost what cel-go
// charges: their work is bounded by the size of one value, which these
// calls bound in turn.
var workOf = map[string]func(args []ref.Val, limit int64) int64{
	operators.Equals:        equalityWork,
	operators.NotEquals:     equalityWork,
	operators.In:            inWork,
	"in":                    inWork, // the deprecated spellings of @in
	operators.OldIn:         inWork,
	operators.Add:           addWork,
	operators.Less:          compareWork,
	operators.LessEquals:    compareWork,
	operators.Greater:       compareWork,
	operators.GreaterEquals: compareWork,
	"join":                  joinWork,
	"format":                formatWork,
	"matches":               matchesWork,
	"flatten":               flattenWork,
	"size":                  textWork,
	"int":                   textWork,
	"uint":                  textWork,
	"double":                textWork,
	"bool":                  textWork,
	"string":                textWork,
	"bytes":                 textWork,
	"timestamp":             textWork,
	"duration":              textWork,
	"reverse":               argsWork,
	"slice":                 argsWork,
	"upperAscii":            argsWork,
	"lowerAscii":            argsWork,
	"trim":                  argsWork,
	"substring":             argsWork,
	"charAt":                argsWork,
	"indexOf":               searchWork,
	"lastIndexOf":           searchWork,
	"strings.quote":         quoteWork,
	"base64.encode":         encodeWork,
	"base64.decode":         argsWork,
	"replace":               replaceWork,
	"split":                 splitWork,
	"lists.range":           rangeWork,
	"distinct":              distinctWork,
	"sort":                  sortWork,
	sortByKeys:              sortByWork,
	"sets.contains":         setsWork,
	"sets.equivalent":       setsEquivalentWork,
	"sets.intersects":       setsWork,
	"math.@max":             argsWork,
	"math.@min":             argsWork,
	"cel.@mapInsert":        mapInsertWork,
	"optional.unwrap":       itemsWork,
	"unwrapOpt":             itemsWork,
	"getDate":               zoneWork,
	"getDayOfMonth":         zoneWork,
	"getDayOfWeek":          zoneWork,
	"getDayOfYear":          zoneWork,
	"getFullYear":           zoneWork,
	"getHours":              zoneWork,
	"getMilliseconds":       zoneWork,
	"getMinutes":            zoneWork,
	"getMonth":              zoneWork,
	"getSeconds":            zoneWork,
}

// itemsWork: a new list of the argument's items.
func itemsWork(args []ref.Val, _ int64) int64 {
	if l, ok := args[0].(traits.Sizer); ok {
		return 1 + 10*int64(l.Size().(types.Int))
	}
	return 1
}

// maxZoneBytes bounds a time zone argument: Go's LoadLocation copies the
// name into each path it tries and its error (16 MiB for a 2 MiB name).
const maxZoneBytes = 256

func zoneWork(args []ref.Val, _ int64) int64 {
	if len(args) > 1 {
		if tz, ok := args[1].(types.String); ok && len(tz) > maxZoneBytes {
			return math.MaxInt64
		}
	}
	return 1
}

// mapInsertWork: transformMapEntry's step inserts every entry of the map
// its expression makes (which may be one of the object's) into its result.
func mapInsertWork(args []ref.Val, limit int64) int64 {
	// The keys are hashed, and a key already there is copied into the
	// error (a 2 MiB key, a thousand times, allocated 2.5 GB).
	switch len(args) {
	case 2:
		if m, ok := args[1].(traits.Sizer); ok {
			return add(1+16*int64(m.Size().(types.Int)), sizeOf(args[1], limit))
		}
	case 3:
		return 1 + sizeOf(args[1], limit)
	}
	return 1
}

// sortByKeys is the function the sortBy macro calls.
const sortByKeys = "@sortByAssociatedKeys"

// measure walks values, counting a value as often as it is used, and
// stops once past a limit.
type measure struct {
	// container is what a list or a map counts besides its items.
	container int64
	// double is what a double counts; 0 counts 1.
	double int64
	// mapLevels counts a value once more for every map above it: %s
	// prints a map's values into strings of their own, then copies them
	// into their parent's.
	mapLevels bool
	// listLevels counts a value once more for each of up to listLevels
	// lists above it: flatten(n) copies the items of each level it
	// flattens into the level above.
	listLevels int64
}

var (
	// callWork is the work of a call that walks or copies values.
	callWork = measure{container: containerWork}
	// jsonBytes is never more than the values' JSON encoding.
	jsonBytes = measure{container: 2}
)

// sizeOf is the work of walking v, stopped once past limit.
func sizeOf(v ref.Val, limit int64) int64 { return callWork.size(v, limit) }

func (m measure) size(v ref.Val, limit int64) int64 { return m.walk(v, level{weight: 1}, limit) }

// level is where a value is: how many times it counts, how many lists
// are above it.
type level struct{ weight, lists int64 }

func (m measure) inMap(at level) level {
	if m.mapLevels {
		at.weight++
	}
	return at
}

func (m measure) inList(at level) level {
	if at.lists < m.listLevels {
		at.weight++
	}
	at.lists++
	return at
}

func (m measure) scalar(at level, double bool) int64 {
	if double && m.double > 0 {
		return mul(m.double, at.weight)
	}
	return at.weight
}

func (m measure) walk(v ref.Val, at level, limit int64) int64 {
	switch v := v.(type) {
	case types.String:
		return mul(int64(len(v))+1, at.weight)
	case types.Bytes:
		return mul(int64(len(v))+1, at.weight)
	case types.Double:
		return m.scalar(at, true)
	case *types.Optional:
		// == and in compare what an optional holds.
		if v.HasValue() {
			return add(at.weight, m.walk(v.GetValue(), at, limit))
		}
		return at.weight
	case *orderedMap:
		if v.strings != nil {
			return m.native(v.strings, at, limit)
		}
	case *objectList:
		return m.native(v.raw, at, limit)
	case traits.MutableLister:
		// A comprehension's result while it grows: its Value is stale.
		n, in := mul(m.container, at.weight), m.inList(at)
		for i := types.IntZero; i < v.Size().(types.Int) && n <= limit; i++ {
			n = add(n, m.walk(v.Get(i), in, limit-n))
		}
		return n
	}
	n := mul(m.container, at.weight)
	switch v := v.(type) {
	case traits.Lister:
		switch raw := v.Value().(type) {
		case []ref.Val, []any, []string:
			return m.native(raw, at, limit)
		}
		in := m.inList(at)
		for it := v.Iterator(); it.HasNext() == types.True && n <= limit; {
			n = add(n, m.walk(it.Next(), in, limit-n))
		}
	case traits.Mapper:
		switch raw := v.Value().(type) {
		case map[ref.Val]ref.Val, map[string]any, map[string]string:
			return m.native(raw, at, limit)
		}
		in := m.inMap(at)
		for it := v.Iterator(); it.HasNext() == types.True && n <= limit; {
			k := it.Next()
			n = add(n, m.walk(k, in, limit-n))
			if value, found := v.Find(k); found {
				n = add(n, m.walk(value, in, limit-n))
			}
		}
	default:
		return at.weight // a number, a bool, null, a type
	}
	return n
}

// native is walk for the Go values behind lists and maps: the object's
// own, or cel-go's, walked as they are (an iterator allocates for every
// item, and the measure must cost less than the work it prevents).
func (m measure) native(v any, at level, limit int64) int64 {
	n := mul(m.container, at.weight)
	switch v := v.(type) {
	case string:
		return mul(int64(len(v))+1, at.weight)
	case float64:
		return m.scalar(at, true)
	case ref.Val:
		return m.walk(v, at, limit)
	case map[string]any:
		in := m.inMap(at)
		for k, child := range v {
			if n > limit {
				break
			}
			n = add(n, add(mul(int64(len(k))+1, in.weight), m.native(child, in, limit-n)))
		}
	case map[ref.Val]ref.Val:
		in := m.inMap(at)
		for k, child := range v {
			if n > limit {
				break
			}
			n = add(n, add(m.walk(k, in, limit-n), m.walk(child, in, limit-n)))
		}
	case []any:
		in := m.inList(at)
		for _, child := range v {
			if n > limit {
				break
			}
			n = add(n, m.native(child, in, limit-n))
		}
	case []ref.Val:
		in := m.inList(at)
		for _, child := range v {
			if n > limit {
				break
			}
			n = add(n, m.walk(child, in, limit-n))
		}
	case []string:
		in := m.inList(at)
		for _, child := range v {
			n = add(n, mul(int64(len(child))+1, in.weight))
		}
	case map[string]string:
		in := m.inMap(at)
		for k, child := range v {
			n = add(n, mul(int64(len(k)+len(child))+2, in.weight))
		}
	default:
		return at.weight // a number, a bool, null
	}
	return n
}

// textWork: size counts a string's characters, and a conversion reads
// its text (and a failed one copies it into its error); the size of a
// list or a map is known.
func textWork(args []ref.Val, _ int64) int64 {
	var n int64
	for _, a := range args {
		switch a := a.(type) {
		case types.String:
			n += int64(len(a)) + 1
		case types.Bytes:
			n += int64(len(a)) + 1
		default:
			n++
		}
	}
	return n
}

func argsWork(args []ref.Val, limit int64) int64 {
	var n int64
	for _, a := range args {
		if n > limit {
			break
		}
		n += sizeOf(a, limit-n)
	}
	return n
}

// equalityWork: == stops at the smaller side. Both sides are measured to
// a growing bound until one fits, so the measure costs a few times the
// smaller side, not the larger; and it gives the same at every evaluation
// whatever order maps are walked in.
func equalityWork(args []ref.Val, limit int64) int64 {
	for bound := int64(64); ; bound *= 4 {
		a, b := sizeOf(args[0], bound), sizeOf(args[1], bound)
		if a <= bound || b <= bound {
			return min(a, b)
		}
		if bound > limit {
			return bound
		}
	}
}

// inWork: x in list compares x with every item; x in map looks it up.
func inWork(args []ref.Val, limit int64) int64 {
	if _, ok := args[1].(traits.Lister); ok {
		return sizeOf(args[1], limit) + sizeOf(args[0], limit)
	}
	return sizeOf(args[0], limit)
}

// addWork: what + copies. A macro's hidden result list grows in place by
// the item added; other lists are concatenated whole (concatenation). Any
// other mutable list is an empty accumulator cel-go made mutable, which
// never grows (concatenation copies it), so it costs nothing either.
func addWork(args []ref.Val, _ int64) int64 {
	if _, ok := args[0].(traits.MutableLister); ok {
		return copied(args[1])
	}
	return add(copied(args[0]), copied(args[1]))
}

// compareWork: <, <=, > and >= on strings or bytes read up to the shorter
// one. Typed operands are charged that by cel-go; dyn ones (any value of
// the object) are dispatched at runtime and charged 1.
func compareWork(args []ref.Val, _ int64) int64 {
	if len(args) != 2 {
		return 1
	}
	return min(textWork(args[:1], 0), textWork(args[1:], 0))
}

// copied is what copying a value costs: its bytes, or its items at 4
// each (a copied item takes 16 bytes); a map or a list of the object's
// own lists becomes a CEL value as it is copied, at containerWork.
func copied(v ref.Val) int64 {
	switch v := v.(type) {
	case types.String:
		return int64(len(v))
	case types.Bytes:
		return int64(len(v))
	case *objectList:
		var n int64
		for _, item := range v.raw {
			switch item.(type) {
			case map[string]any, []any:
				n += containerWork
			default:
				n += 4
			}
		}
		return n
	case traits.Lister:
		return 4 * int64(v.Size().(types.Int))
	}
	return 1
}

// concatenation copies two lists into one. cel-go's list + list is a
// view of both, and a view of views is slow to walk: every item read
// goes down the chain and back, so l + l + … (twenty times) took seconds
// and gigabytes to join, in one call nothing interrupts. The copy costs
// its length, which + is charged.
//
// A mutable list is copied too, unless it is a macro's hidden result
// (inPlace): cel-go makes any empty accumulator mutable, and optMap's is
// the user's variable, so v + [v] appended v to itself (a list that holds
// itself: walking it overflowed the stack and ended the process).
func concatenation(a, b ref.Val, inPlace bool) (ref.Val, bool) {
	la, ok1 := a.(traits.Lister)
	lb, ok2 := b.(traits.Lister)
	if _, mutable := a.(traits.MutableLister); !ok1 || !ok2 || (mutable && inPlace) {
		return nil, false
	}
	items := make([]ref.Val, 0, int(la.Size().(types.Int))+int(lb.Size().(types.Int)))
	for _, l := range []traits.Lister{la, lb} {
		for it := l.Iterator(); it.HasNext() == types.True; {
			items = append(items, it.Next())
		}
	}
	return types.NewRefValList(types.DefaultTypeAdapter, items), true
}

// formatWork: the arguments printed, and the digits a precision asks
// for ('%.999999f' prints a million).
func formatWork(args []ref.Val, limit int64) int64 {
	var n int64
	for _, a := range args {
		if n > limit {
			break
		}
		n = add(n, printed.walk(a, level{weight: 1}, limit-n))
	}
	format, ok := args[0].(types.String)
	if !ok {
		return n
	}
	for rest := string(format); ; {
		i := strings.Index(rest, "%.")
		if i < 0 {
			return n
		}
		rest = rest[i+2:]
		digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
		// No digits, or more than an int64 holds: cel-go refuses the
		// clause itself.
		if precision, err := strconv.ParseInt(rest[:digits], 10, 64); err == nil {
			n = add(n, precision)
		}
	}
}

// printed is what format prints of a value: a double as up to 330
// characters ('%s' of 1e308 is 309 digits; a double counted 1 let a list
// of them print a gigabyte), and a map's values once for every map above
// them (each level is printed into a string of its own, then copied into
// its parent's: 100 levels above a 2 MiB string printed 400 MiB).
var printed = measure{container: containerWork, double: 330, mapLevels: true}

// flattenWork: flatten(n) copies the items of each of the n levels it
// flattens into the level above, so an item n lists deep is copied n times.
func flattenWork(args []ref.Val, limit int64) int64 {
	depth := int64(1)
	if len(args) == 2 {
		if d, ok := args[1].(types.Int); ok && d > 1 {
			depth = int64(d)
		}
	}
	return measure{container: containerWork, listLevels: depth}.walk(args[0], level{weight: 1}, limit)
}

// searchWork: cel-go's indexOf and lastIndexOf compare the substring at
// every position, character by character.
func searchWork(args []ref.Val, limit int64) int64 {
	s, ok1 := args[0].(types.String)
	sub, ok2 := args[1].(types.String)
	if !ok1 || !ok2 {
		return argsWork(args, limit)
	}
	return add(int64(len(s)), mul(int64(len(s)), int64(len(sub)))/8)
}

// maxRegexInstructions bounds the program of a regular expression (Go's
// RE2: a Kubernetes name pattern is about 30). Its matching time is the
// string's length times the program's, and a program of a million
// instructions takes hundreds of megabytes to compile.
const maxRegexInstructions = 5000

// maxPatternBytes bounds the text of a regular expression: parsing
// \pL appends thousands of ranges before any limit of Go's applies.
const maxPatternBytes = 1024

// regexSizes holds the program sizes of patterns compileRegex accepted:
// patterns are constants, so the runtime charge (workCost), which does not
// see the call, looks them up instead of parsing them at every call. Every
// admission compiles, so it holds at most maxRegexSizes patterns; the
// charge for another is the most a pattern may have.
var regexSizes = struct {
	sync.RWMutex
	sizes map[string]int64
}{sizes: map[string]int64{}}

const maxRegexSizes = 10_000

func rememberRegexSize(pattern string, size int64) {
	regexSizes.Lock()
	defer regexSizes.Unlock()
	if len(regexSizes.sizes) < maxRegexSizes {
		regexSizes.sizes[pattern] = size
	}
}

// matchesWork: matching steps through the program at every byte.
func matchesWork(args []ref.Val, _ int64) int64 {
	s, ok1 := args[0].(types.String)
	pattern, ok2 := args[1].(types.String)
	if !ok1 || !ok2 {
		return 1
	}
	regexSizes.RLock()
	size, ok := regexSizes.sizes[string(pattern)]
	regexSizes.RUnlock()
	if !ok {
		size = maxRegexInstructions
	}
	return matchWork(int64(len(s)), size)
}

func matchWork(length, program int64) int64 {
	if program > maxRegexInstructions {
		return math.MaxInt64
	}
	return add(length, mul(length, program)/4)
}

// maxFoldedRunes bounds the runes case folding walks in a pattern's
// classes. Under (?i), Go's parser folds each rune of a class range, and
// each rune of a named class, one at a time, before any limit of its own
// applies: a range of 125,000 runes takes about 2 ms, 169 of them in a
// 1 KB pattern 0.35 s, parsed twice. The bound passes two of the largest
// named classes (\pL).
const maxFoldedRunes = 300_000

// foldWindow is where runes have other cases (regexp/syntax's minFold and
// maxFold): a range that covers it whole, or lies outside, is not walked.
const foldLow, foldHigh = 0x41, 0x1e943

// namedClassRunes stands for a \p class under (?i): the letters are about
// 130,000 runes of the fold window, no class is more.
const namedClassRunes = 130_000

var caseFolded = regexp.MustCompile(`\(\?[a-zA-Z-]*i[a-zA-Z-]*[:)]`)

// foldedRunes counts, when the pattern turns case folding on anywhere, the
// runes folding walks in its classes: ranges and named classes, wherever
// they are (an upper bound).
func foldedRunes(pattern string) int64 {
	if !caseFolded.MatchString(pattern) {
		return 0
	}
	rs := []rune(pattern)
	var n int64
	inClass, first := false, false
	// single reads the rune at rs[*i] (an escape too), moving *i past it;
	// ok is false for what is not one rune (a class escape).
	single := func(i *int) (r rune, ok bool) {
		if rs[*i] != '\\' {
			r = rs[*i]
			*i++
			return r, true
		}
		if *i+1 >= len(rs) {
			*i++
			return 0, false
		}
		c := rs[*i+1]
		*i += 2
		switch {
		case c == 'p' || c == 'P':
			n += namedClassRunes
			if *i < len(rs) && rs[*i] == '{' {
				for *i < len(rs) && rs[*i] != '}' {
					*i++
				}
				*i++
			} else {
				*i++
			}
			return 0, false
		case c == 'x':
			end := *i + 2
			if *i < len(rs) && rs[*i] == '{' {
				end = *i + 1
				for end < len(rs) && rs[end] != '}' {
					end++
				}
				v, err := strconv.ParseUint(string(rs[min(*i+1, end):end]), 16, 32)
				*i = end + 1
				return rune(v), err == nil
			}
			end = min(end, len(rs))
			v, err := strconv.ParseUint(string(rs[*i:end]), 16, 32)
			*i = end
			return rune(v), err == nil
		case c >= '0' && c <= '7':
			end := *i
			for end < len(rs) && end < *i+2 && rs[end] >= '0' && rs[end] <= '7' {
				end++
			}
			v, _ := strconv.ParseUint(string(rs[*i-1:end]), 8, 32)
			*i = end
			return rune(v), true
		case strings.ContainsRune("afnrtv", c):
			return map[rune]rune{'a': '\a', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t', 'v': '\v'}[c], true
		case unicode.IsLetter(c):
			return 0, false // \d, \w, \s, …: ASCII classes
		default:
			return c, true // an escaped punctuation mark
		}
	}
	for i := 0; i < len(rs); {
		switch {
		case !inClass && rs[i] == '[':
			inClass = true
			i++
			if i < len(rs) && rs[i] == '^' {
				i++
			}
			first = true // a ] first is a literal, maybe a range's start
		case inClass && rs[i] == ']' && !first:
			inClass = false
			i++
		case inClass && posixClassAt(rs[i:]) > 0:
			// [:alpha:]: ASCII.
			i += posixClassAt(rs[i:])
		case inClass:
			first = false
			lo, ok := single(&i)
			if !ok || i+1 >= len(rs) || rs[i] != '-' || rs[i+1] == ']' {
				continue
			}
			i++
			hi, ok := single(&i)
			if !ok || (lo <= foldLow && hi >= foldHigh) {
				continue
			}
			if lo, hi := max(lo, foldLow), min(hi, foldHigh); hi >= lo {
				n += int64(hi - lo + 1)
			}
		default:
			single(&i)
		}
	}
	return n
}

// posixClassAt is the length of the POSIX class [:name:] that rs starts
// with, as regexp/syntax reads one (up to the first :] anywhere after), or
// 0 when Go reads a literal [ there.
func posixClassAt(rs []rune) int {
	if len(rs) < 2 || rs[0] != '[' || rs[1] != ':' {
		return 0
	}
	end := strings.Index(string(rs[2:]), ":]")
	if end < 0 {
		return 0
	}
	name := string(rs[2:])[:end]
	name = strings.TrimPrefix(name, "^")
	switch name {
	case "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper", "word", "xdigit":
		return 2 + len([]rune(string(rs[2:])[:end])) + 2
	}
	return 0 // Go refuses the pattern
}

// regexSize estimates the instructions of a regular expression's program
// from its syntax, without compiling it: a repeat copies what it repeats.
func regexSize(pattern string) (int64, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return 0, err
	}
	return syntaxSize(re), nil
}

func syntaxSize(re *syntax.Regexp) int64 {
	var n int64 = 1
	for _, sub := range re.Sub {
		n = add(n, syntaxSize(sub))
	}
	switch re.Op {
	case syntax.OpLiteral:
		n = add(n, int64(len(re.Rune)))
	case syntax.OpRepeat:
		copies := int64(max(re.Max, re.Min, 1))
		n = add(mul(n, copies), 1)
	}
	return n
}

// joinWork: the joined string, separators included.
func joinWork(args []ref.Val, limit int64) int64 {
	n := sizeOf(args[0], limit)
	if len(args) > 1 {
		if l, ok := args[0].(traits.Lister); ok {
			n = add(n, mul(int64(l.Size().(types.Int)), sizeOf(args[1], limit)))
		}
	}
	return n
}

// quoteWork: an escape can be six times the byte it stands for.
func quoteWork(args []ref.Val, limit int64) int64 {
	return mul(argsWork(args, limit), 6)
}

// encodeWork: base64 makes four bytes of three.
func encodeWork(args []ref.Val, limit int64) int64 {
	return mul(argsWork(args, limit), 2)
}

// replaceWork: the string made, each replacement counted. An empty old
// string matches between every character.
func replaceWork(args []ref.Val, limit int64) int64 {
	s, ok1 := args[0].(types.String)
	old, ok2 := args[1].(types.String)
	repl, ok3 := args[2].(types.String)
	if !ok1 || !ok2 || !ok3 {
		return argsWork(args, limit)
	}
	count := int64(utf8.RuneCountInString(string(s))) + 1
	if old != "" {
		count = int64(strings.Count(string(s), string(old)))
	}
	if len(args) > 3 {
		if n, ok := args[3].(types.Int); ok && n >= 0 {
			count = min(count, int64(n))
		}
	}
	return add(int64(len(s)), mul(count, int64(len(repl))))
}

// splitWork: the string read, and a value for each part made (a part
// per character when the separator is empty) or allocated.
func splitWork(args []ref.Val, limit int64) int64 {
	s, ok1 := args[0].(types.String)
	sep, ok2 := args[1].(types.String)
	if !ok1 || !ok2 {
		return argsWork(args, limit)
	}
	parts := int64(utf8.RuneCountInString(string(s)))
	if sep != "" {
		parts = int64(strings.Count(string(s), string(sep))) + 1
	}
	if len(args) > 2 {
		// Go's SplitN allocates its limit (up to a part per byte) first.
		if n, ok := args[2].(types.Int); ok && n >= 0 {
			parts = min(int64(n), int64(len(s))+1)
		}
	}
	return add(int64(len(s)), mul(parts, 16))
}

// rangeWork: lists.range(n) makes n values.
func rangeWork(args []ref.Val, _ int64) int64 {
	if n, ok := args[0].(types.Int); ok && n > 0 {
		return mul(int64(n), 8)
	}
	return 1
}

// distinctWork: distinct compares each item with those kept before it.
func distinctWork(args []ref.Val, limit int64) int64 {
	l, ok := args[0].(traits.Lister)
	if !ok {
		return 1
	}
	n := sizeOf(l, limit)
	if n > limit {
		return n
	}
	return mul(int64(l.Size().(types.Int)), n) / 2
}

// sortWork: n log n comparisons of items.
func sortWork(args []ref.Val, limit int64) int64 {
	return sortedWork(args[0], args[0], limit)
}

// sortByWork: sortBy compares the keys (the second argument), not the
// items it reorders.
func sortByWork(args []ref.Val, limit int64) int64 {
	if len(args) != 2 {
		return argsWork(args, limit)
	}
	return add(sizeOf(args[0], limit), sortedWork(args[0], args[1], limit))
}

// sortedWork: n log n comparisons of the items of compared, n the length
// of list.
func sortedWork(list, compared ref.Val, limit int64) int64 {
	n := sizeOf(compared, limit)
	l, ok := list.(traits.Lister)
	if !ok {
		return n
	}
	return mul(n, int64(bits.Len64(uint64(l.Size().(types.Int)))))
}

// setsWork: each item of one list is looked for in the other by
// comparison; the cheaper direction bounds what the call does.
func setsWork(args []ref.Val, limit int64) int64 {
	a, ok1 := args[0].(traits.Lister)
	b, ok2 := args[1].(traits.Lister)
	if !ok1 || !ok2 {
		return argsWork(args, limit)
	}
	lenA, lenB := int64(a.Size().(types.Int)), int64(b.Size().(types.Int))
	if lenA == 0 || lenB == 0 {
		return 1
	}
	// What was measured is charged too, when the product is smaller.
	sizeA, sizeB := sizeOf(a, limit), sizeOf(b, limit)
	return max(min(mul(lenB, sizeA), mul(lenA, sizeB)), add(sizeA, sizeB))
}

// setsEquivalentWork: contains both ways.
func setsEquivalentWork(args []ref.Val, limit int64) int64 {
	return mul(setsWork(args, limit), 2)
}

func add(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func mul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// callGuard is a decorator: it wraps the calls of workOf's functions in
// guardedCall. cel-go offers no hook before a call runs, and some of them
// are not bindings one could declare again (==, !=, in, sort are planned
// as operators or bound once for all overloads), so the wrapper calls the
// implementation the planner would.
type callGuard struct {
	// impls holds the bindings by overload ID and by function name (a
	// function's dynamic dispatch or its single binding), where the planner
	// looks for them.
	impls map[string]*functions.Overload
}

func newCallGuard(env *cel.Env) (*callGuard, error) {
	g := &callGuard{impls: map[string]*functions.Overload{}}
	for name, decl := range env.Functions() {
		if _, ok := workOf[name]; !ok {
			continue
		}
		bindings, err := decl.Bindings()
		if err != nil {
			return nil, err
		}
		for _, b := range bindings {
			g.impls[b.Operator] = b
		}
	}
	return g, nil
}

func (g *callGuard) decorate(i interpreter.Interpretable) (interpreter.Interpretable, error) {
	call, ok := i.(interpreter.InterpretableCall)
	if !ok || len(call.Args()) == 0 {
		return i, nil
	}
	work, ok := workOf[call.Function()]
	if !ok {
		return i, nil
	}
	guarded := &guardedCall{InterpretableCall: call, work: work}
	switch call.Function() {
	case operators.Add:
		guarded.growsInPlace = readsHiddenResult(call.Args()[0])
	case operators.Equals, operators.NotEquals:
		return guarded, nil
	case "matches":
		if err := guarded.compileRegex(); err != nil {
			return nil, err
		}
	}
	if guarded.impl = g.impls[call.OverloadID()]; guarded.impl == nil {
		guarded.impl = g.impls[call.Function()]
	}
	if guarded.impl == nil {
		// Unguarded, it could run away: refuse the expression instead.
		return nil, fmt.Errorf("no implementation of %s to guard", call.Function())
	}
	return guarded, nil
}

// guardedCall evaluates a call as cel-go does, once its work is measured.
type guardedCall struct {
	interpreter.InterpretableCall
	work func([]ref.Val, int64) int64
	// impl is nil for == and !=.
	impl *functions.Overload
	// regex is the constant pattern of matches, compiled once.
	regex *regexp.Regexp
	// growsInPlace: a + whose left side is a macro's hidden result, the
	// one list that may grow in place (concatenation).
	growsInPlace bool
}

// readsHiddenResult reports whether i reads the hidden result variable of
// the macros (map, filter, …), which no expression can name.
func readsHiddenResult(i interpreter.Interpretable) bool {
	a, ok := i.(interpreter.InterpretableAttribute)
	if !ok {
		return false
	}
	ns, ok := a.Attr().(interpreter.NamespacedAttribute)
	return ok && slices.Equal(ns.CandidateVariableNames(), []string{parser.HiddenAccumulatorName})
}

// compileRegex compiles the constant pattern of a call of matches, when it
// is not too large: a Profile with one is refused at admission. (The
// program does not let cel-go compile constant patterns itself: it would
// compile any size, and replace this call.)
func (c *guardedCall) compileRegex() error {
	args := c.Args()
	if len(args) != 2 {
		return nil
	}
	// A pattern made at evaluation would be parsed, at a cost nothing
	// bounds, at every call.
	constant, ok := args[1].(interpreter.InterpretableConst)
	if !ok {
		return errors.New("matches takes a constant pattern (a string literal)")
	}
	pattern, ok := constant.Value().(types.String)
	if !ok {
		return nil // cel-go refuses the call
	}
	if len(pattern) > maxPatternBytes {
		return fmt.Errorf("the regular expression is too long: %d bytes, at most %d", len(pattern), maxPatternBytes)
	}
	if n := foldedRunes(string(pattern)); n > maxFoldedRunes {
		return fmt.Errorf("the regular expression folds the case of too many characters: about %d in its classes under (?i), at most %d", n, maxFoldedRunes)
	}
	size, err := regexSize(string(pattern))
	if err == nil && size > maxRegexInstructions {
		err = fmt.Errorf("the regular expression is too large: about %d instructions, at most %d", size, maxRegexInstructions)
	}
	if err == nil {
		c.regex, err = regexp.Compile(string(pattern))
	}
	if err != nil {
		return err
	}
	rememberRegexSize(string(pattern), size)
	c.work = func(args []ref.Val, _ int64) int64 {
		s, _ := args[0].(types.String)
		return matchWork(int64(len(s)), size)
	}
	return nil
}

// workError refuses a call for its work.
type workError struct{ function string }

func (e workError) Error() string {
	return fmt.Sprintf("%s would walk or make more than %d MiB (a value used several times counts each time)", e.function, MaxCallWork>>20)
}

// refused tells whether a call's result is a workError.
func refused(result ref.Val) bool {
	e, ok := result.(*types.Err)
	var we workError
	return ok && errors.As(e.Unwrap(), &we)
}

func (c *guardedCall) Eval(act interpreter.Activation) ref.Val {
	args := c.Args()
	vals := make([]ref.Val, len(args))
	for i, arg := range args {
		vals[i] = arg.Eval(act)
		// As cel-go: a call of one or two arguments evaluates both before
		// it looks for an error, one of more stops at the first.
		if len(args) > 2 && types.IsUnknownOrError(vals[i]) {
			return vals[i]
		}
	}
	for _, v := range vals {
		if types.IsUnknownOrError(v) {
			return v
		}
	}
	if c.work(vals, MaxCallWork) > MaxCallWork {
		return types.LabelErrNode(c.ID(), types.WrapErr(workError{function: c.Function()}))
	}
	return types.LabelErrNode(c.ID(), c.invoke(vals))
}

func (c *guardedCall) invoke(args []ref.Val) ref.Val {
	if c.regex != nil {
		s, ok := args[0].(types.String)
		if !ok {
			return types.MaybeNoSuchOverloadErr(args[0])
		}
		return types.Bool(c.regex.MatchString(string(s)))
	}
	if c.impl == nil {
		equal := types.Equal(args[0], args[1])
		if c.Function() == operators.NotEquals {
			return types.Bool(equal != types.True)
		}
		return equal
	}
	if c.Function() == operators.Add {
		if joined, ok := concatenation(args[0], args[1], c.growsInPlace); ok {
			return joined
		}
	}
	if c.impl.OperandTrait == 0 || args[0].Type().HasTrait(c.impl.OperandTrait) {
		switch {
		case len(args) == 1 && c.impl.Unary != nil:
			return c.impl.Unary(args[0])
		case len(args) == 2 && c.impl.Binary != nil:
			return c.impl.Binary(args[0], args[1])
		case c.impl.Function != nil:
			return c.impl.Function(args...)
		}
	}
	if args[0].Type().HasTrait(traits.ReceiverType) {
		return args[0].(traits.Receiver).Receive(c.Function(), c.OverloadID(), args[1:])
	}
	return types.NewErrWithNodeID(c.ID(), "no such overload: %s", c.Function())
}

// workCost charges guarded calls their work at runtime.
type workCost struct{}

var _ interpreter.ActualCostEstimator = workCost{}

func (workCost) CallCost(function, _ string, args []ref.Val, result ref.Val) *uint64 {
	work, ok := workOf[function]
	if !ok || len(args) == 0 {
		return nil
	}
	// A refused call is charged as the most a call may do, and a call that
	// failed as it would have been: an expression that hides the error
	// (x || true) must not be free to try again.
	w := int64(MaxCallWork)
	if !refused(result) {
		w = min(work(args, MaxCallWork), MaxCallWork)
	}
	cost := uint64(w/10) + 1
	if function == "matches" && len(args) == 2 {
		// Never less than cel-go charges: the string times the pattern.
		cost = max(cost, uint64(math.Ceil(float64(sizeOf(args[0], MaxCallWork))*0.1)*math.Ceil(float64(sizeOf(args[1], MaxCallWork))*0.25)))
	}
	return &cost
}
