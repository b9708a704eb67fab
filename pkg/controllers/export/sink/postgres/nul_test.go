package postgres

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

func TestJSONBMapping(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{``, ``},
		{`{"a":"b"}`, `{"a":"b"}`},
		{`{"a":"x\u0000y"}`, `{"a":"x\ufffdy"}`},
		{`{"k\u0000":["\u0000","\u0000\u0000"]}`, `{"k\ufffd":["\ufffd","\ufffd\ufffd"]}`},
		// An escaped backslash followed by the text u0000 is no NUL.
		{`{"a":"\\u0000"}`, `{"a":"\\u0000"}`},
		// An escaped backslash, then a NUL.
		{`{"a":"\\\u0000"}`, `{"a":"\\\ufffd"}`},
		{`{"a":"\"\u0000\u00001"}`, `{"a":"\"\ufffd\ufffd1"}`},
		// Other escapes of zero-led code points are kept.
		{`{"a":"\u0001\u00001"}`, `{"a":"\u0001\ufffd1"}`},
	} {
		got := jsonb(json.RawMessage(tc.in))
		if string(got) != tc.want {
			t.Errorf("jsonb(%s) = %s, want %s", tc.in, got, tc.want)
		}
		if tc.in == "" && got != nil {
			t.Errorf("jsonb of an empty document = %q, want nil (NULL)", got)
		}
	}
	in := json.RawMessage(`{"a":"b"}`)
	if got := jsonb(in); &got[0] != &in[0] {
		t.Error("a document without NUL was copied")
	}
	if got := stripNUL("a\x00b\x00"); got != "ab" {
		t.Errorf("stripNUL = %q, want ab", got)
	}
}

// nulConfigMap is an item as an Inventory in Resource mode exports a
// ConfigMap whose data holds NUL characters (binary content pasted into
// data, or a key naming it), serialized by the Kubernetes types.
func nulConfigMap(t *testing.T, uid string) *sink.Item {
	t.Helper()
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "blob-" + uid, UID: types.UID("src-" + uid), Annotations: map[string]string{"note\x00": "x"}},
		Data:       map[string]string{"blob": "head\x00tail", "literal": `not\u0000nul`},
	}
	object, err := json.Marshal(cm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(object, []byte(`head\u0000tail`)) {
		t.Fatalf("the encoded ConfigMap does not escape NUL as \\u0000: %s", object)
	}
	attrs, err := json.Marshal(map[string]any{"size": 9, "first": "head\x00"})
	if err != nil {
		t.Fatal(err)
	}
	return &sink.Item{
		Namespace: "default", Name: "configmap-blob-" + uid + "\x00", Target: "configs", Profile: "full",
		Source:     sink.Source{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "blob-" + uid, UID: "src-" + uid},
		Attributes: attrs, Object: object, Hash: "hash-" + uid, UID: uid, ResourceVersion: "7",
	}
}

// Items holding NUL export, on both upsert paths, with NUL mapped as the
// package doc says; without the mapping the server refuses them.
func TestNULValues(t *testing.T) {
	conn := connect(t)
	ctx := testContext(t)
	schema := testSchema(t, conn)
	const table = "items"
	s := newSink(t, schema, table)

	// Why the mapping exists: jsonb refuses the escape outright.
	var pgErr *pgconn.PgError
	if _, err := conn.Exec(ctx, `SELECT $1::text::jsonb`, `{"a":"\u0000"}`); !errors.As(err, &pgErr) || pgErr.Code != "22P05" {
		t.Fatalf("the server took \\u0000 in jsonb (%v): this test proves nothing", err)
	}

	mustApply(t, s, invA, []sink.Change{upsert(nulConfigMap(t, "one")), upsert(item("plain", "hp"))}, pos("c1"))
	var large []sink.Change
	for i := range copyThreshold + 1 {
		large = append(large, upsert(nulConfigMap(t, fmt.Sprintf("many-%03d", i))))
	}
	copies := s.copies.Load()
	mustApply(t, s, invB, large, pos("c2"))
	if s.copies.Load() == copies {
		t.Error("the large batch did not use COPY")
	}

	// State reports the hashes as exported.
	if hashes, _ := mustState(t, s, invA); hashes["one"] != "hash-one" || hashes["plain"] != "hp" || len(hashes) != 2 {
		t.Errorf("State(invA) = %v", hashes)
	}
	if hashes, _ := mustState(t, s, invB); len(hashes) != copyThreshold+1 || hashes["many-007"] != "hash-many-007" {
		t.Errorf("State(invB): %d rows, many-007 = %q", len(hashes), hashes["many-007"])
	}
	for _, tc := range []struct {
		inv sink.Inventory
		uid string
	}{{invA, "one"}, {invB, "many-042"}} {
		var itemName, blob, literal, annotation, first string
		err := conn.QueryRow(ctx, `SELECT item_name, object->'data'->>'blob', object->'data'->>'literal',
			object->'metadata'->'annotations'->>(E'note\uFFFD'), attributes->>'first'
			FROM `+pgx.Identifier{schema, table}.Sanitize()+` WHERE cluster = $1 AND inventory_namespace = $2 AND item_uid = $3`,
			tc.inv.Cluster, tc.inv.Namespace, tc.uid).Scan(&itemName, &blob, &literal, &annotation, &first)
		if err != nil {
			t.Fatalf("row %s: %v", tc.uid, err)
		}
		got := []string{itemName, blob, literal, annotation, first}
		want := []string{"configmap-blob-" + tc.uid, "head\uFFFDtail", `not\u0000nul`, "x", "head\uFFFD"}
		if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", want) {
			t.Errorf("row %s = %q, want %q", tc.uid, got, want)
		}
	}
}
