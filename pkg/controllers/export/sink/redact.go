package sink

import (
	"errors"
	"strings"
)

// Redact returns err with every one of secrets replaced by "[redacted]" in
// its message (pass the longest values first). The result still answers
// errors.Is for what err matched (ErrPermanent, context errors) but does
// not unwrap, so the original text cannot be reached.
func Redact(err error, secrets []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, v := range secrets {
		out = strings.ReplaceAll(out, v, "[redacted]")
	}
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
