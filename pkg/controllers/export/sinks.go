package export

import (
	"context"
	"errors"
	"fmt"
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
	for _, v := range s.secret {
		if len(v) >= 4 {
			msg = strings.ReplaceAll(msg, string(v), "***")
		}
	}
	return msg
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
			out.snapshot, err = file.New(&o.Spec)
		case v1alpha1.SnapshotSinkGit:
			out.snapshot, err = git.New(&o.Spec, secret, filepath.Join(c.cfg.StateDir, "git", string(o.UID)))
		default:
			err = fmt.Errorf("unknown SnapshotSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	case *v1alpha1.DatabaseSink:
		switch o.Spec.Type {
		case v1alpha1.DatabaseSinkPostgres:
			out.database, err = postgres.New(ctx, &o.Spec, secret)
		default:
			err = fmt.Errorf("unknown DatabaseSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	case *v1alpha1.EventSink:
		switch o.Spec.Type {
		case v1alpha1.EventSinkNATS:
			out.event, err = nats.New(&o.Spec, secret)
		case v1alpha1.EventSinkWebhook:
			out.event, err = webhook.New(&o.Spec, secret)
		default:
			err = fmt.Errorf("unknown EventSink type %q: %w", o.Spec.Type, sink.ErrPermanent)
		}
	default:
		err = fmt.Errorf("unexpected sink object %T", obj)
	}
	if err != nil {
		return nil, errors.New(out.scrub(err.Error()))
	}
	return out, nil
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
	var msg string
	client, err := c.buildClient(ctx, exporterKey{family: key.family, namespace: key.namespace, name: key.name}, obj)
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = client.prober().Probe(pctx)
		cancel()
		if err != nil {
			msg = client.scrub(err.Error())
		}
		_ = client.Close()
	} else {
		msg = err.Error()
	}
	latency := time.Since(start)
	now := metav1.Now()
	probe := applyv1alpha1.ProbeResult().WithTime(now).WithSucceeded(err == nil).WithLatencyMillis(latency.Milliseconds())
	cond := metav1apply.Condition().WithType(v1alpha1.ConditionReady).WithObservedGeneration(obj.GetGeneration()).WithLastTransitionTime(now)
	if err == nil {
		msg = "the sink accepted a connection"
		if insecure(obj) {
			msg += "; WARNING: tls.insecureSkipVerify is set, the server's identity is not verified"
		}
		cond.WithStatus(metav1.ConditionTrue).WithReason(v1alpha1.ReasonProbeSucceeded)
	} else {
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
	opts := metav1.ApplyOptions{FieldManager: "kollect-sink-prober", Force: true}
	api := c.kollect.KollectV1alpha1()
	var aerr error
	switch key.family {
	case v1alpha1.SinkFamilySnapshot:
		_, aerr = api.SnapshotSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.SnapshotSink(key.name, key.namespace).WithStatus(status), opts)
	case v1alpha1.SinkFamilyDatabase:
		_, aerr = api.DatabaseSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.DatabaseSink(key.name, key.namespace).WithStatus(status), opts)
	default:
		_, aerr = api.EventSinks(key.namespace).ApplyStatus(ctx, applyv1alpha1.EventSink(key.name, key.namespace).WithStatus(status), opts)
	}
	if aerr != nil && !apierrors.IsNotFound(aerr) && ctx.Err() == nil {
		klog.FromContext(ctx).V(2).Info("Writing a probe result failed", "sink", key, "err", aerr)
	}
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
