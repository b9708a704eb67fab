package postgres

import (
	"bytes"
	"encoding/json"
	"strings"
)

// nulEscape is how JSON spells NUL, which jsonb refuses (SQLSTATE 22P05);
// replacementEscape is U+FFFD, which it stores in its place.
var (
	nulEscape         = []byte(`\u0000`)
	replacementEscape = []byte(`\ufffd`)
)

// stripNUL removes NUL characters, which a text column cannot hold.
func stripNUL(s string) string {
	if strings.IndexByte(s, 0) < 0 {
		return s
	}
	return strings.ReplaceAll(s, "\x00", "")
}

// jsonb is a document as sent to a jsonb column: nil (NULL) when absent,
// and with every \u0000 escape replaced by \ufffd. Anything else is sent
// as is, so the server still validates it.
func jsonb(m json.RawMessage) json.RawMessage {
	if len(m) == 0 {
		return nil
	}
	if !bytes.Contains(m, nulEscape) {
		return m
	}
	out := make(json.RawMessage, 0, len(m))
	for i := 0; i < len(m); i++ {
		if m[i] != '\\' {
			out = append(out, m[i])
			continue
		}
		// In valid JSON a backslash starts an escape inside a string, so
		// the pair is consumed whole: in `\\u0000` the second backslash is
		// the escaped character, not the start of \u0000.
		if bytes.HasPrefix(m[i:], nulEscape) {
			out = append(out, replacementEscape...)
			i += len(nulEscape) - 1
			continue
		}
		out = append(out, m[i])
		if i+1 < len(m) {
			i++
			out = append(out, m[i])
		}
	}
	return out
}
