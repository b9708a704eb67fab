package plumbing

import (
	"encoding/json"
	"fmt"
	"net/url"
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
		"as is":             {"bad token " + token + " here", "bad token REDACTED here"},
		"quoted with %q":    {quoted, `"bad token REDACTED"`},
		"JSON-escaped":      {string(j), `"bad token REDACTED"`},
		"cut at the end":    {"xxxx " + token[:9], "xxxx REDACTED"},
		"cut to 4 bytes":    {"xxxx " + token[:4], "xxxx REDACTED"},
		"3 bytes are words": {"xxxx " + token[:3], "xxxx " + token[:3]},
		"twice":             {token + "/" + token, "REDACTED/REDACTED"},
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
	if got := RedactString("k=password123", []string{"pass", "password123"}); got != "k=REDACTED" {
		t.Errorf("nested values: %q", got)
	}
}

// A URL's password shows as the one placeholder; a URL without one as it is.
func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://git:hunter22@example.com/repo.git": "https://git:" + Redacted + "@example.com/repo.git",
		"https://git@example.com/repo.git":          "https://git@example.com/repo.git",
		"file:///srv/repo.git":                      "file:///srv/repo.git",
	} {
		u, err := url.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		if got := RedactURL(u); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
