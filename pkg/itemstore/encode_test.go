package itemstore

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/install"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
)

// storageCodec is the codec the server stores items with.
func storageCodec(t testing.TB) runtime.Codec {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return serializer.NewCodecFactory(scheme).LegacyCodec(v1alpha1.SchemeGroupVersion)
}

// randomString mixes what JSON escapes: quotes, backslashes, control and
// HTML characters, line separators, non-ASCII and invalid UTF-8.
func randomString(r *rand.Rand) string {
	parts := []string{"a", "web", "\"", "\\", "\n", "\x01", "<", ">", "&", "\u2028", "é", "😀", "\xff", " ", "/"}
	var b strings.Builder
	for range r.IntN(6) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

func randomJSON(r *rand.Rand, depth int) string {
	switch n := r.IntN(8); {
	case depth > 3 || n < 2:
		raw, _ := json.Marshal(randomString(r))
		return string(raw)
	case n == 2:
		return fmt.Sprint(r.Int64() - r.Int64())
	case n == 3:
		return fmt.Sprint(r.NormFloat64())
	case n == 4:
		return []string{"true", "false", "null", " [ 1 ,\n 2 ] "}[r.IntN(4)]
	case n == 5:
		var items []string
		for range r.IntN(3) {
			items = append(items, randomJSON(r, depth+1))
		}
		return "[" + strings.Join(items, " , ") + "]"
	default:
		var fields []string
		for range r.IntN(3) {
			key, _ := json.Marshal(randomString(r))
			fields = append(fields, string(key)+" : "+randomJSON(r, depth+1))
		}
		return "{ " + strings.Join(fields, ",") + " }"
	}
}

func randomItem(r *rand.Rand) *kollect.InventoryItem {
	it := &kollect.InventoryItem{
		ObjectMeta: metav1.ObjectMeta{Name: "web-" + fmt.Sprint(r.IntN(1000)), Namespace: []string{"", "ns"}[r.IntN(2)],
			UID: types.UID(randomString(r)), Generation: r.Int64N(3)},
		Source: kollect.ItemSource{APIVersion: randomString(r), Kind: randomString(r), Namespace: randomString(r), Name: randomString(r),
			UID: types.UID(randomString(r)), ResourceVersion: randomString(r)},
		Hash: randomString(r),
	}
	if r.IntN(2) == 0 {
		it.CreationTimestamp = metav1.NewTime(time.Unix(r.Int64N(4e9), 0))
	}
	if r.IntN(3) > 0 {
		it.Labels = map[string]string{}
		for range r.IntN(4) {
			it.Labels[randomString(r)] = randomString(r)
		}
	}
	if r.IntN(3) > 0 {
		it.Attributes = map[string]kollect.Value{}
		for range r.IntN(4) {
			v := kollect.Value{Raw: []byte(randomJSON(r, 0))}
			if r.IntN(6) == 0 {
				v.Raw = nil
			}
			it.Attributes[randomString(r)] = v
		}
	}
	if r.IntN(3) == 0 {
		it.Object = &kollect.Value{Raw: []byte(randomJSON(r, 0))}
	}
	if r.IntN(2) == 0 {
		it.Source.Cluster = randomString(r)
	}
	for range r.IntN(3) {
		it.SelectableAttributes = append(it.SelectableAttributes, randomString(r))
	}
	return it
}

// TestEncodeAsTheCodec: what appendItem writes decodes, with the storage
// codec, to what the codec's own encoding decodes to; readJSON reads from
// it what the codec decodes.
func TestEncodeAsTheCodec(t *testing.T) {
	codec := storageCodec(t)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 {
		item := randomItem(r)
		var obj runtime.Object = item
		kind := "InventoryItem"
		if i%2 == 1 {
			kind = "ClusterInventoryItem"
			obj = &kollect.ClusterInventoryItem{ObjectMeta: item.ObjectMeta, Source: item.Source, Attributes: item.Attributes, Object: item.Object,
				SelectableAttributes: item.SelectableAttributes, Hash: item.Hash}
		}
		want, err := runtime.Encode(codec, obj)
		if err != nil {
			t.Fatal(err)
		}
		got, err := appendItem(nil, kind, &item.ObjectMeta, &item.Source, item.Attributes, item.Object, item.SelectableAttributes, item.Hash)
		if err != nil {
			t.Fatal(err)
		}
		wantObj, err := runtime.Decode(codec, want)
		if err != nil {
			t.Fatal(err)
		}
		gotObj, err := runtime.Decode(codec, got)
		if err != nil {
			t.Fatalf("%s: %v", got, err)
		}
		if !reflect.DeepEqual(gotObj, wantObj) {
			t.Fatalf("decoded differently:\n got %s\nwant %s", got, want)
		}
		rec, err := readJSON(got)
		if err != nil {
			t.Fatal(err)
		}
		if want := recordOfObject(wantObj); !reflect.DeepEqual(rec, want) {
			t.Fatalf("read %+v\nwant %+v\nfrom %s", rec, want, got)
		}
	}
}

func recordOfObject(obj runtime.Object) *record {
	switch o := obj.(type) {
	case *kollect.InventoryItem:
		return recordOf(&o.ObjectMeta, o.Source, o.Hash)
	case *kollect.ClusterInventoryItem:
		return recordOf(&o.ObjectMeta, o.Source, o.Hash)
	}
	return nil
}

// TestReadJSONRefuses: values the registry could not decode as an item are
// refused here too, not read as empty.
func TestReadJSONRefuses(t *testing.T) {
	for _, doc := range []string{
		`{"metadata":{"name":1}}`,
		`{"metadata":{"labels":{"a":1}}}`,
		`{"metadata":{"labels":"a"}}`,
		`{"metadata":{"generation":"1"}}`,
		`{"metadata":{"creationTimestamp":"yesterday"}}`,
		`{"metadata":[]}`,
		`{"source":{"name":true}}`,
		`{"hash":5}`,
		`{"metadata":{}`,
		`[]`,
	} {
		if _, err := readJSON([]byte(doc)); err == nil {
			t.Errorf("%s: read", doc)
		}
	}
}

func BenchmarkEncode(b *testing.B) {
	codec := storageCodec(b)
	item := &kollect.InventoryItem{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps-cm-000001-0123456789abcdef", Namespace: "bench", UID: "0b5e1f0e-8c43-4c8e-9d6f-2f1b8e0f7a11", Generation: 1,
			CreationTimestamp: metav1.Now(), Labels: map[string]string{kollect.LabelTarget: "configmaps", kollect.LabelProfile: "configmaps", kollect.LabelSourceKind: "ConfigMap", kollect.LabelSourceGroup: "core"}},
		Source:     kollect.ItemSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "bench", Name: "cm-000001", UID: "9b5e1f0e-8c43-4c8e-9d6f-2f1b8e0f7a11", ResourceVersion: "123456"},
		Attributes: map[string]kollect.Value{"value": {Raw: []byte(`"v0"`)}, "name": {Raw: []byte(`"cm-000001"`)}},
		Hash:       strings.Repeat("ab", 32),
	}
	b.Run("appendItem", func(b *testing.B) {
		for b.Loop() {
			_, _ = appendItem(nil, "InventoryItem", &item.ObjectMeta, &item.Source, item.Attributes, item.Object, item.SelectableAttributes, item.Hash)
		}
	})
	b.Run("validate", func(b *testing.B) {
		for b.Loop() {
			_ = validation.ValidateInventoryItem(item)
		}
	})
	b.Run("codec", func(b *testing.B) {
		for b.Loop() {
			_, _ = runtime.Encode(codec, item)
		}
	})
	data, _ := runtime.Encode(codec, item)
	b.Run("readJSON", func(b *testing.B) {
		for b.Loop() {
			_, _ = readJSON(data)
		}
	})
	b.Run("codec decode", func(b *testing.B) {
		for b.Loop() {
			_, _ = runtime.Decode(codec, data)
		}
	})
}

// TestLabelsValidated: the label sets are validated once each, and an
// invalid one is refused every time, naming the field.
func TestLabelsValidated(t *testing.T) {
	s := &Store{kind: InventoryItems, codec: storageCodec(t), json: true}
	item := &Item{Namespace: "ns", Name: "web-1", Labels: map[string]string{kollect.LabelTarget: "web"},
		Source: kollect.ItemSource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}, Hash: strings.Repeat("ab", 32)}
	for range 2 {
		obj, err := s.object(item, metav1.ObjectMeta{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := obj.(*kollect.InventoryItem).Labels; !reflect.DeepEqual(got, item.Labels) {
			t.Errorf("labels %v", got)
		}
	}
	bad := *item
	bad.Labels = map[string]string{kollect.LabelTarget: "not a label value!"}
	for range 2 {
		if _, err := s.object(&bad, metav1.ObjectMeta{}, nil); err == nil || !strings.Contains(err.Error(), "metadata.labels") {
			t.Errorf("invalid labels: %v", err)
		}
	}
	if len(s.labels.sets) != 1 {
		t.Errorf("remembered %d label sets, want 1", len(s.labels.sets))
	}
}
