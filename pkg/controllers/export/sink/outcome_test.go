package sink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"syscall"
	"testing"

	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/netguard"
)

func TestClassify(t *testing.T) {
	refusal := &netguard.Error{Host: "db.test", Addr: netip.MustParseAddr("10.0.0.1"), Class: netguard.Private}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for name, tc := range map[string]struct {
		err  error
		want Outcome
	}{
		"refusal":            {fmt.Errorf("connecting: %w", refusal), OutcomeAddressForbidden},
		"refusal in a join":  {errors.Join(errors.New("first host: EOF"), refusal), OutcomeAddressForbidden},
		"refusal over marks": {fmt.Errorf("%w: %w", &Classified{Outcome: OutcomeAuth}, refusal), OutcomeAddressForbidden},
		"marked":             {fmt.Errorf("probe: %w", &Classified{Outcome: OutcomeAuth}), OutcomeAuth},
		"dns":                {fmt.Errorf("dial: %w", &net.DNSError{Err: "no such host", Name: "x.test", IsNotFound: true}), OutcomeDNS},
		"connection refused": {fmt.Errorf("dial: %w", refused), OutcomeRefused},
		"deadline":           {fmt.Errorf("probe: %w", context.DeadlineExceeded), OutcomeTimeout},
		"not tls":            {fmt.Errorf("handshake: %w", tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}), OutcomeTLS},
		"anything else":      {errors.New("unexpected EOF"), OutcomeProtocol},
	} {
		if got := Classify(tc.err); got == nil || got.Outcome != tc.want {
			t.Errorf("%s: Classify(%v) = %+v, want %s", name, tc.err, got, tc.want)
		}
	}
	if Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
	if c := Classify(refusal); c.Refusal != refusal {
		t.Errorf("the refusal is not kept: %+v", c)
	}
}

// WithOutcome keeps the class for errors.As, not the raw error.
func TestWithOutcome(t *testing.T) {
	raw := fmt.Errorf("password=hunter2: %w", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	err := WithOutcome(errors.New("password=***"), raw)
	if err.Error() != "password=***" {
		t.Errorf("message %q", err)
	}
	var c *Classified
	if !errors.As(err, &c) || c.Outcome != OutcomeRefused {
		t.Errorf("class %+v, want Refused", c)
	}
	var op *net.OpError
	if errors.As(err, &op) || errors.Is(err, syscall.ECONNREFUSED) {
		t.Error("the scrubbed error unwraps to the raw one")
	}
	if WithOutcome(nil, raw) != nil {
		t.Error("WithOutcome(nil) is not nil")
	}
}

// TestOutcomesValidate: every outcome the prober writes is one the status
// validation accepts, and the validation accepts no other.
func TestOutcomesValidate(t *testing.T) {
	ours := []Outcome{OutcomeSucceeded, OutcomeAddressForbidden, OutcomeDNS, OutcomeRefused, OutcomeTimeout, OutcomeTLS, OutcomeAuth, OutcomeHTTPStatus, OutcomeProtocol, OutcomeSecretForbidden}
	if len(ours) != len(validation.ProbeOutcomes) {
		t.Errorf("the prober has %d outcomes, the validation accepts %d: %v", len(ours), len(validation.ProbeOutcomes), validation.ProbeOutcomes)
	}
	for _, o := range ours {
		if !slices.Contains(validation.ProbeOutcomes, string(o)) {
			t.Errorf("outcome %q is not accepted by validation.ProbeOutcomes", o)
		}
	}
}
