package tenancy

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// wildcard matches every group or kind in allowedGVKs.
const wildcard = "*"

// limit is one Scope or ClusterScope as the checks see it. An absent or
// empty list sets no limit.
type limit struct {
	// name says which object sets the limit, for messages:
	// `Scope "limits" in namespace "team-a"` or `ClusterScope "platform"`.
	name                string
	floor               *metav1.Duration
	allowedGVKs         []kollect.GroupKind
	sinks               map[kollect.SinkFamily][]string
	referenceNamespaces []string
	allowedNamespaces   []string
	deniedNamespaces    []string
}

// limits are all the limits that apply, sorted by name so that messages are
// deterministic. All of them apply at once: the strictest wins.
type limits []limit

// Limits are the Scopes of one namespace, or the ClusterScopes, as the
// registry applies them to the objects written and the controllers to the
// objects that exist. The zero value limits nothing.
type Limits struct{ ls limits }

// NamespaceLimits are the limits of the Scopes of one namespace.
func NamespaceLimits(scopes []kollect.Scope) Limits { return Limits{scopeLimits(scopes)} }

// ClusterLimits are the limits of the ClusterScopes.
func ClusterLimits(scopes []kollect.ClusterScope) Limits {
	return Limits{clusterScopeLimits(scopes)}
}

// ScopeLimits are the limits of served Scopes of one namespace, as the
// controllers' listers hold them.
func ScopeLimits(list []*v1alpha1.Scope) Limits {
	scopes := make([]kollect.Scope, len(list))
	for i, s := range list {
		_ = v1alpha1.Convert_v1alpha1_Scope_To_kollect_Scope(s, &scopes[i], nil)
	}
	return NamespaceLimits(scopes)
}

// ClusterScopeLimits are the limits of served ClusterScopes.
func ClusterScopeLimits(list []*v1alpha1.ClusterScope) Limits {
	scopes := make([]kollect.ClusterScope, len(list))
	for i, s := range list {
		_ = v1alpha1.Convert_v1alpha1_ClusterScope_To_kollect_ClusterScope(s, &scopes[i], nil)
	}
	return ClusterLimits(scopes)
}

func scopeLimits(scopes []kollect.Scope) limits {
	out := make(limits, 0, len(scopes))
	for _, s := range scopes {
		out = append(out, limit{
			name:        fmt.Sprintf("Scope %q in namespace %q", s.Name, s.Namespace),
			floor:       s.Spec.MinExportInterval,
			allowedGVKs: s.Spec.AllowedGVKs,
			sinks:       sinkAllowlists(s.Spec.SnapshotSinkRefs, s.Spec.DatabaseSinkRefs, s.Spec.EventSinkRefs),
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// sinkAllowlists are a Scope's or ClusterScope's sink allowlists, by family.
func sinkAllowlists(snapshot, database, event []string) map[kollect.SinkFamily][]string {
	return map[kollect.SinkFamily][]string{
		kollect.SinkFamilySnapshot: snapshot,
		kollect.SinkFamilyDatabase: database,
		kollect.SinkFamilyEvent:    event,
	}
}

func clusterScopeLimits(scopes []kollect.ClusterScope) limits {
	out := make(limits, 0, len(scopes))
	for _, s := range scopes {
		out = append(out, limit{
			name:                fmt.Sprintf("ClusterScope %q", s.Name),
			floor:               s.Spec.MinExportInterval,
			allowedGVKs:         s.Spec.AllowedGVKs,
			sinks:               sinkAllowlists(s.Spec.SnapshotSinkRefs, s.Spec.DatabaseSinkRefs, s.Spec.EventSinkRefs),
			referenceNamespaces: s.Spec.ReferenceNamespaces,
			allowedNamespaces:   s.Spec.AllowedNamespaces,
			deniedNamespaces:    s.Spec.DeniedNamespaces,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// At admission, the limits an object being written must respect: each
// check returns a field.Forbidden per offending field, naming the limit
// and the Scope, which the registry answers with 422 Invalid.

// RestrictsKinds tells whether any limit lists allowed kinds: only then
// does admission need the kind a referenced Profile collects.
func (l Limits) RestrictsKinds() bool { return l.ls.restrictsKinds() }

// CheckKind requires a collected kind, named at path, to be in every
// allowedGVKs that is set.
func (l Limits) CheckKind(gvk kollect.GroupVersionKind, path *field.Path) *field.Error {
	return l.ls.checkKind(gvk, path)
}

// CheckReferenceNamespace requires a namespace, named at path, that
// cluster kinds reference static configuration in to be in every
// referenceNamespaces that is set.
func (l Limits) CheckReferenceNamespace(namespace string, path *field.Path) *field.Error {
	return l.ls.checkReferenceNamespace(namespace, path)
}

// CheckCollectNamespaces keeps a ClusterTarget within the namespaces the
// ClusterScopes let it collect from (checkCollectNamespaces).
func (l Limits) CheckCollectNamespaces(include, exclude []string) field.ErrorList {
	return l.ls.checkCollectNamespaces(include, exclude)
}

// CheckInventory checks an Inventory's intervals against the floor and its
// sinks against the allowlists, ratcheted: old is the Inventory an update
// replaces, nil on create.
func (l Limits) CheckInventory(inv, old *kollect.Inventory) field.ErrorList {
	var before violations
	if old != nil {
		before = l.ls.exportViolations(inventorySpec(old))
	}
	return l.ls.exportViolations(inventorySpec(inv)).newSince(before)
}

// CheckClusterInventory is CheckInventory for a ClusterInventory, whose
// sinks' namespaces must also be reference namespaces.
func (l Limits) CheckClusterInventory(inv, old *kollect.ClusterInventory) field.ErrorList {
	var before violations
	if old != nil {
		before = l.ls.exportViolations(clusterInventorySpec(old))
	}
	return l.ls.exportViolations(clusterInventorySpec(inv)).newSince(before)
}

// CheckSinkInterval checks a sink's own exportMinInterval against the
// floor, ratcheted: old is the interval an update replaces, nil on create.
func (l Limits) CheckSinkInterval(interval, old *metav1.Duration) field.ErrorList {
	var now, before violations
	l.ls.checkInterval(&now, "sink", interval, intervalPath)
	l.ls.checkInterval(&before, "sink", old, intervalPath)
	return now.newSince(before)
}

// Paths of the fields the checks report on.
var (
	specPath     = field.NewPath("spec")
	intervalPath = specPath.Child("exportMinInterval")
)

// restrictsKinds tells whether any limit lists allowed kinds.
func (ls limits) restrictsKinds() bool {
	for _, l := range ls {
		if len(l.allowedGVKs) > 0 {
			return true
		}
	}
	return false
}

// names joins the names of some limits for a message.
func names(ls []limit) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = l.name
	}
	return strings.Join(s, ", ")
}

// denying returns the limits whose list (picked by list) is set and does
// not allow value.
func (ls limits) denying(list func(limit) []string, value string) []limit {
	var out []limit
	for _, l := range ls {
		if values := list(l); len(values) > 0 && !slices.Contains(values, value) {
			out = append(out, l)
		}
	}
	return out
}

// denyingKind returns the limits whose allowedGVKs is set and leaves out
// the kind.
func (ls limits) denyingKind(group, kind string) []limit {
	var by []limit
	for _, l := range ls {
		if len(l.allowedGVKs) > 0 && !allowsKind(l.allowedGVKs, group, kind) {
			by = append(by, l)
		}
	}
	return by
}

// checkKind requires a collected kind to be in every allowedGVKs that is set.
func (ls limits) checkKind(gvk kollect.GroupVersionKind, path *field.Path) *field.Error {
	by := ls.denyingKind(gvk.Group, gvk.Kind)
	if len(by) == 0 {
		return nil
	}
	return field.Forbidden(path, fmt.Sprintf("kind %s is not in the allowedGVKs of %s", groupKindString(gvk.Group, gvk.Kind), names(by)))
}

func allowsKind(allowed []kollect.GroupKind, group, kind string) bool {
	for _, gk := range allowed {
		if (gk.Group == wildcard || gk.Group == group) && (gk.Kind == wildcard || gk.Kind == kind) {
			return true
		}
	}
	return false
}

func groupKindString(group, kind string) string {
	if group == "" {
		return "core/" + kind
	}
	return group + "/" + kind
}

// floor is the highest minExportInterval and the limit that sets it (the
// first by name on a tie), or nil when no limit sets one.
func (ls limits) floor() (time.Duration, *limit) {
	var floor time.Duration
	var by *limit
	for i := range ls {
		if f := ls[i].floor; f != nil && (by == nil || f.Duration > floor) {
			floor, by = f.Duration, &ls[i]
		}
	}
	return floor, by
}

// violation is one broken limit, keyed by what breaks it so that an update
// can tell a violation it introduces from one the object already had.
type violation struct {
	key string
	err *field.Error
}

type violations []violation

func (vs *violations) add(key string, err *field.Error) {
	if err != nil {
		*vs = append(*vs, violation{key: key, err: err})
	}
}

// newSince returns the errors of the violations that old did not have.
func (vs violations) newSince(old violations) field.ErrorList {
	var errs field.ErrorList
	for _, v := range vs {
		if !slices.ContainsFunc(old, func(o violation) bool { return o.key == v.key }) {
			errs = append(errs, v.err)
		}
	}
	return errs
}

// checkInterval requires an interval, when set, to be at least the floor.
// 0s ("never re-export an unchanged payload") is below any floor: the
// exporter would clamp it to the floor, so it is rejected like any other.
func (ls limits) checkInterval(vs *violations, key string, d *metav1.Duration, path *field.Path) {
	if d == nil {
		return
	}
	floor, by := ls.floor()
	if by == nil || d.Duration >= floor {
		return
	}
	vs.add(key+"="+d.Duration.String(), field.Forbidden(path, fmt.Sprintf("%s is below the floor of %s: the minExportInterval of %s (the highest floor applies)",
		d.Duration, floor, by.name)))
}

// family describes one list of sink references.
type family struct {
	family kollect.SinkFamily
	// field is the name of the list in inventories and Scopes.
	field string
	sink  Referenced
}

var families = []family{
	{kollect.SinkFamilySnapshot, "snapshotSinkRefs", SnapshotSinks},
	{kollect.SinkFamilyDatabase, "databaseSinkRefs", DatabaseSinks},
	{kollect.SinkFamilyEvent, "eventSinkRefs", EventSinks},
}

// SinkRef is one sink reference of an inventory, its namespace resolved.
type SinkRef struct {
	family    family
	index     int
	Namespace string
	Ref       kollect.SinkReference
}

// Sink is the kind of sink referenced.
func (r SinkRef) Sink() Referenced { return r.family.sink }

// Path is where the reference is in the inventory.
func (r SinkRef) Path() *field.Path { return specPath.Child(r.family.field).Index(r.index) }

// ID identifies the reference across updates, whatever its position.
func (r SinkRef) ID() string {
	return string(r.family.family) + "/" + r.Namespace + "/" + r.Ref.Name
}

// InventorySinkRefs are the sink references of an Inventory, in its
// namespace unless they name another.
func InventorySinkRefs(inv *kollect.Inventory) []SinkRef { return inventorySpec(inv).refs }

// ClusterInventorySinkRefs are the sink references of a ClusterInventory,
// in its sinkNamespace unless they name another.
func ClusterInventorySinkRefs(inv *kollect.ClusterInventory) []SinkRef {
	return clusterInventorySpec(inv).refs
}

// exportSpec is what the checks read of an Inventory or ClusterInventory.
type exportSpec struct {
	interval *metav1.Duration
	refs     []SinkRef
	// cluster is true for a ClusterInventory: its sinks are allowed as
	// "namespace/name" and their namespaces must be reference namespaces.
	cluster bool
}

func inventorySpec(inv *kollect.Inventory) exportSpec {
	s := &inv.Spec
	return exportSpec{interval: s.ExportMinInterval, refs: sinkRefs(inv.Namespace, s.SnapshotSinkRefs, s.DatabaseSinkRefs, s.EventSinkRefs)}
}

func clusterInventorySpec(inv *kollect.ClusterInventory) exportSpec {
	s := &inv.Spec
	return exportSpec{interval: s.ExportMinInterval, refs: sinkRefs(s.SinkNamespace, s.SnapshotSinkRefs, s.DatabaseSinkRefs, s.EventSinkRefs), cluster: true}
}

// sinkRefs lists the references of the three families, an absent
// namespace resolved to defaultNamespace.
func sinkRefs(defaultNamespace string, lists ...[]kollect.SinkReference) []SinkRef {
	var out []SinkRef
	for i, f := range families {
		for j, r := range lists[i] {
			ns := r.Namespace
			if ns == "" {
				ns = defaultNamespace
			}
			out = append(out, SinkRef{family: f, index: j, Namespace: ns, Ref: r})
		}
	}
	return out
}

// exportViolations checks an inventory's intervals against the floor, its
// sinks against the allowlists and, on a ClusterInventory, the namespaces
// of its sinks against the reference namespaces.
func (ls limits) exportViolations(e exportSpec) violations {
	var vs violations
	ls.checkInterval(&vs, "inventory", e.interval, intervalPath)
	for _, r := range e.refs {
		p := r.Path()
		ls.checkInterval(&vs, r.ID(), r.Ref.ExportMinInterval, p.Child("exportMinInterval"))
		allowed := r.Ref.Name
		if e.cluster {
			allowed = r.Namespace + "/" + r.Ref.Name
		}
		if by := ls.denying(func(l limit) []string { return l.sinks[r.family.family] }, allowed); len(by) > 0 {
			vs.add(r.ID()+":sink", field.Forbidden(p.Child("name"), fmt.Sprintf("%s %q is not in the %s allowlist of %s",
				r.family.sink.Kind, allowed, r.family.field, names(by))))
		}
		if e.cluster {
			nsPath := p.Child("namespace")
			if r.Ref.Namespace == "" {
				nsPath = specPath.Child("sinkNamespace")
			}
			vs.add(r.ID()+":namespace", ls.checkReferenceNamespace(r.Namespace, nsPath))
		}
	}
	return vs
}

// checkReferenceNamespace requires a namespace cluster kinds reference
// static configuration in to be in every referenceNamespaces that is set.
func (ls limits) checkReferenceNamespace(namespace string, path *field.Path) *field.Error {
	by := ls.denying(func(l limit) []string { return l.referenceNamespaces }, namespace)
	if len(by) == 0 {
		return nil
	}
	return field.Forbidden(path, fmt.Sprintf("namespace %q is not in the referenceNamespaces of %s", namespace, names(by)))
}

// checkCollectNamespaces keeps a ClusterTarget within the namespaces the
// ClusterScopes let it collect from. At admission that can only be shown
// from the lists the ClusterTarget names, so:
//   - with allowedNamespaces set, includeNamespaces is required and each of
//     its namespaces must be allowed by every ClusterScope that sets them;
//   - a namespace in deniedNamespaces must not be included, and when
//     includeNamespaces is empty it must be in excludeNamespaces.
func (ls limits) checkCollectNamespaces(include, exclude []string) field.ErrorList {
	var errs field.ErrorList
	includePath := specPath.Child("includeNamespaces")
	var restricting []limit
	for _, l := range ls {
		if len(l.allowedNamespaces) > 0 {
			restricting = append(restricting, l)
		}
	}
	if len(include) == 0 && len(restricting) > 0 {
		errs = append(errs, field.Forbidden(includePath, fmt.Sprintf("must list the namespaces to collect from: %s allows only some namespaces (allowedNamespaces)", names(restricting))))
	}
	for i, ns := range include {
		if by := ls.denying(func(l limit) []string { return l.allowedNamespaces }, ns); len(by) > 0 {
			errs = append(errs, field.Forbidden(includePath.Index(i), fmt.Sprintf("namespace %q is not in the allowedNamespaces of %s", ns, names(by))))
		}
		for _, l := range ls {
			if slices.Contains(l.deniedNamespaces, ns) {
				errs = append(errs, field.Forbidden(includePath.Index(i), fmt.Sprintf("namespace %q is in the deniedNamespaces of %s", ns, l.name)))
			}
		}
	}
	if len(include) == 0 {
		for _, l := range ls {
			for _, ns := range l.deniedNamespaces {
				if !slices.Contains(exclude, ns) {
					errs = append(errs, field.Forbidden(specPath.Child("excludeNamespaces"), fmt.Sprintf("must contain %q, which is in the deniedNamespaces of %s (or list includeNamespaces)", ns, l.name)))
				}
			}
		}
	}
	return errs
}
