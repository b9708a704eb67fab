package itemstore

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// appendItem writes an item as the storage codec writes it in JSON: the
// v1alpha1 object as encoding/json marshals it (omitempty fields left out,
// strings and raw values HTML-escaped, raw values compacted), in one pass
// over the fields instead of a conversion and reflection. The tests hold
// it to the codec's output, decoded.
func appendItem(out []byte, kind string, meta *metav1.ObjectMeta, source *kollect.ItemSource, attributes map[string]kollect.Value, object *kollect.Value, selectable []string, hash string) ([]byte, error) {
	out = append(out, `{"kind":`...)
	out = appendString(out, kind)
	out = append(out, `,"apiVersion":`...)
	out = appendString(out, v1alpha1.SchemeGroupVersion.String())
	out = append(out, `,"metadata":{"name":`...)
	out = appendString(out, meta.Name) // never empty: validation requires it
	if meta.Namespace != "" {
		out = append(out, `,"namespace":`...)
		out = appendString(out, meta.Namespace)
	}
	if meta.UID != "" {
		out = append(out, `,"uid":`...)
		out = appendString(out, string(meta.UID))
	}
	if meta.Generation != 0 {
		out = append(out, `,"generation":`...)
		out = strconv.AppendInt(out, meta.Generation, 10)
	}
	// metav1.Time marshals null when zero; omitempty does not omit a struct.
	out = append(out, `,"creationTimestamp":`...)
	if meta.CreationTimestamp.IsZero() {
		out = append(out, "null"...)
	} else {
		out = append(out, '"')
		out = meta.CreationTimestamp.UTC().AppendFormat(out, time.RFC3339)
		out = append(out, '"')
	}
	if len(meta.Labels) > 0 {
		out = append(out, `,"labels":{`...)
		for i, k := range sortedKeys(meta.Labels) {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, k)
			out = append(out, ':')
			out = appendString(out, meta.Labels[k])
		}
		out = append(out, '}')
	}
	out = append(out, `},"source":{`...)
	if source.Cluster != "" {
		out = append(out, `"cluster":`...)
		out = appendString(out, source.Cluster)
		out = append(out, ',')
	}
	out = append(out, `"apiVersion":`...)
	out = appendString(out, source.APIVersion)
	out = append(out, `,"kind":`...)
	out = appendString(out, source.Kind)
	if source.Namespace != "" {
		out = append(out, `,"namespace":`...)
		out = appendString(out, source.Namespace)
	}
	out = append(out, `,"name":`...)
	out = appendString(out, source.Name)
	if source.UID != "" {
		out = append(out, `,"uid":`...)
		out = appendString(out, string(source.UID))
	}
	if source.ResourceVersion != "" {
		out = append(out, `,"resourceVersion":`...)
		out = appendString(out, source.ResourceVersion)
	}
	out = append(out, '}')
	if len(attributes) > 0 {
		out = append(out, `,"attributes":{`...)
		for i, k := range sortedKeys(attributes) {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, k)
			out = append(out, ':')
			var err error
			if out, err = appendValue(out, attributes[k]); err != nil {
				return nil, err
			}
		}
		out = append(out, '}')
	}
	if object != nil {
		out = append(out, `,"object":`...)
		var err error
		if out, err = appendValue(out, *object); err != nil {
			return nil, err
		}
	}
	if len(selectable) > 0 {
		out = append(out, `,"selectableAttributes":[`...)
		for i, name := range selectable {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendString(out, name)
		}
		out = append(out, ']')
	}
	if hash != "" {
		out = append(out, `,"hash":`...)
		out = appendString(out, hash)
	}
	return append(out, "}\n"...), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendValue writes a raw value as encoding/json writes what a Marshaler
// returns: compacted and HTML-escaped; empty is null.
func appendValue(out []byte, v kollect.Value) ([]byte, error) {
	if len(v.Raw) == 0 {
		return append(out, "null"...), nil
	}
	start := len(out)
	buf := bytes.NewBuffer(out)
	if err := json.Compact(buf, v.Raw); err != nil {
		return nil, err
	}
	out = buf.Bytes()
	if needsEscape(out[start:]) {
		var escaped bytes.Buffer
		json.HTMLEscape(&escaped, out[start:])
		out = append(out[:start], escaped.Bytes()...)
	}
	return out, nil
}

// appendString writes a JSON string as encoding/json does.
func appendString(out []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			raw, _ := json.Marshal(s)
			return append(out, raw...)
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"')
}

// needsEscape tells whether HTMLEscape would change b.
func needsEscape(b []byte) bool {
	return bytes.ContainsAny(b, "<>&") || bytes.Contains(b, []byte("\u2028")) || bytes.Contains(b, []byte("\u2029"))
}
