package tenancy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// Admission counts objects: creating one beyond its quota (pkg/tenancy's
// QuotaSet) is 403 Forbidden, as kube's ResourceQuota answers, naming the
// Scope, the field, the count and the limit. Counting reads the server's
// watch cache once it holds this replica's last create of the kind (a
// consistent read would wait for etcd's next progress notification,
// ~100 ms per create) and adds the creates this replica admitted and is
// still writing (ledger.go), so a replica never overshoots, and creates do
// not wait for each other's writes. A count that would refuse is read
// again from etcd: a deletion the cache has not seen yet never refuses a
// create. Replicas share no ledger: creates reaching two at the same moment
// may overshoot by one each.

// QuotaLookups list what the quotas count, in process.
type QuotaLookups struct {
	Targets, ClusterTargets, Profiles, Inventories, ClusterInventories rest.Lister
	// Sinks are the three sink kinds, counted together.
	Sinks []rest.Lister
}

// Counted is a kind whose objects a quota counts.
type Counted struct {
	// resource names the counted objects in messages, as ResourceQuota
	// names its resources: targets, sinks, clustertargets, ...
	resource string
	// cluster kinds count against the ClusterScopes' quota; sinks against
	// their namespace's and the ClusterScopes' cluster-wide maxSinks.
	cluster, sinks bool
	quota          func(tenancy.QuotaSet) tenancy.Quota
	listers        func(QuotaLookups) []rest.Lister
}

// The kinds quotas count.
var (
	CountTargets = Counted{resource: "targets", quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Targets },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Targets} }}
	CountClusterTargets = Counted{resource: "clustertargets", cluster: true, quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Targets },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.ClusterTargets} }}
	CountProfiles = Counted{resource: "profiles", quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Profiles },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Profiles} }}
	CountInventories = Counted{resource: "inventories", quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Inventories },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Inventories} }}
	CountClusterInventories = Counted{resource: "clusterinventories", cluster: true, quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Inventories },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.ClusterInventories} }}
	CountSinks = Counted{resource: "sinks", sinks: true, quota: func(q tenancy.QuotaSet) tenancy.Quota { return q.Sinks },
		listers: func(l QuotaLookups) []rest.Lister { return l.Sinks }}
)

// WithQuota adds the quota of what to a kind's admission: a create that
// the kind's own checks admit is refused when the namespace (or the
// cluster) already holds as many as its quota allows. Sinks also count
// against a ClusterScope's cluster-wide maxSinks. Updates change no count.
func (c *Checker) WithQuota(what Counted, a Admission) Admission {
	if c == nil {
		return a
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error {
			if err := a.AdmitCreate(ctx, obj); err != nil {
				return err
			}
			return c.admitCounted(ctx, what, obj)
		},
		Update: a.Update,
		Begin: func(ctx context.Context) (context.Context, func(runtime.Object)) {
			t := &createTicket{ledger: c.ledger(what.lockKey(genericapirequest.NamespaceValue(ctx)))}
			return context.WithValue(ctx, ticketKey{}, t), t.finish
		},
	}
}

// admitCounted checks the quotas of a create and, when they allow it,
// holds it in the ledger of what until the registry finishes it, in one
// step under the ledger's lock.
func (c *Checker) admitCounted(ctx context.Context, what Counted, obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	l := c.ledger(what.lockKey(m.GetNamespace()))
	t := ticketFrom(ctx)
	if t != nil && t.ledger != l {
		t = nil // not this kind's ticket: count, hold nothing
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t != nil {
		t.release()
	}
	if err := c.checkQuota(ctx, what, obj, l); err != nil {
		return err
	}
	if t != nil {
		h := heldCreate{kind: kindOf(obj), namespace: m.GetNamespace(), name: m.GetName()}
		l.held[h]++
		t.held = &h
	}
	return nil
}

// lockKey names the ledger of a create in namespace, whose lock its quota
// checks hold: everything its quotas count. Sinks count across namespaces
// (ClusterScope maxSinks), so all sink creates share one key; the others,
// their kind in their namespace. One key per create, so checks never wait
// on each other in a cycle.
func (what Counted) lockKey(namespace string) string {
	if what.sinks || what.cluster {
		return what.resource
	}
	return what.resource + "/" + namespace
}

// checkQuota refuses obj when a quota it counts against is full; the caller
// holds l.mu.
func (c *Checker) checkQuota(ctx context.Context, what Counted, obj runtime.Object, l *ledger) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	namespace := m.GetNamespace()
	var checks []quotaCheck
	if what.cluster || what.sinks {
		qs, err := c.clusterQuotas(ctx)
		if err != nil {
			return err
		}
		if what.cluster {
			checks = append(checks, quotaCheck{what.quota(qs), ""})
		} else {
			// All namespaces together.
			checks = append(checks, quotaCheck{qs.ClusterSinks, metav1.NamespaceAll})
		}
	}
	if !what.cluster {
		qs, err := c.namespaceQuotas(ctx, namespace)
		if err != nil {
			return err
		}
		checks = append(checks, quotaCheck{what.quota(qs), namespace})
	}
	for _, qc := range checks {
		if !qc.quota.Set {
			continue
		}
		used, err := c.count(ctx, what, qc.namespace, l, false)
		if err == nil && !qc.quota.Allows(used+1) {
			used, err = c.count(ctx, what, qc.namespace, l, true)
		}
		if err != nil {
			return fmt.Errorf("counting %s for the quota: %w", what.resource, err)
		}
		if !qc.quota.Allows(used + 1) {
			msg := fmt.Sprintf("exceeded quota: %s, requested: %s=1, used: %s=%d, limited: %s=%d",
				qc.quota.By, what.resource, what.resource, used, what.resource, qc.quota.Limit)
			return apierrors.NewForbidden(resourceOf(obj, what), m.GetName(), errors.New(msg))
		}
	}
	return nil
}

// kindOf names an object's Go type ("EventSink", "EventSinkList").
func kindOf(obj runtime.Object) string { return reflect.TypeOf(obj).Elem().Name() }

// quotaCheck is one quota a create must fit, counted in namespace (all
// namespaces, or the cluster kinds, when empty).
type quotaCheck struct {
	quota     tenancy.Quota
	namespace string
}

// resourceOf is the resource of the refused object, for the 403.
func resourceOf(obj runtime.Object, what Counted) schema.GroupResource {
	switch obj.(type) {
	case *kollect.SnapshotSink:
		return kollect.Resource("snapshotsinks")
	case *kollect.DatabaseSink:
		return kollect.Resource("databasesinks")
	case *kollect.EventSink:
		return kollect.Resource("eventsinks")
	}
	return kollect.Resource(what.resource)
}

// count is how many objects of what exist in namespace (all when empty),
// or will once the creates held in l are stored: listed from the watch
// cache once it holds this replica's last create under l, or from etcd
// when consistent is set. The caller holds l.mu.
func (c *Checker) count(ctx context.Context, what Counted, namespace string, l *ledger, consistent bool) (int64, error) {
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	var n int64
	for _, lister := range what.listers(c.lookups.Quota) {
		if lister == nil {
			continue
		}
		kind := strings.TrimSuffix(kindOf(lister.NewList()), "List")
		opts := &metainternalversion.ListOptions{}
		if !consistent {
			opts.ResourceVersion = "0"
			if rv := l.stored[kind]; rv > 0 {
				opts.ResourceVersion, opts.ResourceVersionMatch = strconv.FormatUint(rv, 10), metav1.ResourceVersionMatchNotOlderThan
			}
		}
		out, err := lister.List(ctx, opts)
		if storage.IsTooLargeResourceVersion(err) {
			// The cache did not catch up in time: ask etcd.
			out, err = lister.List(ctx, &metainternalversion.ListOptions{})
		}
		if err != nil {
			return 0, err
		}
		n += int64(meta.LenList(out))
		if held := l.heldIn(kind, namespace); len(held) > 0 {
			// A held create the listing already shows counts once.
			_ = meta.EachListItem(out, func(o runtime.Object) error {
				if m, err := meta.Accessor(o); err == nil {
					delete(held, m.GetNamespace()+"/"+m.GetName())
				}
				return nil
			})
			n += int64(len(held))
		}
	}
	return n, nil
}

// namespaceQuotas are the quotas of a namespace, read from its Scopes.
func (c *Checker) namespaceQuotas(ctx context.Context, namespace string) (tenancy.QuotaSet, error) {
	scopes, err := c.listScopes(ctx, namespace)
	if err != nil {
		return tenancy.QuotaSet{}, err
	}
	return tenancy.NamespaceQuotas(namespace, scopes, c.cfg.Quotas), nil
}

// clusterQuotas are the quotas of the cluster kinds, read from the ClusterScopes.
func (c *Checker) clusterQuotas(ctx context.Context) (tenancy.QuotaSet, error) {
	scopes, err := c.listClusterScopes(ctx)
	if err != nil {
		return tenancy.QuotaSet{}, err
	}
	return tenancy.ClusterQuotas(scopes, c.cfg.Quotas), nil
}

// Scopes: a quota set above the server's default (--default-max-*) needs
// `escalate` on scopes in the Scope's namespace, ratcheted
// (tenancy.RaisedQuotas).
func (c *Checker) Scopes() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, s, old *kollect.Scope) error {
		v := newVerdict("scopes", "Scope", s.Name)
		c.checkEscalate(ctx, v, s, tenancy.RaisedQuotas(s, old, c.cfg.Quotas))
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error { return admit(ctx, obj.(*kollect.Scope), nil) },
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			return admit(ctx, obj.(*kollect.Scope), old.(*kollect.Scope))
		},
	}
}

// checkEscalate requires `escalate` on the Scope s when it raises quotas.
func (c *Checker) checkEscalate(ctx context.Context, v *verdict, s *kollect.Scope, raised []tenancy.RaisedQuota) {
	if len(raised) == 0 || c.cfg.Authorizer == nil {
		return
	}
	ok, why := c.authorize(ctx, tenancy.EscalateAttributes(s.Namespace, s.Name))
	if ok {
		return
	}
	for _, r := range raised {
		msg := fmt.Sprintf("%s: %s is above the server default %s (--default-max-%s): raising a quota above the default requires the verb %q on scopes.%s in namespace %q, which user %q does not hold",
			specPath.Child(r.Field.Name), r.Field.Show(r.Value), r.Field.Show(r.Default), r.Field.Flag, tenancy.VerbEscalate, kollect.GroupName, s.Namespace, userName(ctx))
		if why != "" {
			msg += " (" + why + ")"
		}
		v.denied = append(v.denied, msg)
	}
}
