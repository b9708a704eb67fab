package jsonscan

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	utiljson "k8s.io/apimachinery/pkg/util/json"
)

var documents = []string{
	`{"a":1,"b":1.0,"c":-0,"d":-0.0,"e":1e3,"f":9223372036854775807,"g":9223372036854775808,"h":-9223372036854775808,"i":0.1,"j":1E-300}`,
	`{"s":"\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t","t":"\u0000","u":"\ud800","v":"a\xffb"}`,
	`[true,false,null,[],{},[[{"a":[]}]]]`,
	` { "a" : [ 1 , 2 ] , "a" : "last" } `,
	`"just a string"`,
	`12`,
	`null`,
	`{"a":{"b":{"c":{"d":[1,{"e":null}]}}}}`,
}

var invalid = []string{
	``, ` `, `{`, `}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `[,1]`, `{,"a":1}`, `01`, `1.`, `.1`, `1e`, `+1`, `-`, `tru`, `nul`, `"a`,
	`"\x"`, `"\u12"`, "\"a\nb\"", `{"a":1} {"b":2}`, `{"a":1}]`, `1e400`, `[1e400]`, `{1:2}`, `NaN`, `'a'`,
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
}

// TestDecode: Decode gives what util/json gives, and refuses what it refuses.
func TestDecode(t *testing.T) {
	for _, doc := range append(append([]string{}, documents...), invalid...) {
		checkDecode(t, []byte(doc))
	}
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	var want any
	wantErr := utiljson.Unmarshal(data, &want)
	got, err := Decode(data)
	if (err != nil) != (wantErr != nil) {
		t.Fatalf("%.200q: error %v, util/json's %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if !reflect.DeepEqual(got, want) || !bytes.Equal(gj, wj) {
		t.Fatalf("%.200q:\n got %#v\nwant %#v", data, got, want)
	}
}

// TestSkip: the scanner accepts exactly what encoding/json calls valid.
func TestSkip(t *testing.T) {
	for _, doc := range append(append([]string{}, documents...), invalid...) {
		checkSkip(t, []byte(doc))
	}
}

func checkSkip(t *testing.T, data []byte) {
	t.Helper()
	s := New(data)
	_, err := s.Value()
	if err == nil && !s.End() {
		err = s.Fail("data after the value")
	}
	if valid := json.Valid(data); valid != (err == nil) {
		t.Fatalf("%.200q: scanned with %v, encoding/json says valid=%v", data, err, valid)
	}
}

func TestStringMap(t *testing.T) {
	for doc, want := range map[string]map[string]string{
		`{"a":"1","b":"2"}`:      {"a": "1", "b": "2"},
		`{}`:                     {},
		`{"a":1}`:                nil,
		`{"a":1,"a":"x"}`:        {"a": "x"},
		`{"a":"x","a":null}`:     nil,
		`["a"]`:                  nil,
		`"a"`:                    nil,
		`{"k\u0065y":"v\u00e9"}`: {"key": "vé"},
	} {
		if got := StringMap([]byte(doc), Span{0, len(doc)}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %#v, want %#v", doc, got, want)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, doc := range append(append([]string{}, documents...), invalid[:len(invalid)-1]...) {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		checkSkip(t, data)
	})
}

func BenchmarkDecode(b *testing.B) {
	doc := []byte(`{"apiVersion":"v1","data":{"value":"v0"},"kind":"ConfigMap","metadata":{"name":"cm-000001"}}`)
	b.Run("jsonscan", func(b *testing.B) {
		for b.Loop() {
			if _, err := Decode(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("util/json", func(b *testing.B) {
		for b.Loop() {
			var m map[string]any
			if err := utiljson.Unmarshal(doc, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
