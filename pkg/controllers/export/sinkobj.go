package export

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	applyv1alpha1 "kollect.dev/kollect/pkg/generated/applyconfiguration/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/generated/clientset/versioned"
)

// sinkKey names a sink object.
type sinkKey struct {
	family          v1alpha1.SinkFamily
	namespace, name string
}

// kind is the sink's kind: SnapshotSink, DatabaseSink or EventSink.
func (k sinkKey) kind() string { return string(k.family) + "Sink" }

// sinkObject is a sink of any family, read once through the one switch
// over the three kinds: the controller and the exporters use its fields
// and never look at the typed object again.
type sinkObject struct {
	metav1.Object
	family   v1alpha1.SinkFamily
	typ      string
	endpoint string
	// interval is spec.exportMinInterval (nil when unset).
	interval  *time.Duration
	secretRef *v1alpha1.LocalObjectReference
	policy    v1alpha1.DeletionPolicy
	tls       *v1alpha1.TLSConfig
	status    *v1alpha1.SinkStatus
	// build constructs the sink through its family's registry.
	build func(ctx context.Context, p sink.Params) (*adapter, error)
}

func sinkObjectOf(obj metav1.Object) (*sinkObject, error) {
	switch o := obj.(type) {
	case *v1alpha1.SnapshotSink:
		return &sinkObject{Object: o, family: v1alpha1.SinkFamilySnapshot, typ: string(o.Spec.Type), endpoint: o.Spec.Endpoint,
			interval: durationPtr(o.Spec.ExportMinInterval), secretRef: o.Spec.SecretRef, policy: o.Spec.DeletionPolicy,
			tls: o.Spec.TLS, status: &o.Status,
			build: func(ctx context.Context, p sink.Params) (*adapter, error) {
				s, err := sink.Snapshots.Build(ctx, string(o.Spec.Type), &o.Spec, p)
				if err != nil {
					return nil, err
				}
				return &adapter{deliverer: &snapshotAdapter{s: s}, Prober: s}, nil
			}}, nil
	case *v1alpha1.DatabaseSink:
		return &sinkObject{Object: o, family: v1alpha1.SinkFamilyDatabase, typ: string(o.Spec.Type), endpoint: o.Spec.Endpoint,
			interval: durationPtr(o.Spec.ExportMinInterval), secretRef: o.Spec.SecretRef, policy: o.Spec.DeletionPolicy,
			tls: o.Spec.TLS, status: &o.Status,
			build: func(ctx context.Context, p sink.Params) (*adapter, error) {
				s, err := sink.Databases.Build(ctx, string(o.Spec.Type), &o.Spec, p)
				if err != nil {
					return nil, err
				}
				return &adapter{deliverer: &databaseAdapter{s: s}, Prober: s}, nil
			}}, nil
	case *v1alpha1.EventSink:
		return &sinkObject{Object: o, family: v1alpha1.SinkFamilyEvent, typ: string(o.Spec.Type), endpoint: o.Spec.Endpoint,
			interval: durationPtr(o.Spec.ExportMinInterval), secretRef: o.Spec.SecretRef, policy: o.Spec.DeletionPolicy,
			tls: o.Spec.TLS, status: &o.Status,
			build: func(ctx context.Context, p sink.Params) (*adapter, error) {
				s, err := sink.Events.Build(ctx, string(o.Spec.Type), &o.Spec, p)
				if err != nil {
					return nil, err
				}
				return &adapter{deliverer: &eventAdapter{s: s}, Prober: s}, nil
			}}, nil
	}
	return nil, fmt.Errorf("unexpected sink object %T", obj)
}

// ready is the sink's Ready condition, or nil.
func (s *sinkObject) ready() *metav1.Condition {
	for i := range s.status.Conditions {
		if s.status.Conditions[i].Type == v1alpha1.ConditionReady {
			return &s.status.Conditions[i]
		}
	}
	return nil
}

// applySinkStatus applies the status fields of one field manager to a sink.
func applySinkStatus(ctx context.Context, kc versioned.Interface, key sinkKey, status *applyv1alpha1.SinkStatusApplyConfiguration, manager string) error {
	opts := metav1.ApplyOptions{FieldManager: manager, Force: true}
	api := kc.KollectV1alpha1()
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

// allSinks lists every sink of the three families from the caches.
func (c *Controller) allSinks() []*sinkObject {
	ss, _ := c.snapshotSinks.List(labels.Everything())
	ds, _ := c.databaseSinks.List(labels.Everything())
	es, _ := c.eventSinks.List(labels.Everything())
	out := make([]*sinkObject, 0, len(ss)+len(ds)+len(es))
	add := func(obj metav1.Object) {
		if o, err := sinkObjectOf(obj); err == nil {
			out = append(out, o)
		}
	}
	for _, o := range ss {
		add(o)
	}
	for _, o := range ds {
		add(o)
	}
	for _, o := range es {
		add(o)
	}
	return out
}

// everySink calls f for every sink in the caches once per period, until
// ctx is done.
func (c *Controller) everySink(ctx context.Context, period time.Duration, f func(key sinkKey, obj *sinkObject)) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, obj := range c.allSinks() {
			if ctx.Err() != nil {
				return
			}
			f(sinkKey{family: obj.family, namespace: obj.GetNamespace(), name: obj.GetName()}, obj)
		}
	}
}
