package extract

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// hashVersion is part of every hash, so that a change of the canonical form
// rewrites every item once instead of comparing incomparable hashes.
const hashVersion = 1

// hashInput is the canonical form hashed: encoding/json writes struct
// fields in declaration order and map keys sorted, and every raw value was
// produced by encoding/json, so equal content gives equal bytes.
type hashInput struct {
	Version    int                        `json:"v"`
	Cluster    string                     `json:"cluster,omitempty"`
	APIVersion string                     `json:"apiVersion"`
	Kind       string                     `json:"kind"`
	Namespace  string                     `json:"namespace"`
	Name       string                     `json:"name"`
	UID        types.UID                  `json:"uid"`
	Attributes map[string]json.RawMessage `json:"attributes,omitempty"`
	Object     json.RawMessage            `json:"object,omitempty"`
	Selectable []string                   `json:"selectable,omitempty"`
}

// Hash is the hex SHA-256 of the canonical JSON of the source identity
// (apiVersion, kind, namespace, name, uid — not resourceVersion, so an
// update of the source that changes nothing the Profile keeps does not
// rewrite the item) and the content.
func Hash(source kollect.ItemSource, c Content) string {
	in := hashInput{
		Version:    hashVersion,
		Cluster:    source.Cluster,
		Selectable: c.Selectable,
		APIVersion: source.APIVersion,
		Kind:       source.Kind,
		Namespace:  source.Namespace,
		Name:       source.Name,
		UID:        source.UID,
	}
	if c.Attributes != nil {
		in.Attributes = make(map[string]json.RawMessage, len(c.Attributes))
		for k, v := range c.Attributes {
			in.Attributes[k] = rawOrNull(v.Raw)
		}
	}
	if c.Object != nil {
		in.Object = rawOrNull(c.Object.Raw)
	}
	data, err := json.Marshal(in)
	if err == nil {
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	// Only invalid raw JSON fails, and extraction never produces it; hash
	// the raw bytes anyway, so that the result still tracks the content
	// (the error's text would give every such item one hash).
	h := sha256.New()
	in.Attributes, in.Object = nil, nil // Selectable stays: names are valid JSON
	identity, _ := json.Marshal(in)
	writeField(h, identity)
	for _, k := range slices.Sorted(maps.Keys(c.Attributes)) {
		writeField(h, []byte(k))
		writeField(h, rawOrNull(c.Attributes[k].Raw))
	}
	if c.Object != nil {
		writeField(h, rawOrNull(c.Object.Raw))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// writeField writes b with its length first, so that fields cannot run
// into one another.
func writeField(h hash.Hash, b []byte) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
	h.Write(b)
}

func rawOrNull(raw []byte) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// SourceOf is the item source of a collected object.
func SourceOf(obj *unstructured.Unstructured) kollect.ItemSource {
	return kollect.ItemSource{
		APIVersion:      obj.GetAPIVersion(),
		Kind:            obj.GetKind(),
		Namespace:       obj.GetNamespace(),
		Name:            obj.GetName(),
		UID:             obj.GetUID(),
		ResourceVersion: obj.GetResourceVersion(),
	}
}

const (
	// maxNameLength is the longest object name (a DNS subdomain).
	maxNameLength = 253
	// suffixLength is how many hex digits of the source's digest end an
	// item name: 64 bits, so that a target with a million objects has a
	// one-in-ten-million chance of a collision.
	suffixLength = 16
)

// ItemName is the deterministic name of the item a target makes of an
// object: "<target>-<16 hex digits of sha256(uid)>", the target's name cut
// so the whole stays a valid DNS subdomain of at most 253 characters. The
// object's uid identifies it across renames of nothing and recreations
// under the same name alike; an object without a uid (never the case for
// objects read from kube-apiserver) is identified by namespace and name.
func ItemName(target string, source kollect.ItemSource) string {
	id := string(source.UID)
	if id == "" {
		id = source.Namespace + "/" + source.Name
	}
	sum := sha256.Sum256([]byte(id))
	suffix := hex.EncodeToString(sum[:])[:suffixLength]
	prefix := target
	if max := maxNameLength - suffixLength - 1; len(prefix) > max {
		prefix = prefix[:max]
	}
	// A cut name may end in a separator, which a DNS subdomain cannot have
	// before the "-" that follows.
	prefix = strings.TrimRight(prefix, "-.")
	if prefix == "" {
		return "item-" + suffix
	}
	return prefix + "-" + suffix
}
