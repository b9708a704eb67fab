package collect

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/itemstore"
)

func TestHashOf(t *testing.T) {
	hash := extract.Hash(kollect.ItemSource{APIVersion: "v1", Kind: "ConfigMap", Name: "a", UID: "u"}, extract.Content{})
	sum := hashOf(hash)
	if hex.EncodeToString(sum[:]) != hash {
		t.Errorf("hashOf(%s) = %x", hash, sum)
	}
	for _, bad := range []string{"", "abc", strings.Repeat("z", 64), hash + "00"} {
		if hashOf(bad) != (itemHash{}) {
			t.Errorf("hashOf(%q) is not the zero hash", bad)
		}
	}
}

func TestStoredOf(t *testing.T) {
	l := func() map[string]string { return map[string]string{labelTarget: "web", labelProfile: "p"} }
	source := kollect.ItemSource{Namespace: "ns", Name: "obj", ResourceVersion: "5"}
	hash := extract.Hash(source, extract.Content{})
	a := storedOf(itemstore.Stored{Namespace: "ns", Name: "web-1", Labels: l(), Source: source, Hash: hash})
	b := storedOf(itemstore.Stored{Namespace: "ns", Name: "web-2", Labels: l(), Source: source, Hash: hash})
	if a.target != "web" || a.labels != labelsKey(l()) || a.objKey != "ns/obj" || a.sourceRV != "5" || a.hash != hashOf(hash) {
		t.Errorf("storedOf: %+v", a)
	}
	if e := entryOf(a); e.objKey != a.objKey || e.hash != a.hash || e.labels != a.labels || e.sourceRV != a.sourceRV || e.extractedWith != "" {
		t.Errorf("entryOf: %+v", e)
	}
	if a.labels != b.labels {
		t.Error("equal labels must compare equal")
	}
}

// The watch of stored items finds an item's target by its label, which is
// shortened for names longer than a label value.
func TestTargetOfLabel(t *testing.T) {
	long := strings.Repeat("a", 70)
	dashed := "web-0123456789abcdef" // shaped like a shortened label, but a name
	x := newItemIndex(nil, nil)
	for _, key := range []targetKey{
		{Namespace: "ns", Name: "web"},
		{Namespace: "ns", Name: long},
		{Namespace: "ns", Name: dashed},
		{Cluster: true, Name: long},
	} {
		x.target(key)
	}
	for _, tc := range []struct {
		cluster   bool
		ns, label string
		want      *targetKey
	}{
		{false, "ns", "web", &targetKey{Namespace: "ns", Name: "web"}},
		{false, "ns", labelValue(long), &targetKey{Namespace: "ns", Name: long}},
		{true, "", labelValue(long), &targetKey{Cluster: true, Name: long}},
		{false, "ns", dashed, &targetKey{Namespace: "ns", Name: dashed}},
		{false, "other", labelValue(long), nil},
		{false, "ns", labelValue(strings.Repeat("b", 70)), nil},
		{false, "ns", "gone", nil},
	} {
		got := x.targetOfLocked(tc.cluster, tc.ns, tc.label)
		switch {
		case tc.want == nil && got != nil:
			t.Errorf("%v %s/%s: %v, want none", tc.cluster, tc.ns, tc.label, got.key)
		case tc.want != nil && (got == nil || got.key != *tc.want):
			t.Errorf("%v %s/%s: %v, want %v", tc.cluster, tc.ns, tc.label, got, *tc.want)
		}
	}
}

// TestLastErrorShortened: an extraction error can quote the object, and a
// lastError over validation's limit would make every status write of the
// target fail; it is cut, on a character boundary.
func TestLastErrorShortened(t *testing.T) {
	c := quotaCollector(t)
	key := targetKey{Namespace: "ns", Name: "web"}
	c.targets.update(key, func(tg *target) { tg.reason, tg.message = "Broken", strings.Repeat("é", 5000) })
	tg, _ := c.targets.get(key)
	obs, _ := c.observation(key, &tg, nil)
	if len(obs.LastError) > maxLastError || !utf8.ValidString(obs.LastError) || !strings.HasPrefix(tg.message, obs.LastError) || len(obs.LastError) < maxLastError-1 {
		t.Errorf("lastError of %d bytes, valid UTF-8 %v", len(obs.LastError), utf8.ValidString(obs.LastError))
	}
	indexed := c.index.target(key)
	c.setFailure(indexed, "ns/cm", errors.New(strings.Repeat("x", 100_000)))
	if n := len(indexed.failed["ns/cm"]); n != maxLastError {
		t.Errorf("a failure is kept with %d bytes of message", n)
	}
}

// TestEveryCluster: the host collector deletes a deleted target's items
// of every cluster through its own store without the cluster scope, and
// still fenced (an unscoped store that lost the fence, or a type switch
// that missed a wrapper, once crashed the server on a ClusterTarget's
// deletion).
func TestEveryCluster(t *testing.T) {
	holding := func() bool { return false }
	got := everyCluster(collectorStore(nil, Config{Cluster: "hub", Holding: holding}))
	f, ok := got.(fencedItems)
	if !ok || f.holding == nil {
		t.Fatalf("everyCluster gave %T, want the fenced store", got)
	}
	if _, ok := f.itemStore.(etcdItems); !ok {
		t.Fatalf("everyCluster's store is %T, want the unscoped etcd store", f.itemStore)
	}
	if err := got.delete(context.Background(), "ns", "item"); !errors.Is(err, errLeaseUnconfirmed) {
		t.Errorf("a delete while not holding: %v, want %v", err, errLeaseUnconfirmed)
	}
}
