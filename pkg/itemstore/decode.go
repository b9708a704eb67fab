package itemstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/storage/value"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/jsonscan"
)

// decode reads what the collector needs of a stored value. In JSON (the
// storage encoding unless --storage-media-type says otherwise) only those
// fields are read, the attributes skipped; anything else is decoded whole
// with the storage codec.
func (s *Store) decode(ctx context.Context, key, stored []byte) (*record, error) {
	r, _, _, err := s.decodePlain(ctx, key, stored)
	return r, err
}

// decodePlain is decode that also gives the stored object's encoding
// before the transformer, and whether the transformer would store it
// differently now (a rotated key, say).
func (s *Store) decodePlain(ctx context.Context, key, stored []byte) (r *record, data []byte, stale bool, err error) {
	data, stale, err = s.transformer.TransformFromStorage(ctx, stored, value.DefaultContext(key))
	if err != nil {
		return nil, nil, false, apierrors.NewInternalError(fmt.Errorf("reading %s: %w", key, err))
	}
	if s.json {
		r, err = readJSON(data)
	} else {
		r, err = s.readObject(data)
	}
	if err != nil {
		return nil, nil, false, apierrors.NewInternalError(fmt.Errorf("decoding %s: %w", key, err))
	}
	return r, data, stale, nil
}

// readJSON reads a record of a v1alpha1 item in JSON, in one pass that
// skips the attributes. A field of the wrong type is an error, as it is to
// the registry's decoder.
func readJSON(data []byte) (*record, error) {
	r := &record{}
	err := members(jsonscan.New(data), func(s *jsonscan.Scanner, key jsonscan.Span) error {
		switch {
		case jsonscan.KeyIs(data, key, "metadata"):
			return members(s, r.metaField)
		case jsonscan.KeyIs(data, key, "source"):
			return members(s, r.sourceField)
		case jsonscan.KeyIs(data, key, "hash"):
			sp, err := s.Value()
			if err == nil {
				r.hash, err = str(data, sp)
			}
			return err
		}
		return s.Skip()
	})
	return r, err
}

// members calls field for every member of the object (or null) at the
// scanner's position; field reads or skips the member's value.
func members(s *jsonscan.Scanner, field func(s *jsonscan.Scanner, key jsonscan.Span) error) error {
	if s.Peek() == 'n' {
		_, err := s.Value()
		return err
	}
	if err := s.Open('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		key, more, err := s.Member(first)
		if err != nil || !more {
			return err
		}
		if err := field(s, key); err != nil {
			name, _ := jsonscan.Text(s.Bytes(), key)
			return fmt.Errorf("%s: %w", name, err)
		}
	}
}

func (r *record) metaField(s *jsonscan.Scanner, key jsonscan.Span) error {
	data := s.Bytes()
	name, _ := jsonscan.Text(data, key)
	switch name {
	case "name", "namespace", "uid", "generation", "creationTimestamp", "labels":
	default:
		return s.Skip()
	}
	sp, err := s.Value()
	if err != nil {
		return err
	}
	switch name {
	case "name":
		r.name, err = str(data, sp)
	case "namespace":
		r.namespace, err = str(data, sp)
	case "uid":
		var uid string
		uid, err = str(data, sp)
		r.uid = types.UID(uid)
	case "generation":
		r.generation, err = integer(data, sp)
	case "creationTimestamp":
		r.created, err = timestamp(data, sp)
	case "labels":
		r.labels = nil
		if data[sp.Start] != 'n' {
			if r.labels = jsonscan.StringMap(data, sp); r.labels == nil {
				err = fmt.Errorf("not a map of strings")
			}
		}
	}
	return err
}

func (r *record) sourceField(s *jsonscan.Scanner, key jsonscan.Span) error {
	data := s.Bytes()
	var field *string
	switch name, _ := jsonscan.Text(data, key); name {
	case "cluster":
		field = &r.source.Cluster
	case "apiVersion":
		field = &r.source.APIVersion
	case "kind":
		field = &r.source.Kind
	case "namespace":
		field = &r.source.Namespace
	case "name":
		field = &r.source.Name
	case "uid":
		field = (*string)(&r.source.UID)
	case "resourceVersion":
		field = &r.source.ResourceVersion
	default:
		return s.Skip()
	}
	sp, err := s.Value()
	if err == nil {
		*field, err = str(data, sp)
	}
	return err
}

// str reads a string; null is empty.
func str(data []byte, sp jsonscan.Span) (string, error) {
	if data[sp.Start] == 'n' {
		return "", nil
	}
	s, ok := jsonscan.Text(data, sp)
	if !ok {
		return "", fmt.Errorf("not a string")
	}
	return s, nil
}

func integer(data []byte, sp jsonscan.Span) (int64, error) {
	if data[sp.Start] == 'n' {
		return 0, nil
	}
	return strconv.ParseInt(string(data[sp.Start:sp.End]), 10, 64)
}

// timestamp reads a metav1.Time as its UnmarshalJSON does.
func timestamp(data []byte, sp jsonscan.Span) (metav1.Time, error) {
	s, err := str(data, sp)
	if err != nil || data[sp.Start] == 'n' {
		return metav1.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return metav1.Time{}, err
	}
	return metav1.NewTime(t.Local()), nil
}

// readObject decodes a value whole, with the storage codec.
func (s *Store) readObject(data []byte) (*record, error) {
	obj, err := runtime.Decode(s.codec, data)
	if err != nil {
		return nil, err
	}
	switch o := obj.(type) {
	case *kollect.InventoryItem:
		return recordOf(&o.ObjectMeta, o.Source, o.Hash), nil
	case *kollect.ClusterInventoryItem:
		return recordOf(&o.ObjectMeta, o.Source, o.Hash), nil
	case *v1alpha1.InventoryItem:
		return recordOf(&o.ObjectMeta, kollect.ItemSource(o.Source), o.Hash), nil
	case *v1alpha1.ClusterInventoryItem:
		return recordOf(&o.ObjectMeta, kollect.ItemSource(o.Source), o.Hash), nil
	}
	return nil, fmt.Errorf("a %T, not an item", obj)
}

func recordOf(m *metav1.ObjectMeta, source kollect.ItemSource, hash string) *record {
	return &record{name: m.Name, namespace: m.Namespace, uid: m.UID, created: m.CreationTimestamp, generation: m.Generation,
		labels: m.Labels, source: source, hash: hash}
}
