package tenancy

import (
	"context"
	"errors"
	"fmt"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// TenantModeMessage explains a rejection in tenant mode.
const TenantModeMessage = "the server runs with --tenant-mode: cluster-scoped Kollect kinds cannot be created or updated; delete is allowed"

// Profiles: the collected kind must be allowed by the namespace's Scopes.
// targetGVK is immutable, so only creation is checked.
func (c *Checker) Profiles() Admission {
	if c == nil {
		return Admission{}
	}
	return Admission{Create: func(ctx context.Context, obj runtime.Object) error {
		p := obj.(*kollect.Profile)
		ls, err := c.scopes(ctx, p.Namespace)
		if err != nil {
			return err
		}
		v := newVerdict("profiles", "Profile", p.Name)
		v.invalidate(ls.CheckKind(p.Spec.TargetGVK, specPath.Child("targetGVK")))
		return v.result(ctx)
	}}
}

// Targets: `use` on the Profile, `list` on what it collects in the Target's
// namespace, and the Scopes' allowed kinds; on create and when
// TargetReferencesChanged.
func (c *Checker) Targets() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, t *kollect.Target) error {
		v := newVerdict("targets", "Target", t.Name)
		namePath := profileRefPath.Child("name")
		c.checkUse(ctx, v, tenancy.Profiles, t.Namespace, t.Spec.ProfileRef.Name, namePath)
		ls, err := c.scopes(ctx, t.Namespace)
		if err != nil {
			return err
		}
		if c.listChecks() || ls.RestrictsKinds() {
			p, err := c.resolveProfile(ctx, v, t.Namespace, t.Spec.ProfileRef.Name, namePath)
			if err != nil {
				return err
			}
			if p != nil {
				if c.listChecks() {
					if err := c.checkList(ctx, v, "Target", p, t.Namespace, profileRefPath); err != nil {
						return err
					}
				}
				v.invalidate(ls.CheckKind(p.Spec.TargetGVK, namePath))
			}
		}
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error { return admit(ctx, obj.(*kollect.Target)) },
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			t := obj.(*kollect.Target)
			if !TargetReferencesChanged(t, old.(*kollect.Target)) {
				return nil
			}
			return admit(ctx, t)
		},
	}
}

// ClusterTargets: tenant mode; `use` on the Profile, `list` across the
// cluster on what it collects, `use` on every MemberCluster the
// clusterSelector selects; the ClusterScopes' reference namespaces, allowed
// kinds and collection namespaces. On create and when
// ClusterTargetReferencesChanged.
func (c *Checker) ClusterTargets() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, t *kollect.ClusterTarget) error {
		v := newVerdict("clustertargets", "ClusterTarget", t.Name)
		ref := t.Spec.ProfileRef
		namePath := profileRefPath.Child("name")
		c.checkUse(ctx, v, tenancy.Profiles, ref.Namespace, ref.Name, namePath)
		ls, err := c.clusterScopes(ctx)
		if err != nil {
			return err
		}
		v.invalidate(ls.CheckReferenceNamespace(ref.Namespace, profileRefPath.Child("namespace")))
		v.invalidate(ls.CheckCollectNamespaces(t.Spec.IncludeNamespaces, t.Spec.ExcludeNamespaces)...)
		if c.listChecks() || ls.RestrictsKinds() {
			p, err := c.resolveProfile(ctx, v, ref.Namespace, ref.Name, namePath)
			if err != nil {
				return err
			}
			if p != nil {
				if c.listChecks() {
					if err := c.checkList(ctx, v, "ClusterTarget", p, "", profileRefPath); err != nil {
						return err
					}
				}
				v.invalidate(ls.CheckKind(p.Spec.TargetGVK, namePath))
			}
		}
		if err := c.checkMembers(ctx, v, t.Spec.ClusterSelector); err != nil {
			return err
		}
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error {
			t := obj.(*kollect.ClusterTarget)
			if err := c.tenantMode("clustertargets", t.Name, obj, nil); err != nil {
				return err
			}
			return admit(ctx, t)
		},
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			t := obj.(*kollect.ClusterTarget)
			if err := c.tenantMode("clustertargets", t.Name, obj, old); err != nil {
				return err
			}
			if !ClusterTargetReferencesChanged(t, old.(*kollect.ClusterTarget)) {
				return nil
			}
			return admit(ctx, t)
		},
	}
}

// checkMembers requires `use` on each MemberCluster selector selects, as
// stored now; a member labelled later is the collector's to check, on the
// requester's authority.
func (c *Checker) checkMembers(ctx context.Context, v *verdict, selector *metav1.LabelSelector) error {
	if selector == nil || c.cfg.Authorizer == nil {
		return nil
	}
	if c.lookups.MemberClusters == nil {
		return errors.New("the MemberClusters a clusterSelector selects cannot be listed: the server has no MemberCluster storage")
	}
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return err // validation has refused it already
	}
	out, err := c.lookups.MemberClusters.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceNone),
		&metainternalversion.ListOptions{LabelSelector: sel})
	if err != nil {
		return err
	}
	list, ok := out.(*kollect.MemberClusterList)
	if !ok {
		return fmt.Errorf("listing memberclusters returned %T", out)
	}
	names := make([]string, len(list.Items))
	for i := range list.Items {
		names[i] = list.Items[i].Name
	}
	slices.Sort(names)
	for _, name := range names {
		c.checkMemberUse(ctx, v, name, specPath.Child("clusterSelector"))
	}
	return nil
}

// MemberClusters: tenant mode; `get` on the kubeconfig Secret, on create
// and when MemberClusterReferencesChanged; the ClusterScopes' reference
// namespaces on create and when the Secret's namespace changes (ratcheted:
// a ClusterScope written later does not block other updates).
func (c *Checker) MemberClusters() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, m, old *kollect.MemberCluster) error {
		var prev runtime.Object
		if old != nil {
			prev = old
		}
		if err := c.tenantMode("memberclusters", m.Name, m, prev); err != nil {
			return err
		}
		v := newVerdict("memberclusters", "MemberCluster", m.Name)
		ref := m.Spec.KubeconfigSecretRef
		refPath := specPath.Child("kubeconfigSecretRef")
		if old == nil || MemberClusterReferencesChanged(m, old) {
			c.checkSecret(ctx, v, ref.Namespace, ref.Name, refPath.Child("name"), memberSecretUse)
		}
		if old == nil || old.Spec.KubeconfigSecretRef.Namespace != ref.Namespace {
			ls, err := c.clusterScopes(ctx)
			if err != nil {
				return err
			}
			v.invalidate(ls.CheckReferenceNamespace(ref.Namespace, refPath.Child("namespace")))
		}
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error {
			return admit(ctx, obj.(*kollect.MemberCluster), nil)
		},
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			return admit(ctx, obj.(*kollect.MemberCluster), old.(*kollect.MemberCluster))
		},
	}
}

// Inventories: `use` on every referenced sink (in the Inventory's
// namespace) and `list` on the namespace's inventoryitems, on create and
// when InventoryReferencesChanged; the Scopes' floor and sink allowlists on
// every write, ratcheted.
func (c *Checker) Inventories() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, inv, old *kollect.Inventory) error {
		v := newVerdict("inventories", "Inventory", inv.Name)
		if old == nil || InventoryReferencesChanged(inv, old) {
			c.checkSinkUse(ctx, v, tenancy.InventorySinkRefs(inv))
			c.checkItems(ctx, v, inv.Namespace)
		}
		ls, err := c.scopes(ctx, inv.Namespace)
		if err != nil {
			return err
		}
		v.invalidate(ls.CheckInventory(inv, old)...)
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error { return admit(ctx, obj.(*kollect.Inventory), nil) },
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			return admit(ctx, obj.(*kollect.Inventory), old.(*kollect.Inventory))
		},
	}
}

// ClusterInventories: tenant mode; `use` on every referenced sink in its
// resolved namespace and `list` on clusterinventoryitems, on create and
// when ClusterInventoryReferencesChanged; the ClusterScopes' floor, sink
// allowlists and reference namespaces on every write, ratcheted.
func (c *Checker) ClusterInventories() Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, inv, old *kollect.ClusterInventory) error {
		if err := c.tenantMode("clusterinventories", inv.Name, inv, runtimeOrNil(old)); err != nil {
			return err
		}
		v := newVerdict("clusterinventories", "ClusterInventory", inv.Name)
		if old == nil || ClusterInventoryReferencesChanged(inv, old) {
			c.checkSinkUse(ctx, v, tenancy.ClusterInventorySinkRefs(inv))
			c.checkItems(ctx, v, "")
		}
		ls, err := c.clusterScopes(ctx)
		if err != nil {
			return err
		}
		v.invalidate(ls.CheckClusterInventory(inv, old)...)
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error {
			return admit(ctx, obj.(*kollect.ClusterInventory), nil)
		},
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			return admit(ctx, obj.(*kollect.ClusterInventory), old.(*kollect.ClusterInventory))
		},
	}
}

// runtimeOrNil keeps a nil *ClusterInventory a nil interface.
func runtimeOrNil(inv *kollect.ClusterInventory) runtime.Object {
	if inv == nil {
		return nil
	}
	return inv
}

func (c *Checker) checkSinkUse(ctx context.Context, v *verdict, refs []tenancy.SinkRef) {
	for _, r := range refs {
		c.checkUse(ctx, v, r.Sink(), r.Namespace, r.Ref.Name, r.Path())
	}
}

// ClusterScopes: tenant mode only.
func (c *Checker) ClusterScopes() Admission {
	if c == nil {
		return Admission{}
	}
	return Admission{
		Create: func(_ context.Context, obj runtime.Object) error {
			return c.tenantMode("clusterscopes", obj.(*kollect.ClusterScope).Name, obj, nil)
		},
		Update: func(_ context.Context, obj, old runtime.Object) error {
			return c.tenantMode("clusterscopes", obj.(*kollect.ClusterScope).Name, obj, old)
		},
	}
}

// Sinks: the requesting user must be allowed to `get` the Secret a sink
// uses, on create and when SinkReferencesChanged; a sink's own
// exportMinInterval must respect its namespace's floor, checked on every
// write, ratcheted.
func Sinks[T SinkObject](c *Checker, resource, kind string, interval func(T) *metav1.Duration) Admission {
	if c == nil {
		return Admission{}
	}
	admit := func(ctx context.Context, sink T, old *T) error {
		ls, err := c.scopes(ctx, sink.GetNamespace())
		if err != nil {
			return err
		}
		var before *metav1.Duration
		if old != nil {
			before = interval(*old)
		}
		v := newVerdict(resource, kind, sink.GetName())
		if ref := sinkSecretRef(sink); ref != nil && (old == nil || SinkReferencesChanged(sink, *old)) {
			c.checkSecret(ctx, v, sink.GetNamespace(), ref.Name, specPath.Child("secretRef", "name"), sinkSecretUse)
		}
		v.invalidate(ls.CheckSinkInterval(interval(sink), before)...)
		return v.result(ctx)
	}
	return Admission{
		Create: func(ctx context.Context, obj runtime.Object) error { return admit(ctx, obj.(T), nil) },
		Update: func(ctx context.Context, obj, old runtime.Object) error {
			prev := old.(T)
			return admit(ctx, obj.(T), &prev)
		},
	}
}

// tenantMode rejects, with --tenant-mode, creating a cluster-scoped kind
// (old is nil) and updating one. Updates that only change what garbage
// collection and deletion need (finalizers, owner references) pass, so
// objects created before tenant mode was turned on can still be deleted,
// finalizers included.
func (c *Checker) tenantMode(resource, name string, obj, old runtime.Object) error {
	if !c.cfg.TenantMode {
		return nil
	}
	if old != nil && onlyDeletionFieldsChanged(obj, old) {
		return nil
	}
	return apierrors.NewForbidden(kollect.Resource(resource), name, errors.New(TenantModeMessage))
}

// onlyDeletionFieldsChanged tells whether obj differs from old in nothing
// but finalizers, owner references and the bookkeeping of the write.
func onlyDeletionFieldsChanged(obj, old runtime.Object) bool {
	want, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	prev := old.DeepCopyObject()
	m, err := meta.Accessor(prev)
	if err != nil {
		return false
	}
	m.SetFinalizers(want.GetFinalizers())
	m.SetOwnerReferences(want.GetOwnerReferences())
	m.SetManagedFields(want.GetManagedFields())
	m.SetResourceVersion(want.GetResourceVersion())
	return apiequality.Semantic.DeepEqual(prev, obj)
}

// reaffirmed tells whether an update changes tenancy.AnnotationReaffirm.
func reaffirmed(obj, old metav1.Object) bool {
	return obj.GetAnnotations()[tenancy.AnnotationReaffirm] != old.GetAnnotations()[tenancy.AnnotationReaffirm]
}

// TargetReferencesChanged tells whether an update changes what a Target
// collects: its Profile or its selection (or re-affirms the requester).
// Those updates are checked against the requesting user, who becomes the
// requester.
func TargetReferencesChanged(obj, old *kollect.Target) bool {
	a, b := &obj.Spec, &old.Spec
	return reaffirmed(obj, old) || a.ProfileRef != b.ProfileRef ||
		!apiequality.Semantic.DeepEqual(a.LabelSelector, b.LabelSelector) ||
		!apiequality.Semantic.DeepEqual(a.Names, b.Names)
}

// ClusterTargetReferencesChanged is TargetReferencesChanged for ClusterTargets,
// whose selection includes the namespaces and the member clusters.
func ClusterTargetReferencesChanged(obj, old *kollect.ClusterTarget) bool {
	a, b := &obj.Spec, &old.Spec
	return reaffirmed(obj, old) || a.ProfileRef != b.ProfileRef ||
		!apiequality.Semantic.DeepEqual(a.NamespaceSelector, b.NamespaceSelector) ||
		!apiequality.Semantic.DeepEqual(a.IncludeNamespaces, b.IncludeNamespaces) ||
		!apiequality.Semantic.DeepEqual(a.ExcludeNamespaces, b.ExcludeNamespaces) ||
		!apiequality.Semantic.DeepEqual(a.ClusterSelector, b.ClusterSelector) ||
		!apiequality.Semantic.DeepEqual(a.LabelSelector, b.LabelSelector) ||
		!apiequality.Semantic.DeepEqual(a.Names, b.Names)
}

// MemberClusterReferencesChanged tells whether an update changes the
// Secret a MemberCluster's kubeconfig is read from (namespace, name or key),
// or re-affirms the requester: the user who asks must be allowed to get it,
// and becomes the requester.
func MemberClusterReferencesChanged(obj, old *kollect.MemberCluster) bool {
	return reaffirmed(obj, old) || obj.Spec.KubeconfigSecretRef != old.Spec.KubeconfigSecretRef
}

// InventoryReferencesChanged tells whether an update changes what an
// Inventory exports or where: the targets it selects, or the set of sinks
// (not their order or intervals); or re-affirms the requester.
func InventoryReferencesChanged(obj, old *kollect.Inventory) bool {
	return reaffirmed(obj, old) ||
		!apiequality.Semantic.DeepEqual(obj.Spec.TargetSelector, old.Spec.TargetSelector) ||
		!sinkSet(tenancy.InventorySinkRefs(obj)).Equal(sinkSet(tenancy.InventorySinkRefs(old)))
}

// ClusterInventoryReferencesChanged is InventoryReferencesChanged for
// ClusterInventories: their selection is targetRefs and targetSelector, and
// sink namespaces are resolved (so a new sinkNamespace is a change).
func ClusterInventoryReferencesChanged(obj, old *kollect.ClusterInventory) bool {
	return reaffirmed(obj, old) ||
		!apiequality.Semantic.DeepEqual(obj.Spec.TargetSelector, old.Spec.TargetSelector) ||
		!targetNames(obj.Spec.TargetRefs).Equal(targetNames(old.Spec.TargetRefs)) ||
		!sinkSet(tenancy.ClusterInventorySinkRefs(obj)).Equal(sinkSet(tenancy.ClusterInventorySinkRefs(old)))
}

func targetNames(refs []kollect.LocalObjectReference) sets.Set[string] {
	s := sets.New[string]()
	for _, r := range refs {
		s.Insert(r.Name)
	}
	return s
}

// SinkReferencesChanged tells whether an update changes how a sink uses a
// Secret, and so needs the requesting user's `get` on it and records them:
// a new, changed or removed secretRef, or while it has one any other change
// of spec (where and how the Secret's values are sent: endpoint, TLS,
// options); or re-affirms the requester.
func SinkReferencesChanged(obj, old SinkObject) bool {
	ref := sinkSecretRef(obj)
	return reaffirmed(obj, old) || !apiequality.Semantic.DeepEqual(ref, sinkSecretRef(old)) ||
		(ref != nil && !apiequality.Semantic.DeepEqual(sinkSpec(obj), sinkSpec(old)))
}

// SinkObject is a SnapshotSink, DatabaseSink or EventSink.
type SinkObject interface {
	runtime.Object
	metav1.Object
}

// sinkSecretRef is the Secret a sink of any family uses, nil when none.
func sinkSecretRef(obj runtime.Object) *kollect.LocalObjectReference {
	switch o := obj.(type) {
	case *kollect.SnapshotSink:
		return o.Spec.SecretRef
	case *kollect.DatabaseSink:
		return o.Spec.SecretRef
	case *kollect.EventSink:
		return o.Spec.SecretRef
	}
	return nil
}

func sinkSpec(obj runtime.Object) any {
	switch o := obj.(type) {
	case *kollect.SnapshotSink:
		return &o.Spec
	case *kollect.DatabaseSink:
		return &o.Spec
	case *kollect.EventSink:
		return &o.Spec
	}
	return nil
}

func sinkSet(refs []tenancy.SinkRef) sets.Set[string] {
	s := sets.New[string]()
	for _, r := range refs {
		s.Insert(r.ID())
	}
	return s
}
