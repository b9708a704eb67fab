// Package itemstore is where the collector keeps items: the InventoryItems
// and ClusterInventoryItems only it writes, in the server's etcd, under the
// keys and in the encoding the registry reads them from.
//
// The registry serves items to users (get, list, watch, selectors, RBAC)
// and could write them too, at costs paid once per collected object that
// a write no user makes does not need: a request context, tracing, the
// strategy's preparation, and a decode of the object just encoded. Its
// etcd watch would also decode every item whole, and the collector
// compares only four fields. A Store writes an item with one etcd
// transaction, checks it with the items' validation, and reads back only
// the metadata, source and hash (Stored); each write still gets its own
// revision, so resourceVersions and watches are as the registry's.
package itemstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/value"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
)

// Item is an item as the collector wants it stored.
type Item struct {
	Namespace, Name string
	Labels          map[string]string
	// LabelsKey, when set, is LabelsKey(Labels), which callers that write
	// many items with one label set have at hand: each label set is
	// validated once.
	LabelsKey  string
	Source     kollect.ItemSource
	Attributes map[string]kollect.Value
	Object     *kollect.Value
	// SelectableAttributes name the attributes field selectors see.
	SelectableAttributes []string
	Hash                 string
}

// Stored is what the collector reads back of a stored item.
type Stored struct {
	Namespace, Name string
	Labels          map[string]string
	Source          kollect.ItemSource
	Hash            string
	// Revision is the item's resourceVersion: the etcd revision of its
	// last write.
	Revision int64
}

// Kind is one item kind.
type Kind struct {
	// Resource is the kind's resource, for errors.
	Resource schema.GroupResource
	// Kind names it in logs and metrics.
	Kind       string
	Namespaced bool
}

var (
	InventoryItems        = Kind{Resource: kollect.Resource("inventoryitems"), Kind: "InventoryItem", Namespaced: true}
	ClusterInventoryItems = Kind{Resource: kollect.Resource("clusterinventoryitems"), Kind: "ClusterInventoryItem"}
)

// Config is where a kind's items live: what the registry's RESTOptions of
// the kind say.
type Config struct {
	Kind Kind
	// Client reaches the server's etcd.
	Client *clientv3.Client
	// Prefix is the storage prefix (storagebackend.Config.Prefix) and
	// ResourcePrefix the kind's (generic.RESTOptions.ResourcePrefix).
	Prefix, ResourcePrefix string
	// Codec encodes and decodes stored objects (storagebackend.Config.Codec).
	Codec runtime.Codec
	// Transformer is applied to stored values (encryption at rest).
	Transformer value.Transformer
}

// Store keeps the items of one kind.
type Store struct {
	kind        Kind
	client      *clientv3.Client
	codec       runtime.Codec
	transformer value.Transformer
	// keyPrefix is the etcd key every item of the kind starts with, as
	// k8s.io/apiserver's etcd3 store builds it: the storage prefix, then
	// the registry's key "/<resource prefix>/<namespace>/<name>".
	keyPrefix string
	// json tells that the codec writes JSON: items are then written and
	// read here field by field (encode.go, decode.go).
	json bool
	// labels are the label sets found valid.
	labels validLabels
	// own are the revisions of this store's own writes, for its watches.
	own ownWrites
	// now stamps creations; tests replace it.
	now func() time.Time
}

// validLabels remembers the label sets found valid, up to a bound.
type validLabels struct {
	mu   sync.Mutex
	sets map[string]bool
}

// maxValidLabels bounds the label sets remembered: a target's items share
// one, so this is far more than the targets of a server.
const maxValidLabels = 4096

var labelsPath = field.NewPath("metadata", "labels")

// validate is metav1validation.ValidateLabels, once per label set; key is
// its canonical string, or empty.
func (v *validLabels) validate(l map[string]string, key string) field.ErrorList {
	if key == "" {
		key = LabelsKey(l)
	}
	v.mu.Lock()
	ok := v.sets[key]
	v.mu.Unlock()
	if ok {
		return nil
	}
	errs := metav1validation.ValidateLabels(l, labelsPath)
	if len(errs) == 0 {
		v.mu.Lock()
		if v.sets == nil || len(v.sets) >= maxValidLabels {
			v.sets = map[string]bool{}
		}
		v.sets[key] = true
		v.mu.Unlock()
	}
	return errs
}

// LabelsKey is a string that only the same label set has: keys and
// values, sorted by key, each with its length first. labels.Set.String is
// not one: {"a": "b,c=d"} prints as {"a": "b", "c": "d"} does.
func LabelsKey(l map[string]string) string {
	keys := slices.Sorted(maps.Keys(l))
	n := 0
	for _, k := range keys {
		n += len(k) + len(l[k]) + 8
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
		b = strconv.AppendInt(b, int64(len(l[k])), 10)
		b = append(b, ':')
		b = append(b, l[k]...)
	}
	return string(b)
}

// New returns the store of a kind.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil || cfg.Codec == nil || cfg.ResourcePrefix == "" {
		return nil, errors.New("itemstore: a client, a codec and a resource prefix are needed")
	}
	transformer := cfg.Transformer
	if transformer == nil {
		transformer = identity{}
	}
	pathPrefix := path.Join("/", cfg.Prefix)
	if !strings.HasSuffix(pathPrefix, "/") {
		pathPrefix += "/"
	}
	// The registry's key is "/" + ResourcePrefix + "/..."; etcd3 drops one
	// leading slash of a key and puts its prefix before the rest.
	key := "/" + cfg.ResourcePrefix + "/"
	probe, err := runtime.Encode(cfg.Codec, &kollect.InventoryItem{})
	if err != nil {
		return nil, fmt.Errorf("itemstore: the codec does not encode items: %w", err)
	}
	return &Store{
		kind:        cfg.Kind,
		client:      cfg.Client,
		codec:       cfg.Codec,
		transformer: transformer,
		keyPrefix:   pathPrefix + key[1:],
		json:        bytes.HasPrefix(probe, []byte("{")),
		now:         time.Now,
	}, nil
}

// Kind is the kind the store keeps.
func (s *Store) Kind() string { return s.kind.Kind }

func (s *Store) key(namespace, name string) string {
	if s.kind.Namespaced {
		return s.keyPrefix + namespace + "/" + name
	}
	return s.keyPrefix + name
}

// Create stores a new item and returns its revision; an item of that name
// already stored is a conflict (AlreadyExists).
func (s *Store) Create(ctx context.Context, item *Item) (int64, error) {
	meta := metav1.ObjectMeta{
		UID:               uuid.NewUUID(),
		CreationTimestamp: metav1.NewTime(s.now().Truncate(time.Second)),
		Generation:        1,
	}
	obj, err := s.object(item, meta, nil)
	if err != nil {
		return 0, err
	}
	key := s.key(item.Namespace, item.Name)
	data, err := s.encode(ctx, key, obj)
	if err != nil {
		return 0, err
	}
	resp, err := s.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, unsafeString(data))).
		Commit()
	if err != nil {
		return 0, storageError(err)
	}
	if !resp.Succeeded {
		return 0, apierrors.NewAlreadyExists(s.kind.Resource, item.Name)
	}
	s.own.add(resp.Header.Revision)
	return resp.Header.Revision, nil
}

// Update replaces a stored item, keeping its uid and creation time and
// moving its generation when the hash changed, whoever wrote it last (the
// registry's unconditional update). An item not stored is NotFound; a
// source uid other than the stored one is Invalid: an update may not
// change it. An item stored as it would be written is left alone, and its
// revision returned.
func (s *Store) Update(ctx context.Context, item *Item) (int64, error) {
	key := s.key(item.Namespace, item.Name)
	resp, err := s.client.Get(ctx, key)
	if err != nil {
		return 0, storageError(err)
	}
	for {
		if len(resp.Kvs) == 0 {
			return 0, apierrors.NewNotFound(s.kind.Resource, item.Name)
		}
		kv := resp.Kvs[0]
		old, stored, stale, err := s.decodePlain(ctx, kv.Key, kv.Value)
		if err != nil {
			return 0, err
		}
		meta := metav1.ObjectMeta{UID: old.uid, CreationTimestamp: old.created, Generation: old.generation}
		if old.hash != item.Hash {
			meta.Generation++
		}
		obj, err := s.object(item, meta, &old.source)
		if err != nil {
			return 0, err
		}
		plain, err := s.marshal(obj)
		if err != nil {
			return 0, apierrors.NewInternalError(fmt.Errorf("encoding %s: %w", key, err))
		}
		// What is stored already is not written again, as the registry's
		// update does not: no new resourceVersion, no watch event.
		if !stale && bytes.Equal(plain, stored) {
			return kv.ModRevision, nil
		}
		data, err := s.transform(ctx, key, plain)
		if err != nil {
			return 0, err
		}
		txn, err := s.client.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).
			Then(clientv3.OpPut(key, unsafeString(data))).
			Else(clientv3.OpGet(key)).
			Commit()
		if err != nil {
			return 0, storageError(err)
		}
		if txn.Succeeded {
			s.own.add(txn.Header.Revision)
			return txn.Header.Revision, nil
		}
		// Written meanwhile: again, on what is stored now.
		resp = (*clientv3.GetResponse)(txn.Responses[0].GetResponseRange())
	}
}

// Delete deletes a stored item; one not stored is NotFound.
func (s *Store) Delete(ctx context.Context, namespace, name string) error {
	resp, err := s.client.Delete(ctx, s.key(namespace, name))
	if err != nil {
		return storageError(err)
	}
	if resp.Deleted == 0 {
		return apierrors.NewNotFound(s.kind.Resource, name)
	}
	s.own.add(resp.Header.Revision)
	return nil
}

// Get reads one stored item; false when there is none.
func (s *Store) Get(ctx context.Context, namespace, name string) (Stored, bool, error) {
	resp, err := s.client.Get(ctx, s.key(namespace, name))
	if err != nil || len(resp.Kvs) == 0 {
		return Stored{}, false, storageError(err)
	}
	kv := resp.Kvs[0]
	r, err := s.decode(ctx, kv.Key, kv.Value)
	if err != nil {
		return Stored{}, false, err
	}
	return r.stored(kv.ModRevision), true, nil
}

// listPage is how many items one read of a list returns.
const listPage = 1000

// List calls fn with every stored item of namespace ("" for all) that
// selector matches, all as of one revision, which it returns.
func (s *Store) List(ctx context.Context, namespace string, selector labels.Selector, fn func(Stored)) (int64, error) {
	prefix := s.keyPrefix
	if namespace != "" && s.kind.Namespaced {
		prefix += namespace + "/"
	}
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := s.client.Get(ctx, from, opts...)
		if err != nil {
			return 0, storageError(err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			r, err := s.decode(ctx, kv.Key, kv.Value)
			if err != nil {
				return 0, err
			}
			if st := r.stored(kv.ModRevision); selector.Matches(labels.Set(st.Labels)) {
				fn(st)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Revision is the store's revision now: every write so far is at or
// before it.
func (s *Store) Revision(ctx context.Context) (int64, error) {
	// A read of one key that is never written answers with the revision.
	resp, err := s.client.Get(ctx, s.keyPrefix)
	if err != nil {
		return 0, storageError(err)
	}
	return resp.Header.Revision, nil
}

// object is the internal object of an item: validated as the registry
// validates items (on update, against the stored source uid).
func (s *Store) object(item *Item, meta metav1.ObjectMeta, old *kollect.ItemSource) (runtime.Object, error) {
	meta.Name = item.Name
	// The labels are validated apart: the items of a target share them,
	// and their regular expressions were most of the validation's cost.
	errs := s.labels.validate(item.Labels, item.LabelsKey)
	var obj runtime.Object
	if s.kind.Namespaced {
		meta.Namespace = item.Namespace
		o := &kollect.InventoryItem{ObjectMeta: meta, Source: item.Source, Attributes: item.Attributes, Object: item.Object,
			SelectableAttributes: item.SelectableAttributes, Hash: item.Hash}
		errs, obj = append(errs, validation.ValidateInventoryItem(o)...), o
		o.Labels = item.Labels
	} else {
		o := &kollect.ClusterInventoryItem{ObjectMeta: meta, Source: item.Source, Attributes: item.Attributes, Object: item.Object,
			SelectableAttributes: item.SelectableAttributes, Hash: item.Hash}
		errs, obj = append(errs, validation.ValidateClusterInventoryItem(o)...), o
		o.Labels = item.Labels
	}
	if old != nil && old.UID != item.Source.UID {
		errs = append(errs, field.Invalid(field.NewPath("source", "uid"), item.Source.UID, "field is immutable"))
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(kollect.Kind(s.kind.Kind), item.Name, errs)
	}
	return obj, nil
}

func (s *Store) encode(ctx context.Context, key string, obj runtime.Object) ([]byte, error) {
	data, err := s.marshal(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("encoding %s: %w", key, err))
	}
	return s.transform(ctx, key, data)
}

// transform is the encoding of an object as stored: through the
// transformer (encryption at rest, when configured).
func (s *Store) transform(ctx context.Context, key string, data []byte) ([]byte, error) {
	out, err := s.transformer.TransformToStorage(ctx, data, value.DefaultContext(key))
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	return out, nil
}

// marshal encodes an item as the storage codec does.
func (s *Store) marshal(obj runtime.Object) ([]byte, error) {
	if s.json {
		switch o := obj.(type) {
		case *kollect.InventoryItem:
			return appendItem(make([]byte, 0, 1024), "InventoryItem", &o.ObjectMeta, &o.Source, o.Attributes, o.Object, o.SelectableAttributes, o.Hash)
		case *kollect.ClusterInventoryItem:
			return appendItem(make([]byte, 0, 1024), "ClusterInventoryItem", &o.ObjectMeta, &o.Source, o.Attributes, o.Object, o.SelectableAttributes, o.Hash)
		}
	}
	return runtime.Encode(s.codec, obj)
}

// unsafeString is data as a string without a copy: OpPut copies its value
// into bytes again, and data is not used after.
func unsafeString(data []byte) string { return unsafe.String(unsafe.SliceData(data), len(data)) }

// storageError maps etcd's errors to the API's, as the registry would.
func storageError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return apierrors.NewTimeoutError(err.Error(), 0)
	}
	return apierrors.NewInternalError(err)
}

// record is what decode reads of a stored item.
type record struct {
	name, namespace string
	uid             types.UID
	created         metav1.Time
	generation      int64
	labels          map[string]string
	source          kollect.ItemSource
	hash            string
}

func (r *record) stored(rev int64) Stored {
	return Stored{Namespace: r.namespace, Name: r.name, Labels: r.labels, Source: r.source, Hash: r.hash, Revision: rev}
}

// identity is the transformer of unencrypted storage.
type identity struct{}

func (identity) TransformFromStorage(_ context.Context, data []byte, _ value.Context) ([]byte, bool, error) {
	return data, false, nil
}

func (identity) TransformToStorage(_ context.Context, data []byte, _ value.Context) ([]byte, error) {
	return data, nil
}
