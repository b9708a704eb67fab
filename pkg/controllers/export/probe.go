package export

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/tenancy"
)

// reprobeInterval is how often every sink's connection is tested again.
const reprobeInterval = 10 * time.Minute

// reprobeLoop queues every sink for a probe each reprobeInterval.
func (c *Controller) reprobeLoop(ctx context.Context) {
	c.everySink(ctx, reprobeInterval, func(key sinkKey, _ *sinkObject) { c.probes.Add(key) })
}

// probe tests one sink's connection and records the result in its
// status. It returns no error: a failed probe is the sink's status, and
// the sink is probed again when it changes or every reprobeInterval.
func (c *Controller) probe(ctx context.Context, key sinkKey) error {
	obj, err := c.sinkObject(key)
	if err != nil || obj.GetDeletionTimestamp() != nil {
		return nil
	}
	start := time.Now()
	client, err := c.connect(ctx, obj)
	built := err == nil
	if built {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = client.Probe(pctx)
		cancel()
		if err != nil {
			err = sink.WithOutcome(errors.New(client.scrub(err.Error())), err)
		}
		_ = client.Close()
	}
	latency := time.Since(start)
	outcome, msg := probeOutcome(obj, err, built)
	now := metav1.Now()
	probe := applyv1alpha1.ProbeResult().WithTime(now).WithSucceeded(err == nil).WithOutcome(string(outcome)).WithLatencyMillis(latency.Milliseconds())
	cond := metav1apply.Condition().WithType(v1alpha1.ConditionReady).WithObservedGeneration(obj.GetGeneration()).WithLastTransitionTime(now)
	switch {
	case err == nil:
		if obj.tls != nil && obj.tls.InsecureSkipVerify {
			msg += "; WARNING: tls.insecureSkipVerify is set, the server's identity is not verified"
		}
		cond.WithStatus(metav1.ConditionTrue).WithReason(v1alpha1.ReasonProbeSucceeded)
	case outcome == sink.OutcomeSecretForbidden:
		// The same reason the sink requester check writes
		// (SecretForbidden or RequesterExpired), so the two never flap.
		var denial *tenancy.Denial
		errors.As(err, &denial)
		cond.WithStatus(metav1.ConditionFalse).WithReason(denial.Reason)
	default:
		cond.WithStatus(metav1.ConditionFalse).WithReason(v1alpha1.ReasonProbeFailed)
	}
	msg = plumbing.Truncate(strings.ToValidUTF8(msg, ""), 1024)
	probe.WithMessage(msg)
	cond.WithMessage(msg)
	// Keep lastTransitionTime when Ready does not flip.
	if prev := obj.ready(); prev != nil && (prev.Status == metav1.ConditionTrue) == (err == nil) {
		cond.WithLastTransitionTime(prev.LastTransitionTime)
	}
	status := applyv1alpha1.SinkStatus().WithObservedGeneration(obj.GetGeneration()).WithProbe(probe).WithConditions(cond)
	if aerr := applySinkStatus(ctx, c.kollect, key, status, "kollect-sink-prober"); aerr != nil && !apierrors.IsNotFound(aerr) && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Writing a probe result failed", "sink", key, "err", aerr)
	}
	return nil
}

// probeOutcome is what a probe shows: its class and a message built from
// the class, the endpoint's host and port, and phrases of our own. It
// never repeats what answered (a response body, a server's error text):
// the author of a sink learns whether the endpoint works as a sink, not
// what some other service there says. err is scrubbed; built reports
// whether the client was built, so that a failure is a connection's and
// not the spec's or Secret's, whose own message is ours and says what to fix.
func probeOutcome(obj *sinkObject, err error, built bool) (sink.Outcome, string) {
	if err == nil {
		return sink.OutcomeSucceeded, "the sink accepted a connection"
	}
	var denial *tenancy.Denial
	if errors.As(err, &denial) {
		// The Secret is not read on the recorded requester's authority:
		// it may not get it (SecretForbidden), or it expired
		// (RequesterExpired, the condition's reason).
		return sink.OutcomeSecretForbidden, denial.Message
	}
	c := sink.Classify(err)
	switch {
	case c.Outcome == sink.OutcomeAddressForbidden:
		return c.Outcome, c.Refusal.Summary()
	case !built:
		return sink.OutcomeProtocol, err.Error()
	}
	target := endpointTarget(obj)
	var msg string
	switch c.Outcome {
	case sink.OutcomeDNS:
		msg = target + ": the host name did not resolve"
	case sink.OutcomeRefused:
		msg = target + " refused the connection"
	case sink.OutcomeTimeout:
		msg = target + " did not answer in time"
	case sink.OutcomeTLS:
		if c.Detail != "" {
			// The server's identity failed otherwise (an ssh host key).
			return c.Outcome, target + ": " + c.Detail
		}
		msg = "the TLS handshake with " + target + " failed: the certificate is not trusted, names another host, or the server does not speak TLS"
	case sink.OutcomeAuth:
		msg = target + " rejected the credentials"
	case sink.OutcomeHTTPStatus:
		msg = fmt.Sprintf("%s answered HTTP %d", target, c.HTTPStatus)
	default:
		msg = target + " answered, but not as a " + obj.typ + " sink expects"
	}
	if c.Detail != "" {
		msg += ": " + c.Detail
	}
	return c.Outcome, msg
}

// endpointTarget names a sink's endpoint in probe messages: its host and
// port, without path or query.
func endpointTarget(obj *sinkObject) string {
	first, _, many := strings.Cut(obj.endpoint, ",")
	if u, err := url.Parse(strings.TrimSpace(first)); err == nil && u.Host != "" && !many {
		return u.Host
	}
	// A connection string in the Secret, or several NATS servers.
	return "the endpoint"
}
