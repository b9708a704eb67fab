package sink

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/bits"
	"time"

	"sigs.k8s.io/yaml"
)

// SchemaVersion identifies the snapshot document layout.
const SchemaVersion = "kollect.dev/snapshot/v1"

// Envelope is a whole-snapshot document: the header and the items in
// canonical order (ascending Item.Key()).
type Envelope struct {
	SchemaVersion string `json:"schemaVersion"`
	// Checksum identifies the item set; see Checksum. It does not depend on
	// ExportedAt, Generation or the order of the items.
	Checksum   string    `json:"checksum"`
	Generation int64     `json:"generation"`
	ItemCount  int       `json:"itemCount"`
	ExportedAt time.Time `json:"exportedAt"`
	// Cluster names the host cluster (the server's --cluster-name).
	Cluster   string    `json:"cluster"`
	Inventory Inventory `json:"inventory"`
	Items     []*Item   `json:"items"`
}

// Checksum is the order-independent digest of an item set: the sum, modulo
// 2^256, of SHA-256(key "\n" hash) over the items, each digest read as a
// big-endian 256-bit integer, written as 64 lowercase hex digits. Adding or
// removing one item is one addition or subtraction, so a change is
// detected in O(changes); docs/export.md shows how a reader recomputes it.
type Checksum [32]byte

// Digest is one item's share of a Checksum: SHA-256(key "\n" hash). An
// item version's digest never changes, so a holder of many views of one
// item computes it once (DigestOf) and adds it to each (AddDigest).
type Digest [32]byte

// DigestOf is the digest of the item (key, hash).
func DigestOf(key, hash string) Digest {
	// Keys and hashes are short: the input is assembled on the stack.
	var buf [256]byte
	b := append(append(append(buf[:0], key...), '\n'), hash...)
	return sha256.Sum256(b)
}

// Add includes the item (key, hash) in the checksum.
func (c *Checksum) Add(key, hash string) { c.AddDigest(DigestOf(key, hash)) }

// Remove takes the item (key, hash) out of the checksum.
func (c *Checksum) Remove(key, hash string) { c.RemoveDigest(DigestOf(key, hash)) }

// AddDigest includes an item, by its digest, in the checksum.
func (c *Checksum) AddDigest(d Digest) {
	var carry uint64
	for i := 31; i >= 0; i-- {
		s, c1 := bits.Add64(uint64(c[i]), uint64(d[i]), carry)
		c[i], carry = byte(s), (s>>8)|c1
	}
}

// RemoveDigest takes an item, by its digest, out of the checksum.
func (c *Checksum) RemoveDigest(d Digest) {
	var borrow uint64
	for i := 31; i >= 0; i-- {
		v := uint64(c[i]) - uint64(d[i]) - borrow
		c[i] = byte(v)
		if uint64(c[i]) != v { // wrapped below zero
			borrow = 1
		} else {
			borrow = 0
		}
	}
}

// String is the hex form used in envelopes and status.
func (c Checksum) String() string { return hex.EncodeToString(c[:]) }

// ChecksumOf computes the checksum of items from scratch.
func ChecksumOf(items []*Item) string {
	var c Checksum
	for _, it := range items {
		c.Add(it.Key(), it.Hash)
	}
	return c.String()
}

// Format is a document encoding: json, yaml or ndjson.
type Format string

const (
	JSON   Format = "json"
	YAML   Format = "yaml"
	NDJSON Format = "ndjson"
)

// Ext is the file extension of a format.
func (f Format) Ext() string {
	if f == "" {
		return string(JSON)
	}
	return string(f)
}

// Encode serializes the envelope. json is one indented document, yaml the
// same document as YAML, ndjson the header (without items) on the first
// line and one item per line after it. The output is deterministic for a
// given envelope.
func Encode(env *Envelope, f Format) ([]byte, error) {
	switch f {
	case JSON, "":
		b, err := json.MarshalIndent(env, "", "  ")
		if err != nil {
			return nil, err
		}
		return append(b, '\n'), nil
	case YAML:
		j, err := json.Marshal(env)
		if err != nil {
			return nil, err
		}
		return yaml.JSONToYAML(j)
	case NDJSON:
		header := *env
		header.Items = nil
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(struct {
			Envelope
			Items []*Item `json:"items,omitempty"`
		}{Envelope: header}); err != nil {
			return nil, err
		}
		for _, it := range env.Items {
			if err := enc.Encode(it); err != nil {
				return nil, err
			}
		}
		return buf.Bytes(), nil
	default:
		return nil, fmt.Errorf("unknown serialization format %q", f)
	}
}

// Header reads the envelope header (everything but the items) back from
// an encoded document, in any format. Sinks use it to compare checksums
// with what the destination holds.
func Header(doc []byte, f Format) (*Envelope, error) {
	var env Envelope
	switch f {
	case NDJSON:
		line, _, _ := bytes.Cut(doc, []byte{'\n'})
		if err := json.Unmarshal(line, &env); err != nil {
			return nil, err
		}
	case YAML:
		if err := yaml.Unmarshal(doc, &env); err != nil {
			return nil, err
		}
	default:
		if err := json.Unmarshal(doc, &env); err != nil {
			return nil, err
		}
	}
	env.Items = nil
	return &env, nil
}
