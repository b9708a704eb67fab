package expression

import (
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// maxDepth bounds the nesting of a value, converted from CEL or the
// object's own; objects stored by the API server are far shallower.
const maxDepth = 100

var errTooDeep = fmt.Errorf("the value is nested deeper than %d levels", maxDepth)

// toJSON converts a CEL result to a plain JSON value. An empty optional is
// not found.
func toJSON(v ref.Val) (any, bool, error) {
	if opt, ok := v.(*types.Optional); ok {
		if !opt.HasValue() {
			return nil, false, nil
		}
		v = opt.GetValue()
	}
	out, err := convert(v, 0)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

func convert(v ref.Val, depth int) (any, error) {
	if depth > maxDepth {
		return nil, errTooDeep
	}
	switch val := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(val), nil
	case types.Int:
		return int64(val), nil
	case types.Uint:
		return uint64(val), nil
	case types.Double:
		return convertDouble(float64(val))
	case types.String:
		return string(val), nil
	case types.Bytes:
		return base64.StdEncoding.EncodeToString(val), nil
	case types.Timestamp:
		return val.Time.UTC().Format(time.RFC3339Nano), nil
	case types.Duration:
		return val.Duration.String(), nil
	case *orderedMap:
		if val.strings != nil {
			return val.strings, nil // the object's own map
		}
		return convertMap(val, depth)
	case *objectList:
		return val.raw, nil // the object's own list
	case traits.Mapper:
		return convertMap(val, depth)
	case traits.Lister:
		return convertList(val, depth)
	case *types.Optional:
		if !val.HasValue() {
			return nil, nil
		}
		return convert(val.GetValue(), depth+1)
	case *types.Err:
		return nil, fmt.Errorf("CEL evaluation failed: %v", val)
	default:
		return nil, fmt.Errorf("the CEL result of type %s is not a JSON value", v.Type().TypeName())
	}
}

func convertDouble(f float64) (any, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, errors.New("the CEL result is NaN or infinite, which JSON cannot hold")
	}
	return f, nil
}

func convertList(l traits.Lister, depth int) (any, error) {
	out := []any{}
	for it := l.Iterator(); it.HasNext() == types.True; {
		item, err := convert(it.Next(), depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, item)
	}
	return out, nil
}

func convertMap(m traits.Mapper, depth int) (any, error) {
	if _, ok := m.(*orderedMap); !ok {
		// A map a comprehension built: walked in order too, so that the
		// error reported for it, when it holds several, is always the same.
		m = &orderedMap{Mapper: m}
	}
	out := map[string]any{}
	for it := m.Iterator(); it.HasNext() == types.True; {
		key := it.Next()
		name, ok := key.(types.String)
		if !ok {
			return nil, fmt.Errorf("the CEL result has a map key of type %s; JSON keys are strings", key.Type().TypeName())
		}
		value, err := convert(m.Get(key), depth+1)
		if err != nil {
			return nil, err
		}
		out[string(name)] = value
	}
	return out, nil
}
