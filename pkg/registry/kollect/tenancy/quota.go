package tenancy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// Quotas keep one tenant from taking what the others need (DESIGN.md §10).
// A Scope limits its namespace: how many Targets, Inventories and sinks it
// may hold, how many items its Targets may hold together and how large one
// item may be. A ClusterScope limits the cluster kinds the same way and may
// cap the sinks of all namespaces together. As for the other limits, when
// several Scopes (or ClusterScopes) set a quota the lowest applies; when
// none does, the server's default (--default-max-*) applies.
//
// Admission counts objects: creating one beyond its quota is 403 Forbidden,
// as kube's ResourceQuota answers, naming the Scope, the field, the count
// and the limit. Counting reads the server's watch cache once it holds
// this replica's last create of the kind (a consistent read would wait for
// etcd's next progress notification, ~100 ms per create) and adds the
// creates this replica admitted and is still writing (ledger.go), so a
// replica never overshoots, and creates do not wait for each other's
// writes. A count that would refuse is read again from etcd: a deletion
// the cache has not seen yet never refuses a create. Replicas share no
// ledger: creates reaching two at the same moment may overshoot by one each. Lowering a quota removes nothing: existing objects
// stay, new ones are refused. The collector enforces maxItems and
// maxItemBytes on items (pkg/controllers/collect).

// Quotas are the server-wide defaults of the quotas (--default-max-*),
// applied where no Scope (ClusterScope) sets the field. 0 sets no default:
// unlimited, unlike a Scope's 0, which allows nothing.
type Quotas struct {
	MaxTargets, MaxProfiles, MaxInventories, MaxSinks int32
	MaxItems, MaxItemBytes                            int64
}

// DefaultQuotas are the defaults of the --default-max-* flags. They bound
// what one namespace can take of a server sized as docs/install.md
// describes: 100,000 items of at most 64 KiB are at most 6.25 GiB, under
// the 8 GiB etcd quota of the chart and the embedded etcd (small items
// average under 1 KiB), and about 110 MiB of live heap in the collector
// (docs/collection.md). Counts of 100 are far beyond what a team declares
// by hand and keep each namespace's informers and exporters few.
var DefaultQuotas = Quotas{MaxTargets: 100, MaxProfiles: 100, MaxInventories: 100, MaxSinks: 100, MaxItems: 100_000, MaxItemBytes: 64 << 10}

// Quota is one effective limit and what sets it.
type Quota struct {
	// Set is false when nothing limits; Limit is then meaningless.
	Set   bool
	Limit int64
	// By names what sets the limit, for messages: `maxItems of Scope
	// "limits" in namespace "team-a"` or `--default-max-items of the
	// server (no Scope of namespace "team-a" sets maxItems)`.
	By string
}

// Allows tells whether n is within the quota.
func (q Quota) Allows(n int64) bool { return !q.Set || n <= q.Limit }

// QuotaSet are the quotas of one namespace, or of the cluster kinds.
type QuotaSet struct {
	Targets, Profiles, Inventories, Sinks Quota
	Items                                 Quota
	// ItemBytes is the largest item, in bytes as stored (ItemSize).
	ItemBytes Quota
	// ClusterSinks caps the sinks of all namespaces together (ClusterScope
	// maxSinks; set only in the cluster kinds' QuotaSet).
	ClusterSinks Quota
}

// quotaValues are one Scope's or ClusterScope's quota fields, widened.
type quotaValues struct {
	name                                              string
	targets, profiles, inventories, sinks, items, max *int64
}

func widen(v *int32) *int64 {
	if v == nil {
		return nil
	}
	w := int64(*v)
	return &w
}

// bytesOf is a maxItemBytes in bytes; validation keeps it a whole number
// within 1.5Mi, and Value rounds anything else up.
func bytesOf(q *resource.Quantity) *int64 {
	if q == nil {
		return nil
	}
	v := q.Value()
	return &v
}

// strictest is the lowest value the objects set for a field (the first by
// name on a tie), else the default of flag (none when def is 0).
func strictest(objs []quotaValues, field, flag, unset string, def int64, value func(quotaValues) *int64) Quota {
	var q Quota
	for _, o := range objs {
		if v := value(o); v != nil && (!q.Set || *v < q.Limit) {
			q = Quota{Set: true, Limit: *v, By: fmt.Sprintf("%s of %s", field, o.name)}
		}
	}
	if !q.Set && def > 0 {
		q = Quota{Set: true, Limit: def, By: fmt.Sprintf("--default-max-%s of the server (%s sets %s)", flag, unset, field)}
	}
	return q
}

// quotaField is one quota field of Scopes and ClusterScopes.
type quotaField struct {
	// field is its name in the spec, flag the --default-max-<flag> setting
	// its default.
	field, flag string
	value       func(quotaValues) *int64
	def         func(Quotas) int64
	of          func(*QuotaSet) *Quota
	// show formats a value as users write it.
	show func(int64) string
}

func showCount(n int64) string { return strconv.FormatInt(n, 10) }

func showBytes(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// quotaFields are the quota fields, in the order of the spec.
var quotaFields = []quotaField{
	{"maxTargets", "targets", func(o quotaValues) *int64 { return o.targets },
		func(d Quotas) int64 { return int64(d.MaxTargets) }, func(q *QuotaSet) *Quota { return &q.Targets }, showCount},
	{"maxProfiles", "profiles", func(o quotaValues) *int64 { return o.profiles },
		func(d Quotas) int64 { return int64(d.MaxProfiles) }, func(q *QuotaSet) *Quota { return &q.Profiles }, showCount},
	{"maxInventories", "inventories", func(o quotaValues) *int64 { return o.inventories },
		func(d Quotas) int64 { return int64(d.MaxInventories) }, func(q *QuotaSet) *Quota { return &q.Inventories }, showCount},
	{"maxSinks", "sinks", func(o quotaValues) *int64 { return o.sinks },
		func(d Quotas) int64 { return int64(d.MaxSinks) }, func(q *QuotaSet) *Quota { return &q.Sinks }, showCount},
	{"maxItems", "items", func(o quotaValues) *int64 { return o.items },
		func(d Quotas) int64 { return d.MaxItems }, func(q *QuotaSet) *Quota { return &q.Items }, showCount},
	{"maxItemBytes", "item-bytes", func(o quotaValues) *int64 { return o.max },
		func(d Quotas) int64 { return d.MaxItemBytes }, func(q *QuotaSet) *Quota { return &q.ItemBytes }, showBytes},
}

func quotaSet(objs []quotaValues, d Quotas, unset string) QuotaSet {
	sort.Slice(objs, func(i, j int) bool { return objs[i].name < objs[j].name })
	var qs QuotaSet
	for _, f := range quotaFields {
		*f.of(&qs) = strictest(objs, f.field, f.flag, unset, f.def(d), f.value)
	}
	return qs
}

// scopeValues are the quota fields of a Scope.
func scopeValues(s *kollect.Scope) quotaValues {
	return quotaValues{
		name:    fmt.Sprintf("Scope %q in namespace %q", s.Name, s.Namespace),
		targets: widen(s.Spec.MaxTargets), profiles: widen(s.Spec.MaxProfiles), inventories: widen(s.Spec.MaxInventories),
		sinks: widen(s.Spec.MaxSinks), items: s.Spec.MaxItems, max: bytesOf(s.Spec.MaxItemBytes),
	}
}

// NamespaceQuotas are the quotas of the namespace of scopes.
func NamespaceQuotas(namespace string, scopes []kollect.Scope, d Quotas) QuotaSet {
	objs := make([]quotaValues, len(scopes))
	for i := range scopes {
		objs[i] = scopeValues(&scopes[i])
	}
	return quotaSet(objs, d, fmt.Sprintf("no Scope of namespace %q", namespace))
}

// ClusterQuotas are the quotas of the cluster kinds. A ClusterScope's
// maxSinks is the cluster-wide cap on sinks, with no default; the
// namespaces' own maxSinks come from their Scopes.
func ClusterQuotas(scopes []kollect.ClusterScope, d Quotas) QuotaSet {
	objs := make([]quotaValues, len(scopes))
	for i, s := range scopes {
		objs[i] = quotaValues{
			name:    fmt.Sprintf("ClusterScope %q", s.Name),
			targets: widen(s.Spec.MaxTargets), inventories: widen(s.Spec.MaxInventories), sinks: widen(s.Spec.MaxSinks),
			items: s.Spec.MaxItems, max: bytesOf(s.Spec.MaxItemBytes),
		}
	}
	// Profiles are namespaced: no cluster quota counts them.
	d.MaxSinks, d.MaxProfiles = 0, 0
	qs := quotaSet(objs, d, "no ClusterScope")
	qs.ClusterSinks, qs.Sinks = qs.Sinks, Quota{}
	if qs.ClusterSinks.Set {
		qs.ClusterSinks.By += ", the sinks of all namespaces together"
	}
	return qs
}

// ScopeQuotas are NamespaceQuotas of served Scopes, as the controllers'
// listers hold them.
func ScopeQuotas(namespace string, list []*v1alpha1.Scope, d Quotas) QuotaSet {
	scopes := make([]kollect.Scope, len(list))
	for i, s := range list {
		_ = v1alpha1.Convert_v1alpha1_Scope_To_kollect_Scope(s, &scopes[i], nil)
	}
	return NamespaceQuotas(namespace, scopes, d)
}

// ClusterScopeQuotas are ClusterQuotas of served ClusterScopes.
func ClusterScopeQuotas(list []*v1alpha1.ClusterScope, d Quotas) QuotaSet {
	scopes := make([]kollect.ClusterScope, len(list))
	for i, s := range list {
		_ = v1alpha1.Convert_v1alpha1_ClusterScope_To_kollect_ClusterScope(s, &scopes[i], nil)
	}
	return ClusterQuotas(scopes, d)
}

// ItemSize is the size maxItemBytes limits: an item's attributes (names
// and JSON values) or object, as stored, without the metadata the server
// adds.
func ItemSize(attributes map[string]kollect.Value, object *kollect.Value) int64 {
	var n int
	for k, v := range attributes {
		n += len(k) + len(v.Raw)
	}
	if object != nil {
		n += len(object.Raw)
	}
	return int64(n)
}

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
	quota          func(QuotaSet) Quota
	listers        func(QuotaLookups) []rest.Lister
}

// The kinds quotas count.
var (
	CountTargets = Counted{resource: "targets", quota: func(q QuotaSet) Quota { return q.Targets },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Targets} }}
	CountClusterTargets = Counted{resource: "clustertargets", cluster: true, quota: func(q QuotaSet) Quota { return q.Targets },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.ClusterTargets} }}
	CountProfiles = Counted{resource: "profiles", quota: func(q QuotaSet) Quota { return q.Profiles },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Profiles} }}
	CountInventories = Counted{resource: "inventories", quota: func(q QuotaSet) Quota { return q.Inventories },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.Inventories} }}
	CountClusterInventories = Counted{resource: "clusterinventories", cluster: true, quota: func(q QuotaSet) Quota { return q.Inventories },
		listers: func(l QuotaLookups) []rest.Lister { return []rest.Lister{l.ClusterInventories} }}
	CountSinks = Counted{resource: "sinks", sinks: true, quota: func(q QuotaSet) Quota { return q.Sinks },
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
	quota     Quota
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
func (c *Checker) namespaceQuotas(ctx context.Context, namespace string) (QuotaSet, error) {
	var scopes []kollect.Scope
	if c.lookups.Scopes != nil {
		out, err := c.scopeList(ctx, c.lookups.Scopes, namespace, false)
		if err != nil {
			return QuotaSet{}, err
		}
		list, ok := out.(*kollect.ScopeList)
		if !ok {
			return QuotaSet{}, fmt.Errorf("listing scopes returned %T", out)
		}
		scopes = list.Items
	}
	return NamespaceQuotas(namespace, scopes, c.cfg.Quotas), nil
}

// clusterQuotas are the quotas of the cluster kinds, read from the ClusterScopes.
func (c *Checker) clusterQuotas(ctx context.Context) (QuotaSet, error) {
	var scopes []kollect.ClusterScope
	if c.lookups.ClusterScopes != nil {
		out, err := c.scopeList(ctx, c.lookups.ClusterScopes, metav1.NamespaceNone, true)
		if err != nil {
			return QuotaSet{}, err
		}
		list, ok := out.(*kollect.ClusterScopeList)
		if !ok {
			return QuotaSet{}, fmt.Errorf("listing clusterscopes returned %T", out)
		}
		scopes = list.Items
	}
	return ClusterQuotas(scopes, c.cfg.Quotas), nil
}

// VerbEscalate is the verb a user needs on scopes to set a Scope's quota
// above the server's default.
const VerbEscalate = "escalate"

// Scopes: a quota set above the server's default (--default-max-*) needs
// `escalate` on scopes in the Scope's namespace. Scopes are written by the
// namespace's admins (kollect-admin), whose share of the server the
// defaults exist to cap, so only who may escalate (cluster-admin, or whom an
// operator grants it) may give a namespace more, as RBAC asks `escalate` of
// who grants a role more than they hold. Ratcheted: on update only a value
// that is new or raised is checked, so lowering a quota, or keeping one an
// operator raised, never needs it. A default of 0 sets no limit, so any
// value lowers it. ClusterScopes are for cluster admins already.
func (c *Checker) Scopes() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, s, old *kollect.Scope) error {
		v := newVerdict("scopes", "Scope", s.Name)
		c.checkEscalate(ctx, v, s, raisedQuotas(s, old, c.cfg.Quotas))
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error { return admit(ctx, obj.(*kollect.Scope), nil) },
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			return admit(ctx, obj.(*kollect.Scope), old.(*kollect.Scope))
		},
	}
}

// raisedQuota is a quota field set above the server's default.
type raisedQuota struct {
	field      quotaField
	value, def int64
}

// raisedQuotas are the quota fields of s above the server's default d that
// old (nil on create) did not already allow as much: the new and the raised.
func raisedQuotas(s, old *kollect.Scope, d Quotas) []raisedQuota {
	now := scopeValues(s)
	var before quotaValues
	if old != nil {
		before = scopeValues(old)
	}
	var raised []raisedQuota
	for _, f := range quotaFields {
		v, def := f.value(now), f.def(d)
		if v == nil || def == 0 || *v <= def {
			continue
		}
		if was := f.value(before); was != nil && *v <= *was {
			continue
		}
		raised = append(raised, raisedQuota{field: f, value: *v, def: def})
	}
	return raised
}

// checkEscalate requires `escalate` on the Scope s when it raises quotas.
func (c *Checker) checkEscalate(ctx context.Context, v *verdict, s *kollect.Scope, raised []raisedQuota) {
	if len(raised) == 0 || c.cfg.Authorizer == nil {
		return
	}
	ok, why := c.authorize(ctx, escalateAttributes(s.Namespace, s.Name))
	if ok {
		return
	}
	for _, r := range raised {
		msg := fmt.Sprintf("%s: %s is above the server default %s (--default-max-%s): raising a quota above the default requires the verb %q on scopes.%s in namespace %q, which user %q does not hold",
			specPath.Child(r.field.field), r.field.show(r.value), r.field.show(r.def), r.field.flag, VerbEscalate, kollect.GroupName, s.Namespace, userName(ctx))
		if why != "" {
			msg += " (" + why + ")"
		}
		v.denied = append(v.denied, msg)
	}
}

// escalateAttributes asks for `escalate` on one Scope.
func escalateAttributes(namespace, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb:            VerbEscalate,
		Namespace:       namespace,
		APIGroup:        kollect.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        "scopes",
		Name:            name,
		ResourceRequest: true,
	}
}
