package export

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/tenancy"
)

// A probe's message is built from its class, the endpoint's host and port
// and our own phrases: what the endpoint answered never shows.
func TestProbeOutcome(t *testing.T) {
	hook := &v1alpha1.EventSink{Spec: v1alpha1.EventSinkSpec{Type: v1alpha1.EventSinkWebhook, Endpoint: "https://hooks.example.com:8443/in?x=1"}}
	db := &v1alpha1.DatabaseSink{Spec: v1alpha1.DatabaseSinkSpec{Type: v1alpha1.DatabaseSinkPostgres}}
	const body = "internal-service-banner v1.2 secret=abc"
	answered := func(c *sink.Classified) error {
		return sink.WithOutcome(fmt.Errorf("endpoint answered: %q", body), fmt.Errorf("%q: %w", body, c))
	}
	refusal := &netguard.Error{Host: "hooks.example.com", Addr: netip.MustParseAddr("10.1.2.3"), Class: netguard.Private}
	for _, tc := range []struct {
		name    string
		obj     metav1.Object
		err     error
		built   bool
		outcome sink.Outcome
		message string
	}{
		{"success", hook, nil, true, sink.OutcomeSucceeded, "the sink accepted a connection"},
		{"refused address", hook, sink.WithOutcome(errors.New("x"), fmt.Errorf("dial: %w", refusal)), true,
			sink.OutcomeAddressForbidden, "hooks.example.com resolves to a private address: sinks may not reach"},
		{"http status", hook, answered(&sink.Classified{Outcome: sink.OutcomeHTTPStatus, HTTPStatus: 500}), true,
			sink.OutcomeHTTPStatus, "hooks.example.com:8443 answered HTTP 500"},
		{"auth", hook, answered(&sink.Classified{Outcome: sink.OutcomeAuth, HTTPStatus: 401}), true,
			sink.OutcomeAuth, "hooks.example.com:8443 rejected the credentials"},
		{"timeout", hook, sink.WithOutcome(errors.New("x"), context.DeadlineExceeded), true,
			sink.OutcomeTimeout, "hooks.example.com:8443 did not answer in time"},
		{"protocol", db, answered(&sink.Classified{Outcome: sink.OutcomeProtocol, Detail: "the server answered SQLSTATE 3D000"}), true,
			sink.OutcomeProtocol, "the endpoint answered, but not as a postgres sink expects: the server answered SQLSTATE 3D000"},
		{"configuration", db, errors.New("postgres sink configuration: secret key dsn sets passfile, which a sink may not"), false,
			sink.OutcomeProtocol, "secret key dsn sets passfile"},
		{"secret forbidden", db, &tenancy.Denial{Reason: v1alpha1.ReasonSecretForbidden, Message: `user "alice" may not get Secret team-a/db`}, false,
			sink.OutcomeSecretForbidden, `user "alice" may not get Secret team-a/db`},
	} {
		obj, err := sinkObjectOf(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		outcome, msg := probeOutcome(obj, tc.err, tc.built)
		if outcome != tc.outcome || !strings.Contains(msg, tc.message) {
			t.Errorf("%s: %s %q, want %s with %q", tc.name, outcome, msg, tc.outcome, tc.message)
		}
		if strings.Contains(msg, "banner") || strings.Contains(msg, "10.1.2.3") {
			t.Errorf("%s: the message shows what answered or the resolved address: %q", tc.name, msg)
		}
	}
}
