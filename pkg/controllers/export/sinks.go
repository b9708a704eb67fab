package export

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/klog/v2"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/export/sink/file"
	"kollect.dev/kollect/pkg/controllers/export/sink/git"
	"kollect.dev/kollect/pkg/controllers/export/sink/nats"
	"kollect.dev/kollect/pkg/controllers/export/sink/postgres"
	"kollect.dev/kollect/pkg/controllers/export/sink/webhook"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// sinkClient is a connected sink of one family, with what it was built
// from: a changed sink spec or Secret builds a new one.
type sinkClient struct {
	snapshot sink.SnapshotSink
	database sink.DatabaseSink
	event    sink.EventSink

	fingerprint string
	builtAt     time.Time
	secret      sink.Secret
}

func (s *sinkClient) prober() sink.Prober {
	switch {
	case s.snapshot != nil:
		return s.snapshot
	case s.database != nil:
		return s.database
	default:
		return s.event
	}
}

// Close releases the sink's connections.
func (s *sinkClient) Close() error {
	if s == nil {
		return nil
	}
	if p := s.prober(); p != nil {
		return p.Close()
	}
	return nil
}

// scrub replaces every Secret value in msg: sinks scrub their own errors,
// and this is the second line of defence for status, Events and logs.
func (s *sinkClient) scrub(msg string) string {
	if s == nil {
		return msg
	}
	values := make([]string, 0, len(s.secret))
	for _, v := range s.secret {
		values = append(values, string(v))
	}
	return sink.RedactString(msg, values)
}

func (e *exporter) scrub(msg string) string { return e.client.scrub(msg) }

// ensureClient (re)builds the exporter's sink client when the sink's spec
// or Secret changed, or when the Secret was last read long ago.
func (e *exporter) ensureClient(ctx context.Context, cfg *resolved) error {
	if e.client != nil && e.client.fingerprint == fingerprintOf(cfg.sinkObj) && time.Since(e.client.builtAt) < secretMaxAge {
		return nil
	}
	client, err := e.c.buildClient(ctx, e.key, cfg.sinkObj)
	if err != nil {
		return err
	}
	if e.client != nil {
		_ = e.client.Close()
	}
	e.client = client
	// What the old client's sink held may not be what the new one holds
	// (another endpoint, database or table): find out again.
	e.held = nil
	return nil
}

// fingerprintOf identifies the sink spec a client was built from, so that
// a spec edit rebuilds it at once; the Secret is re-read by age instead
// (secretMaxAge), which keeps GETs of Secrets off the export path.
func fingerprintOf(obj metav1.Object) string {
	return string(obj.GetUID()) + "/" + fmt.Sprint(obj.GetGeneration())
}

// buildClient constructs the sink of an exporter key.
func (c *Controller) buildClient(ctx context.Context, k exporterKey, obj metav1.Object) (*sinkClient, error) {
	secret, _, err := c.readSecret(ctx, obj)
	if err != nil {
		return nil, err
	}
	out := &sinkClient{fingerprint: fingerprintOf(obj), builtAt: time.Now(), secret: secret}
	switch o := obj.(type) {
	case *v1alpha1.SnapshotSink:
		switch o.Spec.Type {
		case v1alpha1.SnapshotSinkFile:
			out.snapshot, err = file.New(&o.Spec, file.Location{Root: c.cfg.FileSinkRoot, Namespace: o.Namespace})
		case v1alpha1.SnapshotSinkGit:
			// Admission refuses file:// without the flag; a sink admitted
			// by a server that had it, or before the flag existed, is
			// refused here.
			if isLocalEndpoint(o.Spec.Endpoint) && !c.cfg.AllowLocalGitSinks {
				err = fmt.Errorf("git repositories on the server's file system (file://) are disabled: the server runs without --allow-local-git-sinks: %w", sink.ErrPermanent)
				break
			}
			out.snapshot, err = git.New(&o.Spec, secret, filepath.Join(c.cfg.StateDir, "git", string(o.UID)), c.cfg.Dialer)
		default:
			err = fmt.Errorf("unknown SnapshotSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	case *v1alpha1.DatabaseSink:
		switch o.Spec.Type {
		case v1alpha1.DatabaseSinkPostgres:
			out.database, err = postgres.New(ctx, &o.Spec, secret, c.cfg.Dialer)
		default:
			err = fmt.Errorf("unknown DatabaseSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	case *v1alpha1.EventSink:
		switch o.Spec.Type {
		case v1alpha1.EventSinkNATS:
			out.event, err = nats.New(&o.Spec, secret, c.cfg.Dialer)
		case v1alpha1.EventSinkWebhook:
			out.event, err = webhook.New(&o.Spec, secret, c.cfg.Dialer)
		default:
			err = fmt.Errorf("unknown EventSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	default:
		err = fmt.Errorf("unexpected sink object %T", obj)
	}
	if err != nil {
		// The class survives the scrubbing: probes and status show it.
		return nil, sink.WithOutcome(errors.New(out.scrub(err.Error())), err)
	}
	return out, nil
}

// isLocalEndpoint reports whether a URL names the server's file system.
// One that does not parse is not local; the sink refuses it itself.
func isLocalEndpoint(endpoint string) bool {
	u, err := url.Parse(endpoint)
	return err == nil && u.Scheme == "file"
}

// sinkKey names a sink object.
type sinkKey struct {
	family          v1alpha1.SinkFamily
	namespace, name string
}

// reprobeInterval is how often every sink's connection is tested again.
const reprobeInterval = 10 * time.Minute

func (c *Controller) reprobeLoop(ctx context.Context) {
	t := time.NewTicker(reprobeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		add := func(family v1alpha1.SinkFamily, objs []metav1.Object) {
			for _, o := range objs {
				c.probes.Add(sinkKey{family: family, namespace: o.GetNamespace(), name: o.GetName()})
			}
		}
		ss, _ := c.snapshotSinks.List(labels.Everything())
		ds, _ := c.databaseSinks.List(labels.Everything())
		es, _ := c.eventSinks.List(labels.Everything())
		add(v1alpha1.SinkFamilySnapshot, toMeta(ss))
		add(v1alpha1.SinkFamilyDatabase, toMeta(ds))
		add(v1alpha1.SinkFamilyEvent, toMeta(es))
	}
}

func toMeta[T metav1.Object](in []T) []metav1.Object {
	out := make([]metav1.Object, len(in))
	for i, o := range in {
		out[i] = o
	}
	return out
}

// processProbe tests one sink's connection and records the result in its status.
func (c *Controller) processProbe(ctx context.Context) bool {
	key, quit := c.probes.Get()
	if quit {
		return false
	}
	defer c.probes.Done(key)
	c.probe(ctx, key)
	c.probes.Forget(key)
	return true
}

func (c *Controller) probe(ctx context.Context, key sinkKey) {
	obj, err := c.sinkObject(exporterKey{family: key.family, namespace: key.namespace, name: key.name})
	if err != nil || obj.GetDeletionTimestamp() != nil {
		return
	}
	start := time.Now()
	client, err := c.buildClient(ctx, exporterKey{family: key.family, namespace: key.namespace, name: key.name}, obj)
	built := err == nil
	if built {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = client.prober().Probe(pctx)
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
		if insecure(obj) {
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
	msg = truncate(strings.ToValidUTF8(msg, ""), 1024)
	probe.WithMessage(msg)
	cond.WithMessage(msg)
	// Keep lastTransitionTime when Ready does not flip.
	if prev := readyCondition(obj); prev != nil && (prev.Status == metav1.ConditionTrue) == (err == nil) {
		cond.WithLastTransitionTime(prev.LastTransitionTime)
	}
	status := applyv1alpha1.SinkStatus().WithObservedGeneration(obj.GetGeneration()).WithProbe(probe).WithConditions(cond)
	if aerr := c.applySinkStatus(ctx, key, status, "kollect-sink-prober"); aerr != nil && !apierrors.IsNotFound(aerr) && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Writing a probe result failed", "sink", key, "err", aerr)
	}
}

// applySinkStatus applies the status fields of one field manager to a
// sink of any family.
func (c *Controller) applySinkStatus(ctx context.Context, key sinkKey, status *applyv1alpha1.SinkStatusApplyConfiguration, manager string) error {
	opts := metav1.ApplyOptions{FieldManager: manager, Force: true}
	api := c.kollect.KollectV1alpha1()
	var err error
	switch key.family {
	case v1alpha1.SinkFamilySnapshot:
		_, err = api.SnapshotSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.SnapshotSink(key.name, key.namespace).WithStatus(status), opts)
	case v1alpha1.SinkFamilyDatabase:
		_, err = api.DatabaseSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.DatabaseSink(key.name, key.namespace).WithStatus(status), opts)
	default:
		_, err = api.EventSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.EventSink(key.name, key.namespace).WithStatus(status), opts)
	}
	return err
}

// probeOutcome is what a probe shows: its class and a message built from
// the class, the endpoint's host and port, and phrases of our own. It
// never repeats what answered (a response body, a server's error text):
// the author of a sink learns whether the endpoint works as a sink, not
// what some other service there says. err is scrubbed; built reports
// whether the client was built, so that a failure is a connection's and
// not the spec's or Secret's, whose own message is ours and says what to fix.
func probeOutcome(obj metav1.Object, err error, built bool) (sink.Outcome, string) {
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
		msg = target + " answered, but not as a " + sinkType(obj) + " sink expects"
	}
	if c.Detail != "" {
		msg += ": " + c.Detail
	}
	return c.Outcome, msg
}

// endpointTarget names a sink's endpoint in probe messages: its host and
// port, without path or query.
func endpointTarget(obj metav1.Object) string {
	var endpoint string
	switch o := obj.(type) {
	case *v1alpha1.SnapshotSink:
		endpoint = o.Spec.Endpoint
	case *v1alpha1.DatabaseSink:
		endpoint = o.Spec.Endpoint
	case *v1alpha1.EventSink:
		endpoint = o.Spec.Endpoint
	}
	first, _, many := strings.Cut(endpoint, ",")
	if u, err := url.Parse(strings.TrimSpace(first)); err == nil && u.Host != "" && !many {
		return u.Host
	}
	// A connection string in the Secret, or several NATS servers.
	return "the endpoint"
}

func insecure(obj metav1.Object) bool {
	var t *v1alpha1.TLSConfig
	switch o := obj.(type) {
	case *v1alpha1.SnapshotSink:
		t = o.Spec.TLS
	case *v1alpha1.DatabaseSink:
		t = o.Spec.TLS
	case *v1alpha1.EventSink:
		t = o.Spec.TLS
	}
	return t != nil && t.InsecureSkipVerify
}

func readyCondition(obj metav1.Object) *metav1.Condition {
	var conds []metav1.Condition
	switch o := obj.(type) {
	case *v1alpha1.SnapshotSink:
		conds = o.Status.Conditions
	case *v1alpha1.DatabaseSink:
		conds = o.Status.Conditions
	case *v1alpha1.EventSink:
		conds = o.Status.Conditions
	}
	for i := range conds {
		if conds[i].Type == v1alpha1.ConditionReady {
			return &conds[i]
		}
	}
	return nil
}
