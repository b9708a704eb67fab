package expression

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"unsafe"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// orderedAdapter makes CEL iterate maps in key order. CEL leaves the order
// unspecified and cel-go follows Go's random map order, so object.map(k, k)
// would give another list at each evaluation, and the item's hash would
// change with nothing changed in the object. Every map of the object and
// every map literal passes through the adapter. Maps a comprehension builds
// (transformMap, transformMapEntry) do not: cel-go makes them without it,
// and docs/collection.md says so. Messages, which cel-go builds without it
// too, are rejected at compile time (noMessages).
type orderedAdapter struct {
	types.Adapter
	// keys holds the sorted keys of the object's maps for one evaluation,
	// so that a loop inside a loop sorts a map once, not once per outer
	// iteration. nil in the environment's adapter, which is shared.
	keys *sortedKeys
}

// sortedKeys maps a Go map to its keys, sorted. One evaluation uses it,
// from one goroutine.
type sortedKeys map[unsafe.Pointer][]string

func (c *sortedKeys) of(m map[string]any) []string {
	if c == nil {
		return slices.Sorted(maps.Keys(m))
	}
	p := reflect.ValueOf(m).UnsafePointer()
	keys, ok := (*c)[p]
	if !ok {
		if *c == nil {
			*c = sortedKeys{}
		}
		keys = slices.Sorted(maps.Keys(m))
		(*c)[p] = keys
	}
	return keys
}

// forEvaluation is an adapter for one evaluation, with its own key cache,
// made on the first map walked: most expressions walk none.
func forEvaluation() *orderedAdapter {
	return &orderedAdapter{Adapter: types.DefaultTypeAdapter, keys: new(sortedKeys)}
}

func (a *orderedAdapter) NativeToValue(value any) ref.Val {
	switch v := value.(type) {
	case map[string]any:
		return &orderedMap{Mapper: types.NewStringInterfaceMap(a, v), strings: v, keys: a.keys}
	case map[ref.Val]ref.Val:
		for k := range v {
			// CEL's own rule; a key of another type (a list, a double,
			// a timestamp given as dyn) has no order to sort by.
			switch k.(type) {
			case types.Bool, types.Int, types.Uint, types.String:
			default:
				return types.NewErr("unsupported map key type %s: CEL map keys are bool, int, uint or string", k.Type().TypeName())
			}
		}
		return &orderedMap{Mapper: types.NewRefValMap(a, v)}
	case []any:
		// The default adapter would convert the list's maps with itself.
		return &objectList{Lister: types.NewDynamicList(a, v), raw: v}
	}
	return a.Adapter.NativeToValue(value)
}

// orderedMap is a CEL map whose iterator yields its keys in order. It does
// not offer Fold, so two-variable comprehensions iterate it too. It is used
// by pointer, as cel-go's maps are: a value can be a map key (and is then
// refused with a clear error, not a panic on an unhashable type).
type orderedMap struct {
	traits.Mapper
	// strings is the Go map behind Mapper when its keys are strings, a
	// map of the object: sorted as they are, they sort several times
	// faster than boxed, and a result that is this map is JSON already.
	strings map[string]any
	keys    *sortedKeys
}

func (m *orderedMap) Iterator() traits.Iterator {
	if m.strings != nil {
		return &keyIterator[string]{keys: m.keys.of(m.strings), box: boxString}
	}
	var keys []ref.Val
	for it := m.Mapper.Iterator(); it.HasNext() == types.True; {
		keys = append(keys, it.Next())
	}
	slices.SortFunc(keys, compareKeys)
	return &keyIterator[ref.Val]{keys: keys, box: boxed}
}

// IsZeroValue keeps optional.ofNonZeroValue({}) empty: the embedded
// interface does not carry the method of the map it holds.
func (m *orderedMap) IsZeroValue() bool { return m.Size() == types.IntZero }

// String is what error messages print: cel-go's format, keys sorted.
func (m *orderedMap) String() string { return types.Format(m) }

// objectList is a list of the object. raw lets a result that is the
// object's own list skip conversion: it is JSON already.
type objectList struct {
	traits.Lister
	raw []any
}

// IsZeroValue keeps optional.ofNonZeroValue([]) empty, as for maps.
func (l *objectList) IsZeroValue() bool { return l.Size() == types.IntZero }

// Fold keeps two-variable comprehensions over the list on cel-go's fast
// path; a list has an order of its own.
func (l *objectList) Fold(f traits.Folder) { types.ToFoldableList(l.Lister).Fold(f) }

func (l *objectList) String() string { return types.Format(l) }

// compareKeys orders map keys, which NativeToValue limits to bool, int,
// uint and string, by type and then by value.
func compareKeys(a, b ref.Val) int {
	if c := cmp.Compare(a.Type().TypeName(), b.Type().TypeName()); c != 0 {
		return c
	}
	if c, ok := a.(traits.Comparer); ok {
		if n, ok := c.Compare(b).(types.Int); ok {
			return int(n)
		}
	}
	return cmp.Compare(fmt.Sprint(a.Value()), fmt.Sprint(b.Value()))
}

// keyIterator yields keys sorted up front, each made a CEL value by box
// when its turn comes: a loop that stops at its first key does not box
// them all.
type keyIterator[K any] struct {
	iteratorVal
	keys []K
	box  func(K) ref.Val
}

func (it *keyIterator[K]) HasNext() ref.Val { return types.Bool(len(it.keys) > 0) }

func (it *keyIterator[K]) Next() ref.Val {
	if len(it.keys) == 0 {
		return nil
	}
	k := it.keys[0]
	it.keys = it.keys[1:]
	return it.box(k)
}

func boxString(k string) ref.Val { return types.String(k) }

func boxed(k ref.Val) ref.Val { return k }

// iteratorVal is the ref.Val side of an iterator, which CEL never shows.
type iteratorVal struct{}

func (iteratorVal) ConvertToNative(reflect.Type) (any, error) {
	return nil, errors.New("an iterator has no native value")
}

func (iteratorVal) ConvertToType(ref.Type) ref.Val { return types.NoSuchOverloadErr() }

func (iteratorVal) Equal(ref.Val) ref.Val { return types.NoSuchOverloadErr() }

func (iteratorVal) Type() ref.Type { return types.IteratorType }

func (iteratorVal) Value() any { return nil }
