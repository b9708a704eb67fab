package source

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"kollect.dev/kollect/pkg/controllers/extract"
)

// Shape is what an informer keeps: the namespace it lists ("" for all),
// which noisy metadata survives, and which fields of objects
// (ProfileFields; "" for all).
type Shape struct {
	Namespace         string
	KeepManagedFields bool
	KeepLastApplied   bool
	Fields            string
}

// Combine is the smallest shape that serves every user: one namespace only
// when all agree on it, and any metadata or field one of them needs.
func Combine[K comparable](needs map[K]Shape) Shape {
	var out Shape
	first := true
	for _, n := range needs {
		if first {
			out.Namespace, out.Fields, first = n.Namespace, n.Fields, false
		} else {
			if out.Namespace != n.Namespace {
				out.Namespace = ""
			}
			out.Fields = unionFields(out.Fields, n.Fields)
		}
		out.KeepManagedFields = out.KeepManagedFields || n.KeepManagedFields
		out.KeepLastApplied = out.KeepLastApplied || n.KeepLastApplied
	}
	return out
}

// decoder turns an API server's JSON into Objects of one shape. What it
// keeps is what the dynamic client's decoding, the metadata transform
// (managedFields and the last-applied annotation dropped unless kept) and
// the trim to the shape's fields would leave, duplicate member names
// included (the last one wins, as in encoding/json).
type decoder struct {
	shape Shape
	tree  fieldTree // nil: the whole object
	// buf is reused for the JSON being built; each Object gets a copy.
	buf []byte
}

func newDecoder(shape Shape) *decoder {
	return &decoder{shape: shape, tree: newFieldTree(shape.Fields)}
}

// object decodes the object whose span is sp. A list item that names
// neither its apiVersion nor its kind gets the list's, as the dynamic
// client's list decoding gives them (fromList); bookmarks keep their
// annotations.
func (d *decoder) object(data []byte, sp span, fromList bool, listAPIVersion, listKind string, bookmark bool) (*Object, error) {
	s := &scanner{data: data[:sp.end], pos: sp.start}
	if err := s.open('{'); err != nil {
		return nil, err
	}
	var apiVersion, kind string
	var m meta
	out := append(d.buf[:0], '{')
	written := 0
	for first := true; ; first = false {
		key, more, err := s.member(first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		sub, kept := d.tree.lookup(data, key)
		if keyIs(data, key, "metadata") {
			// Read whole, kept or not: matching needs it.
			m = meta{}
			if len(sub) == 0 {
				sub = nil // a leaf keeps the whole metadata
			}
			if out, err = d.metadata(s, &m, sub, kept, bookmark, out, &written); err != nil {
				return nil, err
			}
			continue
		}
		s.space()
		start := s.pos
		if kept && len(sub) > 0 && s.data[start] == '{' {
			out = member(out, data, key, &written)
			if out, err = trim(s, sub, out); err != nil {
				return nil, err
			}
		} else {
			if err := s.skip(); err != nil {
				return nil, err
			}
			if kept {
				out = append(member(out, data, key, &written), data[start:s.pos]...)
			}
		}
		switch {
		case keyIs(data, key, "apiVersion"):
			apiVersion, _ = text(data, span{start, s.pos})
		case keyIs(data, key, "kind"):
			kind, _ = text(data, span{start, s.pos})
		}
	}
	if fromList && apiVersion == "" && kind == "" {
		// Set after the object's own members: decoding keeps the last.
		apiVersion, kind = listAPIVersion, listKind
		out = appendString(member(out, []byte(`"apiVersion"`), span{0, 12}, &written), apiVersion)
		out = appendString(member(out, []byte(`"kind"`), span{0, 6}, &written), kind)
	}
	out = append(out, '}')
	d.buf = out
	return &Object{
		apiVersion:      unique.Make(apiVersion),
		kind:            unique.Make(kind),
		namespace:       unique.Make(m.namespace),
		name:            m.name,
		resourceVersion: m.resourceVersion,
		uid:             types.UID(m.uid),
		labels:          labelsOf(m.labels),
		annotations:     m.annotations,
		raw:             slices.Clone(out),
	}, nil
}

// Decode decodes one object, as a watch event carries it, in a shape.
func Decode(data []byte, shape Shape) (*Object, error) {
	return newDecoder(shape).object(data, span{0, len(data)}, false, "", "", false)
}

// member writes a member's name and colon, after a comma if it is not the
// first.
func member(out, data []byte, key span, written *int) []byte {
	if *written > 0 {
		out = append(out, ',')
	}
	*written++
	out = append(out, data[key.start:key.end]...)
	return append(out, ':')
}

func appendString(out []byte, s string) []byte {
	raw, _ := json.Marshal(s)
	return append(out, raw...)
}

// lookup is the subtree of a member name: kept is false when the tree
// drops it; a nil tree keeps everything.
func (t fieldTree) lookup(data []byte, key span) (sub fieldTree, kept bool) {
	if t == nil {
		return nil, true
	}
	raw := data[key.start+1 : key.end-1]
	sub, kept = t[string(raw)]
	if !kept && slices.Contains(raw, '\\') {
		name, _ := text(data, key)
		sub, kept = t[name]
	}
	return sub, kept
}

// trim copies the object at the scanner's position, keeping the members
// the tree names (non-object values whole, as the tree's leaves).
func trim(s *scanner, tree fieldTree, out []byte) ([]byte, error) {
	if err := s.open('{'); err != nil {
		return nil, err
	}
	out = append(out, '{')
	written := 0
	for first := true; ; first = false {
		key, more, err := s.member(first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		s.space()
		sub, kept := tree.lookup(s.data, key)
		switch {
		case !kept:
			err = s.skip()
		case len(sub) > 0 && s.data[s.pos] == '{':
			out = member(out, s.data, key, &written)
			out, err = trim(s, sub, out)
		default:
			start := s.pos
			if err = s.skip(); err == nil {
				out = append(member(out, s.data, key, &written), s.data[start:s.pos]...)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// meta is what the collector reads of an object's metadata, as the
// unstructured accessors read it: a value of the wrong type reads as
// empty, and labels with any value that is not a string as none.
type meta struct {
	name, namespace, uid, resourceVersion string
	labels, annotations                   map[string]string
}

// metadata reads the metadata at the scanner's position into m and, when
// kept, writes it as the transform and the tree leave it.
func (d *decoder) metadata(s *scanner, m *meta, tree fieldTree, kept, bookmark bool, out []byte, written *int) ([]byte, error) {
	data := s.data
	start, end, err := s.value()
	if err != nil {
		return nil, err
	}
	keyName := []byte(`"metadata"`)
	if data[start] != '{' {
		// Not an object: the transform leaves it, the tree keeps it whole.
		if kept {
			out = append(member(out, keyName, span{0, len(keyName)}, written), data[start:end]...)
		}
		return out, nil
	}
	members, err := membersOf(data, span{start, end})
	if err != nil {
		return nil, err
	}
	lastOf := map[string]int{}
	for i, mb := range members {
		name, _ := text(data, mb.key)
		lastOf[name] = i
		switch name {
		case "name":
			m.name, _ = text(data, mb.value)
		case "namespace":
			m.namespace, _ = text(data, mb.value)
		case "uid":
			m.uid, _ = text(data, mb.value)
		case "resourceVersion":
			m.resourceVersion, _ = text(data, mb.value)
		}
	}
	if i, ok := lastOf["labels"]; ok {
		m.labels = stringMap(data, members[i].value)
	}
	if i, ok := lastOf["annotations"]; ok && bookmark {
		m.annotations = stringMap(data, members[i].value)
	}
	if !kept {
		return out, nil
	}
	out = member(out, keyName, span{0, len(keyName)}, written)
	out = append(out, '{')
	n := 0
	for i, mb := range members {
		name, _ := text(data, mb.key)
		sub, keep := tree.lookup(data, mb.key)
		if !keep || name == "managedFields" && !d.shape.KeepManagedFields {
			continue
		}
		value := data[mb.value.start:mb.value.end]
		if name == "annotations" && !d.shape.KeepLastApplied && value[0] == '{' {
			if lastOf[name] != i {
				continue // an earlier duplicate: decoding would not keep it
			}
			if value, err = withoutLastApplied(value); err != nil {
				return nil, err
			}
			if value == nil {
				continue // nothing left: the transform drops the annotations
			}
		}
		out = member(out, data, mb.key, &n)
		if len(sub) > 0 && value[0] == '{' {
			if out, err = trim(&scanner{data: value}, sub, out); err != nil {
				return nil, err
			}
		} else {
			out = append(out, value...)
		}
	}
	return append(out, '}'), nil
}

// withoutLastApplied is an annotations object without the last-applied
// annotation, nil when none is left.
func withoutLastApplied(value []byte) ([]byte, error) {
	members, err := membersOf(value, span{0, len(value)})
	if err != nil {
		return nil, err
	}
	out := []byte{'{'}
	n := 0
	for _, mb := range members {
		if name, _ := text(value, mb.key); name == extract.LastAppliedAnnotation {
			continue
		}
		out = append(member(out, value, mb.key, &n), value[mb.value.start:mb.value.end]...)
	}
	if n == 0 {
		return nil, nil
	}
	return append(out, '}'), nil
}

type memberSpan struct{ key, value span }

// membersOf lists the members of the object at sp.
func membersOf(data []byte, sp span) ([]memberSpan, error) {
	members, _, err := scanMembers(&scanner{data: data[:sp.end], pos: sp.start})
	return members, err
}

// document lists the members of a document that is one object.
func document(data []byte) ([]memberSpan, error) {
	members, s, err := scanMembers(&scanner{data: data})
	if err == nil && s.peek() != 0 {
		err = s.fail("data after the object")
	}
	return members, err
}

func scanMembers(s *scanner) ([]memberSpan, *scanner, error) {
	if err := s.open('{'); err != nil {
		return nil, s, err
	}
	var out []memberSpan
	for first := true; ; first = false {
		key, more, err := s.member(first)
		if err != nil {
			return nil, s, err
		}
		if !more {
			return out, s, nil
		}
		start, end, err := s.value()
		if err != nil {
			return nil, s, err
		}
		out = append(out, memberSpan{key, span{start, end}})
	}
}

// stringMap reads an object of strings; nil when the value is not an
// object or holds anything but strings (unstructured.NestedStringMap).
func stringMap(data []byte, sp span) map[string]string {
	if data[sp.start] != '{' {
		return nil
	}
	members, err := membersOf(data, sp)
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(members))
	// The last value of each name decides, as in a decoded map.
	var notString map[string]bool
	for _, mb := range members {
		key, _ := text(data, mb.key)
		if value, ok := text(data, mb.value); ok {
			out[key] = value
			delete(notString, key)
			continue
		}
		if notString == nil {
			notString = map[string]bool{}
		}
		notString[key] = true
		delete(out, key)
	}
	if len(notString) > 0 {
		return nil
	}
	return out
}

// event decodes one watch event: {"type":...,"object":...}.
func (d *decoder) event(frame []byte) (watch.EventType, runtime.Object, error) {
	members, err := document(frame)
	if err != nil {
		return "", nil, err
	}
	var typ string
	var obj span
	for _, mb := range members {
		switch {
		case keyIs(frame, mb.key, "type"):
			typ, _ = text(frame, mb.value)
		case keyIs(frame, mb.key, "object"):
			obj = mb.value
		}
	}
	if obj.end == 0 {
		return "", nil, fmt.Errorf("watch event of type %q without an object", typ)
	}
	switch t := watch.EventType(typ); t {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
		o, err := d.object(frame, obj, false, "", "", t == watch.Bookmark)
		if err != nil {
			return "", nil, err
		}
		return t, o, nil
	case watch.Error:
		status := &metav1.Status{}
		if err := json.Unmarshal(frame[obj.start:obj.end], status); err != nil {
			return "", nil, err
		}
		return t, status, nil
	default:
		return "", nil, fmt.Errorf("got invalid watch event type: %q", typ)
	}
}

// List is a page of a list of Objects.
type List struct {
	metav1.ListMeta
	Items []*Object
}

func (l *List) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (l *List) DeepCopyObject() runtime.Object {
	c := *l
	c.ListMeta = *l.ListMeta.DeepCopy()
	c.Items = slices.Clone(l.Items)
	return &c
}

// list decodes a list response.
func (d *decoder) list(body []byte) (*List, error) {
	members, err := document(body)
	if err != nil {
		return nil, err
	}
	var apiVersion, kind string
	var items span
	out := &List{}
	for _, mb := range members {
		switch {
		case keyIs(body, mb.key, "apiVersion"):
			apiVersion, _ = text(body, mb.value)
		case keyIs(body, mb.key, "kind"):
			kind, _ = text(body, mb.value)
		case keyIs(body, mb.key, "metadata"):
			out.ListMeta = metav1.ListMeta{}
			if err := json.Unmarshal(body[mb.value.start:mb.value.end], &out.ListMeta); err != nil {
				return nil, fmt.Errorf("list metadata: %w", err)
			}
		case keyIs(body, mb.key, "items"):
			items = mb.value
		}
	}
	if items.end == 0 || body[items.start] == 'n' {
		return out, nil // no items, or null
	}
	kind = strings.TrimSuffix(kind, "List")
	is := &scanner{data: body[:items.end], pos: items.start}
	if err := is.open('['); err != nil {
		return nil, err
	}
	for first := true; ; first = false {
		more, err := is.element(first)
		if err != nil {
			return nil, err
		}
		if !more {
			return out, nil
		}
		start, end, err := is.value()
		if err != nil {
			return nil, err
		}
		o, err := d.object(body, span{start, end}, true, apiVersion, kind, false)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, o)
	}
}

// annotationsCopy is for tests: what a bookmark kept.
func (o *Object) annotationsCopy() map[string]string { return maps.Clone(o.annotations) }
