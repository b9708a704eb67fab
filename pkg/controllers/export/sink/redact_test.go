package sink

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestRedactString: a Secret's value is replaced as it is, as %q and JSON
// escape it, and where a text ends in its first bytes; nothing else is.
func TestRedactString(t *testing.T) {
	const token = `QUOTED"SECRET\0123456789`
	quoted := fmt.Sprintf("%q", "bad token "+token)
	j, _ := json.Marshal("bad token " + token)
	for name, tc := range map[string]struct {
		text, want string
	}{
		"as is":             {"bad token " + token + " here", "bad token [redacted] here"},
		"quoted with %q":    {quoted, `"bad token [redacted]"`},
		"JSON-escaped":      {string(j), `"bad token [redacted]"`},
		"cut at the end":    {"xxxx " + token[:9], "xxxx [redacted]"},
		"cut to 4 bytes":    {"xxxx " + token[:4], "xxxx [redacted]"},
		"3 bytes are words": {"xxxx " + token[:3], "xxxx " + token[:3]},
		"twice":             {token + "/" + token, "[redacted]/[redacted]"},
		"unrelated":         {"connection refused", "connection refused"},
	} {
		got := RedactString(tc.text, []string{"abc", token})
		if got != tc.want {
			t.Errorf("%s: RedactString(%q) = %q, want %q", name, tc.text, got, tc.want)
		}
		if strings.Contains(got, "SECRET") {
			t.Errorf("%s: %q still shows part of the value", name, got)
		}
	}
	// Longest first: a value that contains another is replaced whole.
	if got := RedactString("k=password123", []string{"pass", "password123"}); got != "k=[redacted]" {
		t.Errorf("nested values: %q", got)
	}
}
