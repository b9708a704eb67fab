package export

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/export/sink"
	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/tenancy"
)

// resolved is an exporter's configuration for one run, read from the caches.
type resolved struct {
	inventory  sink.Inventory
	generation int64
	entry      *v1alpha1.SinkExportStatus
	sinkFound  bool
	sink       *sinkObject
	sinkType   string
	interval   time.Duration
}

// entrySays reports whether the exporter's entry already shows this
// outcome, reason and message at this generation: writing it again would
// change nothing a reader looks at.
func (r *resolved) entrySays(outcome v1alpha1.ExportOutcome, reason, message string) bool {
	e := r.entry
	return e != nil && e.Outcome == outcome && e.Reason == reason && e.ObservedGeneration == r.generation &&
		e.Message == entryMessage(message)
}

// resolveFailure is a reference that does not resolve; reported as the entry's reason.
type resolveFailure struct{ reason, message string }

func (r *resolveFailure) Error() string { return r.reason + ": " + r.message }

// errInventoryDeleting is resolve's answer for an inventory being deleted.
var errInventoryDeleting = errors.New("the inventory is being deleted")

// resolve reads an exporter's configuration and re-checks its reference:
// the inventory's requester must not have expired, the sink must exist, the
// Scopes (or ClusterScopes) must still allow it, the requester recorded on
// the inventory must still hold `use` on it and `list` on the items, and
// the sink's own requester must not have expired and may still `get` its
// Secret. A reference that fails is a resolveFailure, reported in the entry.
func (c *Controller) resolve(ctx context.Context, k exporterKey) (*resolved, error) {
	obj, err := c.getInventory(k.inv)
	if err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, errors.New("inventory gone")
	}
	inv, err := inventoryOf(obj)
	if err != nil {
		return nil, err
	}
	if inv.meta.DeletionTimestamp != nil {
		// The controller stops the exporters and cleans up. Until then an
		// exporter must not take the deletion's generation bump for a
		// spec change and restate everything it is about to remove.
		return nil, errInventoryDeleting
	}
	out := &resolved{inventory: c.sinkInventory(k.inv, inv.meta), generation: inv.generation, sinkType: "unknown"}
	for i := range inv.status.SinkExports {
		e := &inv.status.SinkExports[i]
		if e.Family == k.family && e.Name == k.name && (e.Namespace == "" || e.Namespace == k.namespace) {
			out.entry = e
		}
	}
	var ref *sinkRef
	for i := range inv.refs {
		r := &inv.refs[i]
		if r.family == k.family && r.namespace == k.namespace && r.name == k.name {
			ref = r
		}
	}
	if ref == nil {
		return nil, errors.New("reference removed")
	}
	kind, refType := k.inv.Kind(), string(k.family)+"Sink"
	sinkObj, failure, err := c.resolveCached(k)
	if failure != nil {
		if failure.reason == v1alpha1.ReasonSinkNotFound {
			metrics.Resolved(kind, refType, metrics.ResolutionNotFound)
		}
		return out, failure
	}
	if err != nil {
		return nil, err
	}
	out.sinkFound, out.sink, out.sinkType = true, sinkObj, sinkObj.typ
	limits := c.limits(k.inv)
	denial := tenancy.RequesterExpired(inv.status.Requester, c.cfg.RequesterMaxAge, time.Now())
	if denial == nil {
		denial = limits.Sink(kollect.SinkFamily(k.family), k.namespace, k.name, k.inv.Cluster)
	}
	if denial == nil && c.cfg.Authorizer != nil {
		denial, err = tenancy.MayUse(ctx, c.cfg.Authorizer, inv.status.Requester, tenancy.ResourceOf(kollect.SinkFamily(k.family)), k.namespace, k.name)
		if err != nil {
			return nil, err
		}
	}
	if denial == nil && c.cfg.Authorizer != nil {
		// An export is a read of the items, on the requester's authority.
		itemsNS := k.inv.Namespace
		if k.inv.Cluster {
			itemsNS = ""
		}
		if denial, err = tenancy.MayListItems(ctx, c.cfg.Authorizer, inv.status.Requester, itemsNS); err != nil {
			return nil, err
		}
	}
	if denial == nil {
		if denial, err = c.sinkDenial(ctx, sinkObj); err != nil {
			return nil, err
		}
	}
	if denial != nil {
		metrics.Resolved(kind, refType, metrics.ResolutionForbidden)
		return out, &resolveFailure{reason: denial.Reason, message: denial.Message}
	}
	metrics.Resolved(kind, refType, metrics.ResolutionOK)
	out.interval = EffectiveInterval(ref.interval, sinkObj.interval, inv.interval, limits.Floor())
	return out, nil
}

// resolveCached runs the checks of resolve that read nothing but the
// caches, in resolve's order: tenant mode exports no ClusterInventory, and
// the sink must exist.
func (c *Controller) resolveCached(k exporterKey) (*sinkObject, *resolveFailure, error) {
	if c.cfg.TenantMode && k.inv.Cluster {
		d := tenancy.TenantModeDenial(k.inv.Kind())
		return nil, &resolveFailure{reason: d.Reason, message: d.Message}, nil
	}
	sinkObj, err := c.sinkObject(sinkKey{family: k.family, namespace: k.namespace, name: k.name})
	if apierrors.IsNotFound(err) {
		return nil, &resolveFailure{reason: v1alpha1.ReasonSinkNotFound,
			message: fmt.Sprintf("%sSink %s/%s does not exist", k.family, k.namespace, k.name)}, nil
	}
	return sinkObj, nil, err
}

// limits are the Scopes of the inventory's namespace, or the ClusterScopes
// for a ClusterInventory; all of them apply, the strictest wins.
func (c *Controller) limits(k plumbing.InventoryKey) tenancy.Limits {
	if k.Cluster {
		list, _ := c.clusterScopes.List(labels.Everything())
		return tenancy.ClusterScopeLimits(list)
	}
	list, _ := c.scopes.Scopes(k.Namespace).List(labels.Everything())
	return tenancy.ScopeLimits(list)
}

// sinkObject reads a sink from the cache.
func (c *Controller) sinkObject(k sinkKey) (*sinkObject, error) {
	var obj metav1.Object
	var err error
	switch k.family {
	case v1alpha1.SinkFamilySnapshot:
		obj, err = c.snapshotSinks.SnapshotSinks(k.namespace).Get(k.name)
	case v1alpha1.SinkFamilyDatabase:
		obj, err = c.databaseSinks.DatabaseSinks(k.namespace).Get(k.name)
	default:
		obj, err = c.eventSinks.EventSinks(k.namespace).Get(k.name)
	}
	if err != nil {
		return nil, err
	}
	return sinkObjectOf(obj)
}

// readSecret reads a sink's Secret from the host cluster. Its data never
// leaves the sink client. A sink that may not be used on its requester's
// authority (sinkDenial) is refused with the *tenancy.Denial, before
// anything is read: the exporter and the prober build every sink client
// through here.
func (c *Controller) readSecret(ctx context.Context, obj *sinkObject) (sink.Secret, string, error) {
	denial, err := c.sinkDenial(ctx, obj)
	if err != nil {
		return nil, "", err
	}
	if denial != nil {
		return nil, "", denial
	}
	ref := obj.secretRef
	if ref == nil {
		return nil, "", nil
	}
	s, err := c.kube.CoreV1().Secrets(obj.GetNamespace()).Get(ctx, ref.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("Secret %s/%s does not exist: %w", obj.GetNamespace(), ref.Name, sink.ErrPermanent)
		}
		return nil, "", fmt.Errorf("reading Secret %s/%s: %w", obj.GetNamespace(), ref.Name, err)
	}
	return sink.Secret(s.Data), s.ResourceVersion, nil
}

// sinkDenial re-checks what a sink does on its own requester's authority:
// the requester must not have expired (--requester-max-age) and, for a
// sink with a secretRef, must still be allowed to `get` the Secret. An
// error means the authorizer could not answer: retry, change nothing.
func (c *Controller) sinkDenial(ctx context.Context, obj *sinkObject) (*tenancy.Denial, error) {
	requester := obj.status.Requester
	if d := tenancy.RequesterExpired(requester, c.cfg.RequesterMaxAge, time.Now()); d != nil {
		d.Message = "the sink's requester: " + d.Message
		return d, nil
	}
	ref := obj.secretRef
	if ref == nil || c.cfg.Authorizer == nil {
		return nil, nil
	}
	return tenancy.MayGetSecret(ctx, c.cfg.Authorizer, requester, obj.GetNamespace(), ref.Name)
}
