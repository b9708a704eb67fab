package plumbing

import (
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Redacted replaces a Secret's value wherever it would be shown: in items
// (Secret data, a Profile's scrubKeys) and in the sinks' errors, which
// status, Events and logs show. Items hold it, so it stays what they
// always held.
const Redacted = "REDACTED"

// Redact returns err with every one of secrets replaced in its message, as
// RedactString does. The result still answers errors.Is for what err
// matched (sink.ErrPermanent, context errors) but does not unwrap, so the
// original text cannot be reached.
func Redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := RedactString(msg, secrets)
	if out == msg {
		return err
	}
	return &redactedError{msg: out, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string        { return e.msg }
func (e *redactedError) Is(target error) bool { return errors.Is(e.err, target) }

// RedactedError returns an error with msg, which the caller redacted,
// that unwraps to causes only: never to the error msg was made from,
// whose other fields may still hold a secret. causes are what callers
// classify errors by (sentinels, a class for errors.As).
func RedactedError(msg string, causes ...error) error {
	return &causedError{msg: msg, causes: causes}
}

type causedError struct {
	msg    string
	causes []error
}

func (e *causedError) Error() string   { return e.msg }
func (e *causedError) Unwrap() []error { return e.causes }

// minSecretPiece is the shortest value, and the shortest piece of one at
// the end of a text, that RedactString replaces: shorter ones are too
// likely to be ordinary words.
const minSecretPiece = 4

// RedactString replaces every secret in text with Redacted: as it is, and
// as %q or JSON would escape it (a value with a quote or a backslash),
// since a message may quote what an endpoint echoed. A text that ends in
// the first bytes of a secret, as one cut by a size limit does, has that
// piece replaced too. Callers redact before they cut or quote text, so
// that no cut leaves a piece of a value behind.
func RedactString(text string, secrets []string) string {
	var forms []string
	for _, v := range secrets {
		if len(v) < minSecretPiece {
			continue
		}
		forms = append(forms, v)
		if q := strconv.Quote(v); q[1:len(q)-1] != v {
			forms = append(forms, q[1:len(q)-1])
		}
		if j, err := json.Marshal(v); err == nil && string(j[1:len(j)-1]) != v {
			forms = append(forms, string(j[1:len(j)-1]))
		}
	}
	// Longest first, so that no shorter value splits a longer one.
	slices.SortFunc(forms, func(a, b string) int { return len(b) - len(a) })
	for _, f := range forms {
		text = strings.ReplaceAll(text, f, Redacted)
	}
	for _, f := range forms {
		for n := len(f) - 1; n >= minSecretPiece; n-- {
			if strings.HasSuffix(text, f[:n]) {
				text = text[:len(text)-n] + Redacted
				break
			}
		}
	}
	return text
}

// RedactURL is u as a message may show it: a password is Redacted, where
// url.URL.Redacted would show another placeholder.
func RedactURL(u *url.URL) string {
	if _, ok := u.User.Password(); !ok {
		return u.String()
	}
	c := *u
	c.User = url.UserPassword(u.User.Username(), Redacted)
	return c.String()
}
