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
	"kollect.dev/kollect/pkg/jsonscan"
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
func (d *decoder) object(data []byte, sp jsonscan.Span, fromList bool, listAPIVersion, listKind string, bookmark bool) (*Object, error) {
	s := jsonscan.At(data, sp)
	if err := s.Open('{'); err != nil {
		return nil, err
	}
	var apiVersion, kind string
	// The last apiVersion and kind members: kept apart, and left out of the
	// JSON when they are strings (the usual case): Decode puts them back
	// from the source, which holds them anyway.
	var apiVersionMember, kindMember *jsonscan.Member
	var m meta
	out := append(d.buf[:0], '{')
	written := 0
	for first := true; ; first = false {
		key, more, err := s.Member(first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		sub, kept := d.tree.lookup(data, key)
		if jsonscan.KeyIs(data, key, "metadata") {
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
		s.Space()
		start := s.Pos()
		switch {
		case jsonscan.KeyIs(data, key, "apiVersion"), jsonscan.KeyIs(data, key, "kind"):
			// Always kept (alwaysKept).
			value, err := s.Value()
			if err != nil {
				return nil, err
			}
			text, _ := jsonscan.Text(data, value)
			if jsonscan.KeyIs(data, key, "kind") {
				kind, kindMember = text, &jsonscan.Member{Key: key, Value: value}
			} else {
				apiVersion, apiVersionMember = text, &jsonscan.Member{Key: key, Value: value}
			}
		case kept && len(sub) > 0 && s.Bytes()[start] == '{':
			out = member(out, data, key, &written)
			if out, err = trim(s, sub, out); err != nil {
				return nil, err
			}
		default:
			if err := s.Skip(); err != nil {
				return nil, err
			}
			if kept {
				out = append(member(out, data, key, &written), data[start:s.Pos()]...)
			}
		}
	}
	typed := true
	switch {
	case fromList && apiVersion == "" && kind == "":
		// The list's, as the dynamic client sets them.
		apiVersion, kind = listAPIVersion, listKind
	case isString(data, apiVersionMember) && isString(data, kindMember):
	default:
		typed = false
		for _, mb := range []*jsonscan.Member{apiVersionMember, kindMember} {
			if mb != nil {
				out = append(member(out, data, mb.Key, &written), data[mb.Value.Start:mb.Value.End]...)
			}
		}
	}
	out = append(out, '}')
	d.buf = out
	return &Object{
		apiVersion:      unique.Make(apiVersion),
		kind:            unique.Make(kind),
		typed:           typed,
		namespace:       unique.Make(m.namespace),
		name:            m.name,
		resourceVersion: m.resourceVersion,
		uid:             types.UID(m.uid),
		labels:          labelsOf(m.labels),
		annotations:     m.annotations,
		raw:             string(out),
	}, nil
}

func isString(data []byte, mb *jsonscan.Member) bool {
	return mb != nil && data[mb.Value.Start] == '"'
}

// Decode decodes one object, as a watch event carries it, in a shape.
func Decode(data []byte, shape Shape) (*Object, error) {
	return newDecoder(shape).object(data, jsonscan.Span{Start: 0, End: len(data)}, false, "", "", false)
}

// member writes a member's name and colon, after a comma if it is not the
// first.
func member(out, data []byte, key jsonscan.Span, written *int) []byte {
	if *written > 0 {
		out = append(out, ',')
	}
	*written++
	out = append(out, data[key.Start:key.End]...)
	return append(out, ':')
}

// lookup is the subtree of a member name: kept is false when the tree
// drops it; a nil tree keeps everything.
func (t fieldTree) lookup(data []byte, key jsonscan.Span) (sub fieldTree, kept bool) {
	if t == nil {
		return nil, true
	}
	raw := data[key.Start+1 : key.End-1]
	sub, kept = t[string(raw)]
	if !kept && slices.Contains(raw, '\\') {
		name, _ := jsonscan.Text(data, key)
		sub, kept = t[name]
	}
	return sub, kept
}

// trim copies the object at the scanner's position, keeping the members
// the tree names (non-object values whole, as the tree's leaves).
func trim(s *jsonscan.Scanner, tree fieldTree, out []byte) ([]byte, error) {
	if err := s.Open('{'); err != nil {
		return nil, err
	}
	out = append(out, '{')
	written := 0
	for first := true; ; first = false {
		key, more, err := s.Member(first)
		if err != nil {
			return nil, err
		}
		if !more {
			break
		}
		s.Space()
		sub, kept := tree.lookup(s.Bytes(), key)
		switch {
		case !kept:
			err = s.Skip()
		case len(sub) > 0 && s.Bytes()[s.Pos()] == '{':
			out = member(out, s.Bytes(), key, &written)
			out, err = trim(s, sub, out)
		default:
			start := s.Pos()
			if err = s.Skip(); err == nil {
				out = append(member(out, s.Bytes(), key, &written), s.Bytes()[start:s.Pos()]...)
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
func (d *decoder) metadata(s *jsonscan.Scanner, m *meta, tree fieldTree, kept, bookmark bool, out []byte, written *int) ([]byte, error) {
	data := s.Bytes()
	sp, err := s.Value()
	if err != nil {
		return nil, err
	}
	start, end := sp.Start, sp.End
	keyName := []byte(`"metadata"`)
	if data[start] != '{' {
		// Not an object: the transform leaves it, the tree keeps it whole.
		if kept {
			out = append(member(out, keyName, jsonscan.Span{Start: 0, End: len(keyName)}, written), data[start:end]...)
		}
		return out, nil
	}
	members, err := jsonscan.Members(data, sp)
	if err != nil {
		return nil, err
	}
	lastOf := map[string]int{}
	for i, mb := range members {
		name, _ := jsonscan.Text(data, mb.Key)
		lastOf[name] = i
		switch name {
		case "name":
			m.name, _ = jsonscan.Text(data, mb.Value)
		case "namespace":
			m.namespace, _ = jsonscan.Text(data, mb.Value)
		case "uid":
			m.uid, _ = jsonscan.Text(data, mb.Value)
		case "resourceVersion":
			m.resourceVersion, _ = jsonscan.Text(data, mb.Value)
		}
	}
	if i, ok := lastOf["labels"]; ok {
		m.labels = jsonscan.StringMap(data, members[i].Value)
	}
	if i, ok := lastOf["annotations"]; ok && bookmark {
		m.annotations = jsonscan.StringMap(data, members[i].Value)
	}
	if !kept {
		return out, nil
	}
	out = member(out, keyName, jsonscan.Span{Start: 0, End: len(keyName)}, written)
	out = append(out, '{')
	n := 0
	for i, mb := range members {
		name, _ := jsonscan.Text(data, mb.Key)
		sub, keep := tree.lookup(data, mb.Key)
		if !keep || name == "managedFields" && !d.shape.KeepManagedFields {
			continue
		}
		value := data[mb.Value.Start:mb.Value.End]
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
		out = member(out, data, mb.Key, &n)
		if len(sub) > 0 && value[0] == '{' {
			if out, err = trim(jsonscan.New(value), sub, out); err != nil {
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
	members, err := jsonscan.Members(value, jsonscan.Span{Start: 0, End: len(value)})
	if err != nil {
		return nil, err
	}
	out := []byte{'{'}
	n := 0
	for _, mb := range members {
		if name, _ := jsonscan.Text(value, mb.Key); name == extract.LastAppliedAnnotation {
			continue
		}
		out = append(member(out, value, mb.Key, &n), value[mb.Value.Start:mb.Value.End]...)
	}
	if n == 0 {
		return nil, nil
	}
	return append(out, '}'), nil
}

// event decodes one watch event: {"type":...,"object":...}.
func (d *decoder) event(frame []byte) (watch.EventType, runtime.Object, error) {
	members, err := jsonscan.Document(frame)
	if err != nil {
		return "", nil, err
	}
	var typ string
	var obj jsonscan.Span
	for _, mb := range members {
		switch {
		case jsonscan.KeyIs(frame, mb.Key, "type"):
			typ, _ = jsonscan.Text(frame, mb.Value)
		case jsonscan.KeyIs(frame, mb.Key, "object"):
			obj = mb.Value
		}
	}
	if obj.End == 0 {
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
		if err := json.Unmarshal(frame[obj.Start:obj.End], status); err != nil {
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
	members, err := jsonscan.Document(body)
	if err != nil {
		return nil, err
	}
	var apiVersion, kind string
	var items jsonscan.Span
	out := &List{}
	for _, mb := range members {
		switch {
		case jsonscan.KeyIs(body, mb.Key, "apiVersion"):
			apiVersion, _ = jsonscan.Text(body, mb.Value)
		case jsonscan.KeyIs(body, mb.Key, "kind"):
			kind, _ = jsonscan.Text(body, mb.Value)
		case jsonscan.KeyIs(body, mb.Key, "metadata"):
			out.ListMeta = metav1.ListMeta{}
			if err := json.Unmarshal(body[mb.Value.Start:mb.Value.End], &out.ListMeta); err != nil {
				return nil, fmt.Errorf("list metadata: %w", err)
			}
		case jsonscan.KeyIs(body, mb.Key, "items"):
			items = mb.Value
		}
	}
	if items.End == 0 || body[items.Start] == 'n' {
		return out, nil // no items, or null
	}
	kind = strings.TrimSuffix(kind, "List")
	is := jsonscan.At(body, items)
	if err := is.Open('['); err != nil {
		return nil, err
	}
	for first := true; ; first = false {
		more, err := is.Element(first)
		if err != nil {
			return nil, err
		}
		if !more {
			return out, nil
		}
		sp, err := is.Value()
		if err != nil {
			return nil, err
		}
		o, err := d.object(body, sp, true, apiVersion, kind, false)
		if err != nil {
			return nil, err
		}
		out.Items = append(out.Items, o)
	}
}

// annotationsCopy is for tests: what a bookmark kept.
func (o *Object) annotationsCopy() map[string]string { return maps.Clone(o.annotations) }
