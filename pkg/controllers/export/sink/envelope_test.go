package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

func testItems(n int) []*Item {
	items := make([]*Item, n)
	for i := range items {
		items[i] = &Item{Namespace: "team-a", Name: fmt.Sprintf("web-%03d", i), Target: "web", Profile: "deployments",
			Source:     Source{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "team-a", Name: fmt.Sprintf("d%d", i)},
			Attributes: []byte(fmt.Sprintf(`{"image":["app:%d"]}`, i)), Hash: fmt.Sprintf("%064x", i*7919)}
	}
	return items
}

// TestChecksum: the checksum is independent of order, Add and Remove are
// inverse, and it changes with any item's key or hash.
func TestChecksum(t *testing.T) {
	items := testItems(50)
	want := ChecksumOf(items)
	var c Checksum
	for i := len(items) - 1; i >= 0; i-- {
		c.Add(items[i].Key(), items[i].Hash)
	}
	if c.String() != want {
		t.Fatalf("order changes the checksum: %s vs %s", c, want)
	}
	c.Add("team-a/extra", "00")
	if c.String() == want {
		t.Fatal("an added item does not change the checksum")
	}
	c.Remove("team-a/extra", "00")
	if c.String() != want {
		t.Fatalf("remove does not undo add: %s vs %s", c, want)
	}
	for _, it := range items {
		c.Remove(it.Key(), it.Hash)
	}
	if c != (Checksum{}) {
		t.Fatalf("removing every item leaves %s", c)
	}
	changed := testItems(50)
	changed[17].Hash = "ff"
	if ChecksumOf(changed) == want {
		t.Fatal("a changed hash does not change the checksum")
	}
}

// TestChecksumIsTheDocumentedSum recomputes the checksum as docs/export.md
// tells a reader to: the sum modulo 2^256 of SHA-256(key "\n" hash), each
// read as a big-endian integer; also for a key longer than DigestOf's
// stack buffer.
func TestChecksumIsTheDocumentedSum(t *testing.T) {
	items := testItems(20)
	items[3].Name = strings.Repeat("n", 300)
	sum := new(big.Int)
	for _, it := range items {
		d := sha256.Sum256([]byte(it.Key() + "\n" + it.Hash))
		sum.Add(sum, new(big.Int).SetBytes(d[:]))
		if got := DigestOf(it.Key(), it.Hash); got != Digest(d) {
			t.Errorf("DigestOf(%.20s…) = %x, want %x", it.Key(), got, d)
		}
	}
	sum.Mod(sum, new(big.Int).Lsh(big.NewInt(1), 256))
	want := make([]byte, 32)
	sum.FillBytes(want)
	if got := ChecksumOf(items); got != hex.EncodeToString(want) {
		t.Errorf("ChecksumOf = %s, want %x", got, want)
	}
	var c Checksum
	for _, it := range items {
		c.AddDigest(DigestOf(it.Key(), it.Hash))
	}
	if c.String() != hex.EncodeToString(want) {
		t.Errorf("AddDigest sum = %s, want %x", c, want)
	}
}

// TestEncode: every format is deterministic and its header reads back.
func TestEncode(t *testing.T) {
	items := testItems(5)
	env := &Envelope{SchemaVersion: SchemaVersion, Checksum: ChecksumOf(items), Generation: 3, ItemCount: len(items),
		ExportedAt: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), Cluster: "c1",
		Inventory: Inventory{Kind: "Inventory", Namespace: "team-a", Name: "inv"}, Items: items}
	for _, f := range []Format{JSON, YAML, NDJSON} {
		a, err := Encode(env, f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		b, _ := Encode(env, f)
		if !bytes.Equal(a, b) {
			t.Errorf("%s: not deterministic", f)
		}
		h, err := Header(a, f)
		if err != nil {
			t.Fatalf("%s header: %v", f, err)
		}
		if h.Checksum != env.Checksum || h.Generation != 3 || h.ItemCount != 5 || !h.ExportedAt.Equal(env.ExportedAt) || h.Inventory != env.Inventory {
			t.Errorf("%s header %+v", f, h)
		}
	}
	nd, _ := Encode(env, NDJSON)
	if lines := bytes.Count(nd, []byte("\n")); lines != 6 {
		t.Errorf("ndjson: %d lines, want header + 5", lines)
	}
	if _, err := Encode(env, "xml"); err == nil {
		t.Error("unknown format accepted")
	}
}

func TestExpand(t *testing.T) {
	got := Expand("{namespace}/{inventory}.{ext}{unknown}{", map[string]string{"namespace": "a", "inventory": "b", "ext": "json"})
	if got != "a/b.json{unknown}{" {
		t.Errorf("got %q", got)
	}
}

// FuzzHeader: reading a header from any bytes in any format never panics.
func FuzzHeader(f *testing.F) {
	env := &Envelope{SchemaVersion: SchemaVersion, Items: testItems(2)}
	for _, fm := range []Format{JSON, YAML, NDJSON} {
		b, _ := Encode(env, fm)
		f.Add(b, string(fm))
	}
	f.Fuzz(func(t *testing.T, doc []byte, format string) {
		_, _ = Header(doc, Format(format))
	})
}
