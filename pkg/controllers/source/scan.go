package source

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// scanner walks one JSON document held in memory without building it: it
// checks the grammar as strictly as encoding/json (strings, numbers,
// literals, separators, nesting depth) and hands out the spans of the
// values its caller keeps. Everything else is skipped byte by byte, which
// is what makes decoding a watch stream cheap: most of a Kubernetes object
// (managedFields, the data no Profile reads) is never allocated.
type scanner struct {
	data  []byte
	pos   int
	depth int
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

var errEnd = errors.New("unexpected end of JSON input")

func (s *scanner) fail(what string) error {
	if s.pos >= len(s.data) {
		return errEnd
	}
	return fmt.Errorf("invalid JSON at offset %d: %s", s.pos, what)
}

func (s *scanner) space() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek is the next byte after white space, 0 at the end.
func (s *scanner) peek() byte {
	s.space()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// value skips one value and returns its span.
func (s *scanner) value() (start, end int, err error) {
	s.space()
	start = s.pos
	err = s.skip()
	return start, s.pos, err
}

func (s *scanner) skip() error {
	if s.pos >= len(s.data) {
		return errEnd
	}
	switch c := s.data[s.pos]; {
	case c == '"':
		return s.str()
	case c == '{':
		if err := s.open('{'); err != nil {
			return err
		}
		for first := true; ; first = false {
			_, more, err := s.member(first)
			if err != nil || !more {
				return err
			}
			s.space()
			if err := s.skip(); err != nil {
				return err
			}
		}
	case c == '[':
		if err := s.open('['); err != nil {
			return err
		}
		for first := true; ; first = false {
			more, err := s.element(first)
			if err != nil || !more {
				return err
			}
			if err := s.skip(); err != nil {
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
	return s.fail("unexpected character")
}

// open enters an object or array at the current position.
func (s *scanner) open(c byte) error {
	if s.peek() != c {
		return s.fail("expected " + string(c))
	}
	if s.depth++; s.depth > maxDepth {
		return s.fail("exceeded max depth")
	}
	s.pos++
	return nil
}

// member moves to the next member of the object entered last and returns
// the span of its key, quotes included, with the position after the
// colon; more is false at the closing brace.
func (s *scanner) member(first bool) (key span, more bool, err error) {
	c := s.peek()
	if c == '}' && first {
		s.pos++
		s.depth--
		return span{}, false, nil
	}
	if !first {
		switch c {
		case '}':
			s.pos++
			s.depth--
			return span{}, false, nil
		case ',':
			s.pos++
			c = s.peek()
		default:
			return span{}, false, s.fail("expected , or }")
		}
	}
	if c != '"' {
		return span{}, false, s.fail("expected a member name")
	}
	key.start = s.pos
	if err := s.str(); err != nil {
		return span{}, false, err
	}
	key.end = s.pos
	if s.peek() != ':' {
		return span{}, false, s.fail("expected :")
	}
	s.pos++
	return key, true, nil
}

// element moves to the next element of the array entered last; more is
// false at the closing bracket.
func (s *scanner) element(first bool) (more bool, err error) {
	c := s.peek()
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
			s.space()
		default:
			return false, s.fail("expected , or ]")
		}
	}
	return true, nil
}

func (s *scanner) literal(word string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return s.fail("invalid literal")
	}
	s.pos += len(word)
	return nil
}

// number skips a number, checked against JSON's grammar.
func (s *scanner) number() error {
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
		return s.fail("invalid number")
	}
	if s.pos < len(d) && d[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail("invalid number")
		}
	}
	if s.pos < len(d) && (d[s.pos] == 'e' || d[s.pos] == 'E') {
		s.pos++
		if s.pos < len(d) && (d[s.pos] == '+' || d[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail("invalid number")
		}
	}
	return nil
}

func (s *scanner) digits() int {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos - start
}

// str skips a string: escapes are checked, control characters refused.
func (s *scanner) str() error {
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
						return s.fail("invalid \\u escape")
					}
				}
				s.pos += 5
			default:
				return s.fail("invalid escape")
			}
		case c < 0x20:
			return s.fail("control character in string")
		default:
			s.pos++
		}
	}
	return errEnd
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// span is a value's place in the document.
type span struct{ start, end int }

// text is the string a string span holds, decoded as encoding/json does
// (escapes, and invalid UTF-8 replaced); ok is false for other values.
func text(data []byte, sp span) (string, bool) {
	raw := data[sp.start:sp.end]
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

// keyIs tells whether a member name span is name.
func keyIs(data []byte, key span, name string) bool {
	raw := data[key.start:key.end]
	if len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name {
		return true
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return false
	}
	s, _ := text(data, key)
	return s == name
}
