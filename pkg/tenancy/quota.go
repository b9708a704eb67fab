package tenancy

import (
	"fmt"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"

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
// Admission counts objects (pkg/registry/kollect/tenancy): creating one
// beyond its quota is refused. Lowering a quota removes nothing: existing
// objects stay, new ones are refused. The collector enforces maxItems and
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

// QuotaField is one quota field of Scopes and ClusterScopes.
type QuotaField struct {
	// Name is its name in the spec, Flag the --default-max-<Flag> setting
	// its default.
	Name, Flag string
	value      func(quotaValues) *int64
	def        func(Quotas) int64
	of         func(*QuotaSet) *Quota
	// show formats a value as users write it.
	show func(int64) string
}

// Show formats a value of the field as users write it: 100000, 64Ki.
func (f QuotaField) Show(n int64) string { return f.show(n) }

func showCount(n int64) string { return strconv.FormatInt(n, 10) }

func showBytes(n int64) string { return resource.NewQuantity(n, resource.BinarySI).String() }

// QuotaFields are the quota fields, in the order of the spec.
var QuotaFields = []QuotaField{
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
	for _, f := range QuotaFields {
		*f.of(&qs) = strictest(objs, f.Name, f.Flag, unset, f.def(d), f.value)
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

// A quota set above the server's default (--default-max-*) needs
// `escalate` on scopes in the Scope's namespace. Scopes are written by the
// namespace's admins (kollect-admin), whose share of the server the
// defaults exist to cap, so only who may escalate (cluster-admin, or whom
// an operator grants it) may give a namespace more, as RBAC asks
// `escalate` of who grants a role more than they hold. Ratcheted: on
// update only a value that is new or raised is checked, so lowering a
// quota, or keeping one an operator raised, never needs it. A default of 0
// sets no limit, so any value lowers it. ClusterScopes are for cluster
// admins already.

// RaisedQuota is a quota field set above the server's default.
type RaisedQuota struct {
	Field          QuotaField
	Value, Default int64
}

// RaisedQuotas are the quota fields of s above the server's default d that
// old (nil on create) did not already allow as much, the new and the
// raised: those that need `escalate` (EscalateAttributes).
func RaisedQuotas(s, old *kollect.Scope, d Quotas) []RaisedQuota {
	now := scopeValues(s)
	var before quotaValues
	if old != nil {
		before = scopeValues(old)
	}
	var raised []RaisedQuota
	for _, f := range QuotaFields {
		v, def := f.value(now), f.def(d)
		if v == nil || def == 0 || *v <= def {
			continue
		}
		if was := f.value(before); was != nil && *v <= *was {
			continue
		}
		raised = append(raised, RaisedQuota{Field: f, Value: *v, Default: def})
	}
	return raised
}
