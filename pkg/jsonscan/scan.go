// Package jsonscan walks JSON documents held in memory without building
// them: a Scanner checks the grammar as strictly as encoding/json
// (strings, numbers, literals, separators, nesting depth) and hands out the
// spans of the values its caller wants, skipping the rest byte by byte. It
// is what makes reading a watch stream or a stored object for a few of its
// fields cheap: the rest is never allocated. Decode builds a value the way
// k8s.io/apimachinery/pkg/util/json does, for the parts that are wanted
// whole.
package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Scanner reads one JSON document. The zero value is not usable: use New.
type Scanner struct {
	data  []byte
	pos   int
	depth int
}

// New scans data.
func New(data []byte) *Scanner { return &Scanner{data: data} }

// At scans the value at sp of data, and nothing after it.
func At(data []byte, sp Span) *Scanner { return &Scanner{data: data[:sp.End], pos: sp.Start} }

// Pos is the offset of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Bytes is the document.
func (s *Scanner) Bytes() []byte { return s.data }

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

var errEnd = errors.New("unexpected end of JSON input")

// Fail is a syntax error at the current position.
func (s *Scanner) Fail(what string) error {
	if s.pos >= len(s.data) {
		return errEnd
	}
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, what)
}

// Space skips white space.
func (s *Scanner) Space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// End tells whether only white space is left.
func (s *Scanner) End() bool {
	s.Space()
	return s.pos >= len(s.data)
}

// Peek is the next byte after white space, 0 at the end.
func (s *Scanner) Peek() byte {
	s.Space()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// Value skips one value and returns its span.
func (s *Scanner) Value() (Span, error) {
	s.Space()
	start := s.pos
	err := s.Skip()
	return Span{start, s.pos}, err
}

// Skip skips one value.
func (s *Scanner) Skip() error {
	if s.pos >= len(s.data) {
		return errEnd
	}
	switch c := s.data[s.pos]; {
	case c == '"':
		return s.str()
	case c == '{':
		if err := s.Open('{'); err != nil {
			return err
		}
		for first := true; ; first = false {
			_, more, err := s.Member(first)
			if err != nil || !more {
				return err
			}
			s.Space()
			if err := s.Skip(); err != nil {
				return err
			}
		}
	case c == '[':
		if err := s.Open('['); err != nil {
			return err
		}
		for first := true; ; first = false {
			more, err := s.Element(first)
			if err != nil || !more {
				return err
			}
			if err := s.Skip(); err != nil {
				return err
			}
		}
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	}
	return s.Fail("unexpected character")
}

// Open enters an object or array at the current position.
func (s *Scanner) Open(c byte) error {
	if s.Peek() != c {
		return s.Fail("expected " + string(c))
	}
	if s.depth++; s.depth > maxDepth {
		return s.Fail("exceeded max depth")
	}
	s.pos++
	return nil
}

// Member moves to the next member of the object entered last and returns
// the span of its key, quotes included, with the position after the
// colon; more is false at the closing brace.
func (s *Scanner) Member(first bool) (key Span, more bool, err error) {
	c := s.Peek()
	if c == '}' && first {
		s.pos++
		s.depth--
		return Span{}, false, nil
	}
	if !first {
		switch c {
		case '}':
			s.pos++
			s.depth--
			return Span{}, false, nil
		case ',':
			s.pos++
			c = s.Peek()
		default:
			return Span{}, false, s.Fail("expected , or }")
		}
	}
	if c != '"' {
		return Span{}, false, s.Fail("expected a member name")
	}
	key.Start = s.pos
	if err := s.str(); err != nil {
		return Span{}, false, err
	}
	key.End = s.pos
	if s.Peek() != ':' {
		return Span{}, false, s.Fail("expected :")
	}
	s.pos++
	return key, true, nil
}

// Element moves to the next element of the array entered last; more is
// false at the closing bracket.
func (s *Scanner) Element(first bool) (more bool, err error) {
	c := s.Peek()
	if c == ']' && first {
		s.pos++
		s.depth--
		return false, nil
	}
	if !first {
		switch c {
		case ']':
			s.pos++
			s.depth--
			return false, nil
		case ',':
			s.pos++
			s.Space()
		default:
			return false, s.Fail("expected , or ]")
		}
	}
	return true, nil
}

func (s *Scanner) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return s.Fail("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// number skips a number, checked against JSON's grammar.
func (s *Scanner) number() error {
	d := s.data
	if d[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos < len(d) && d[s.pos] == '0':
		s.pos++
	case s.pos < len(d) && d[s.pos] >= '1' && d[s.pos] <= '9':
		s.digits()
	default:
		return s.Fail("invalid number")
	}
	if s.pos < len(d) && d[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.Fail("invalid number")
		}
	}
	if s.pos < len(d) && (d[s.pos] == 'e' || d[s.pos] == 'E') {
		s.pos++
		if s.pos < len(d) && (d[s.pos] == '+' || d[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.Fail("invalid number")
		}
	}
	return nil
}

func (s *Scanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// str skips a string: escapes are checked, control characters refused.
func (s *Scanner) str() error {
	d := s.data
	s.pos++ // the opening quote
	for s.pos < len(d) {
		switch c := d[s.pos]; {
		case c == '"':
			s.pos++
			return nil
		case c == '\\':
			s.pos++
			if s.pos >= len(d) {
				return errEnd
			}
			switch d[s.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos++
			case 'u':
				if s.pos+5 > len(d) {
					return errEnd
				}
				for _, h := range d[s.pos+1 : s.pos+5] {
					if !isHex(h) {
						return s.Fail("invalid \\u escape")
					}
				}
				s.pos += 5
			default:
				return s.Fail("invalid escape")
			}
		case c < 0x20:
			return s.Fail("control character in string")
		default:
			s.pos++
		}
	}
	return errEnd
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Span is a value's place in the document.
type Span struct{ Start, End int }

// Text is the string a string span holds, decoded as encoding/json does
// (escapes, and invalid UTF-8 replaced); ok is false for other values.
func Text(data []byte, sp Span) (string, bool) {
	raw := data[sp.Start:sp.End]
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner), true
	}
	var out string
	if json.Unmarshal(raw, &out) != nil {
		return "", false
	}
	return out, true
}

// KeyIs tells whether a member name span is name.
func KeyIs(data []byte, key Span, name string) bool {
	raw := data[key.Start:key.End]
	if len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	s, _ := Text(data, key)
	return s == name
}

// Member is an object member's name and value.
type Member struct{ Key, Value Span }

// Members lists the members of the object at sp.
func Members(data []byte, sp Span) ([]Member, error) {
	members, _, err := scanMembers(At(data, sp))
	return members, err
}

// Document lists the members of a document that is one object.
func Document(data []byte) ([]Member, error) {
	members, s, err := scanMembers(New(data))
	if err == nil && !s.End() {
		err = s.Fail("data after the object")
	}
	return members, err
}

func scanMembers(s *Scanner) ([]Member, *Scanner, error) {
	if err := s.Open('{'); err != nil {
		return nil, s, err
	}
	out := make([]Member, 0, 8)
	for first := true; ; first = false {
		key, more, err := s.Member(first)
		if err != nil {
			return nil, s, err
		}
		if !more {
			return out, s, nil
		}
		value, err := s.Value()
		if err != nil {
			return nil, s, err
		}
		out = append(out, Member{key, value})
	}
}

// StringMap reads an object of strings as
// unstructured.NestedStringMap does: nil when the value is not an object
// or holds anything but strings.
func StringMap(data []byte, sp Span) map[string]string {
	if data[sp.Start] != '{' {
		return nil
	}
	members, err := Members(data, sp)
	if err != nil {
		return nil
	}
	out := make(map[string]string, len(members))
	// The last value of each name decides, as in a decoded map.
	var notString map[string]bool
	for _, mb := range members {
		key, _ := Text(data, mb.Key)
		if value, ok := Text(data, mb.Value); ok {
			out[key] = value
			delete(notString, key)
			continue
		}
		if notString == nil {
			notString = map[string]bool{}
		}
		notString[key] = true
		delete(out, key)
	}
	if len(notString) > 0 {
		return nil
	}
	return out
}

// Decode decodes a document as k8s.io/apimachinery/pkg/util/json.Unmarshal
// does into an any: objects as map[string]any (the last of duplicate names
// wins), arrays as []any, numbers without a fraction that fit as int64,
// other numbers as float64.
func Decode(data []byte) (any, error) {
	s := New(data)
	v, err := s.decode()
	if err != nil {
		return nil, err
	}
	if !s.End() {
		return nil, s.Fail("data after the value")
	}
	return v, nil
}

func (s *Scanner) decode() (any, error) {
	s.Space()
	if s.pos >= len(s.data) {
		return nil, errEnd
	}
	switch c := s.data[s.pos]; c {
	case '"':
		start := s.pos
		if err := s.str(); err != nil {
			return nil, err
		}
		str, _ := Text(s.data, Span{start, s.pos})
		return str, nil
	case '{':
		if err := s.Open('{'); err != nil {
			return nil, err
		}
		m := map[string]any{}
		for first := true; ; first = false {
			key, more, err := s.Member(first)
			if err != nil {
				return nil, err
			}
			if !more {
				return m, nil
			}
			name, _ := Text(s.data, key)
			v, err := s.decode()
			if err != nil {
				return nil, err
			}
			m[name] = v
		}
	case '[':
		if err := s.Open('['); err != nil {
			return nil, err
		}
		a := []any{}
		for first := true; ; first = false {
			more, err := s.Element(first)
			if err != nil {
				return nil, err
			}
			if !more {
				return a, nil
			}
			v, err := s.decode()
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	case 'n':
		return nil, s.literal("null")
	}
	start := s.pos
	if err := s.number(); err != nil {
		return nil, err
	}
	lit := string(s.data[start:s.pos])
	if !strings.Contains(lit, ".") {
		if i, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, fmt.Errorf("json: cannot unmarshal number %s into Go value of type float64", lit)
	}
	return f, nil
}
