package kollect

import (
	"bytes"
	"encoding/json"
	"regexp"
)

// The rules of attribute names and of the field selectors on them, shared
// by validation and by the field-label conversion of the item kinds.
const (
	// MaxAttributeNameLength bounds an attribute name.
	MaxAttributeNameLength = 63
	// MaxSelectableAttributes bounds the selectable attributes of a
	// Profile: each one is a field every list of its items computes.
	MaxSelectableAttributes = 8
	// AttributeFieldPrefix starts the field selector of a selectable
	// attribute: attributes.<name>.
	AttributeFieldPrefix = "attributes."
	// AttributeNameRule says in words what IsAttributeName accepts.
	AttributeNameRule = "must start with a letter followed by letters, digits, '_' or '-'"
)

var attributeNameRegexp = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// IsAttributeName tells whether name is a valid attribute name: a letter,
// then at most 62 letters, digits, '_' or '-'.
func IsAttributeName(name string) bool { return attributeNameRegexp.MatchString(name) }

// AttributeFieldValue is what the field selector attributes.<name> of a
// selectable attribute whose value is v matches: a string's text, a
// number's JSON text, "true" or "false". ok is false for any other value
// (null, a list, an object, or no valid JSON), which no selector sees.
func AttributeFieldValue(v Value) (text string, ok bool) {
	raw := bytes.TrimSpace(v.Raw)
	if len(raw) == 0 || !json.Valid(raw) {
		return "", false
	}
	switch c := raw[0]; {
	case c == '"':
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return s, true
	case c == 't', c == 'f', c == '-', c >= '0' && c <= '9':
		// A valid value starting so is a boolean or a number.
		return string(raw), true
	}
	return "", false
}
