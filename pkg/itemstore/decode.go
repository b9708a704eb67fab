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
	data, _, err := s.transformer.TransformFromStorage(ctx, stored, value.DefaultContext(key))
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("reading %s: %w", key, err))
	}
	var r *record
	if s.json {
		r, err = readJSON(data)
	} else {
		r, err = s.readObject(data)
	}
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("decoding %s: %w", key, err))
	}
	return r, nil
}

// readJSON reads a record of a v1alpha1 item in JSON. A field of the wrong
// type is an error, as it is to the registry's decoder.
func readJSON(data []byte) (*record, error) {
	members, err := jsonscan.Document(data)
	if err != nil {
		return nil, err
	}
	r := &record{}
	for _, mb := range members {
		switch {
		case jsonscan.KeyIs(data, mb.Key, "metadata"):
			err = r.readMeta(data, mb.Value)
		case jsonscan.KeyIs(data, mb.Key, "source"):
			err = r.readSource(data, mb.Value)
		case jsonscan.KeyIs(data, mb.Key, "hash"):
			r.hash, err = str(data, mb.Value)
		}
		if err != nil {
			return nil, err
		}
	}
	return r, nil
}

func (r *record) readMeta(data []byte, sp jsonscan.Span) error {
	members, err := object(data, sp)
	if err != nil {
		return err
	}
	for _, mb := range members {
		name, _ := jsonscan.Text(data, mb.Key)
		switch name {
		case "name":
			r.name, err = str(data, mb.Value)
		case "namespace":
			r.namespace, err = str(data, mb.Value)
		case "uid":
			var uid string
			uid, err = str(data, mb.Value)
			r.uid = types.UID(uid)
		case "generation":
			r.generation, err = integer(data, mb.Value)
		case "creationTimestamp":
			r.created, err = timestamp(data, mb.Value)
		case "labels":
			r.labels = nil
			if data[mb.Value.Start] != 'n' {
				if r.labels = jsonscan.StringMap(data, mb.Value); r.labels == nil {
					err = fmt.Errorf("metadata.labels is not a map of strings")
				}
			}
		}
		if err != nil {
			return fmt.Errorf("metadata.%s: %w", name, err)
		}
	}
	return nil
}

func (r *record) readSource(data []byte, sp jsonscan.Span) error {
	members, err := object(data, sp)
	if err != nil {
		return err
	}
	for _, mb := range members {
		name, _ := jsonscan.Text(data, mb.Key)
		var v string
		switch name {
		case "apiVersion", "kind", "namespace", "name", "uid", "resourceVersion":
			if v, err = str(data, mb.Value); err != nil {
				return fmt.Errorf("source.%s: %w", name, err)
			}
		}
		switch name {
		case "apiVersion":
			r.source.APIVersion = v
		case "kind":
			r.source.Kind = v
		case "namespace":
			r.source.Namespace = v
		case "name":
			r.source.Name = v
		case "uid":
			r.source.UID = types.UID(v)
		case "resourceVersion":
			r.source.ResourceVersion = v
		}
	}
	return nil
}

// object lists an object's members; null has none.
func object(data []byte, sp jsonscan.Span) ([]jsonscan.Member, error) {
	switch data[sp.Start] {
	case 'n':
		return nil, nil
	case '{':
		return jsonscan.Members(data, sp)
	}
	return nil, fmt.Errorf("not an object")
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
