package collect

import (
	"errors"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/controllers/extract"
	"kollect.dev/kollect/pkg/controllers/source"
	"kollect.dev/kollect/pkg/expression"
	"kollect.dev/kollect/pkg/tenancy"
)

// targetSpec is what a target collects, compiled from the target and its
// Profile; replaced as a whole when either changes.
type targetSpec struct {
	generation int64
	profile    types.NamespacedName
	// fingerprint identifies what extraction depends on: the target's
	// generation, the Profile's uid and resourceVersion and, for a
	// ClusterTarget, the ClusterScopes.
	fingerprint string
	extractor   *extract.Extractor
	gvk         schema.GroupVersionKind
	gvr         schema.GroupVersionResource
	namespaced  bool
	sel         *selection
	// labels are the labels of the target's items, shared (cloned for
	// writes); labelsKey is their canonical string.
	labels    map[string]string
	labelsKey string
	// fields is what extraction reads of objects (source.ProfileFields).
	fields string
	// selectable are the Profile's selectable attributes, sorted.
	selectable []string
}

// compile compiles what a target collects, or returns prev when neither
// the target's spec nor its Profile changed. A reason says why it cannot
// collect; an error is transient (discovery failed) and retried.
func (c *Collector) compile(v *targetObject, prev *targetSpec) (spec *targetSpec, reason, msg string, err error) {
	p, err := c.profileLister.Profiles(v.profile.Namespace).Get(v.profile.Name)
	if apierrors.IsNotFound(err) {
		return nil, kollect.ReasonProfileNotFound, fmt.Sprintf("Profile %s not found", v.profile), nil
	}
	if err != nil {
		return nil, "", "", err
	}
	fingerprint := fmt.Sprintf("%d/%s/%s", v.generation, p.UID, p.ResourceVersion)
	var limits *tenancy.Limits
	if v.key.Cluster {
		// The ClusterScopes bound the namespaces it collects from.
		l, fp := c.clusterLimits()
		limits, fingerprint = &l, fingerprint+"/"+fp
	}
	if prev != nil && prev.fingerprint == fingerprint {
		return prev, "", "", nil
	}
	ext, err := extract.New(p)
	if errors.Is(err, expression.ErrCheckerUnavailable) {
		return nil, "", "", err // the server's, not the Profile's
	}
	if err != nil {
		return nil, ReasonProfileInvalid, fmt.Sprintf("Profile %s: %v", v.profile, err), nil
	}
	g := p.Spec.TargetGVK
	gvk := schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
	mapping, err := c.informers.mapping(gvk)
	if meta.IsNoMatchError(err) {
		return nil, kollect.ReasonKindNotFound, fmt.Sprintf("the cluster does not serve %s", gvkString(gvk)), nil
	}
	if err != nil {
		return nil, "", "", fmt.Errorf("resolving %s: %w", gvkString(gvk), err)
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	if !namespaced && !v.key.Cluster {
		return nil, ReasonKindNotNamespaced, fmt.Sprintf("%s is cluster-scoped: collect it with a ClusterTarget", gvkString(gvk)), nil
	}
	sel, err := newSelection(v, limits)
	if err != nil {
		return nil, ReasonInvalidSelector, err.Error(), nil
	}
	spec = &targetSpec{
		generation:  v.generation,
		profile:     v.profile,
		fingerprint: fingerprint,
		extractor:   ext,
		fields:      source.ProfileFields(p),
		gvk:         gvk,
		gvr:         mapping.Resource,
		namespaced:  namespaced,
		sel:         sel,
		selectable:  selectableOf(p),
	}
	spec.labels = itemLabels(v.key, c.cfg.Cluster, spec)
	spec.labelsKey = labelsKey(spec.labels)
	return spec, "", "", nil
}

// shape is what the target needs its informer to keep: one namespace when
// it collects from one, and the metadata and fields its Profile reads.
func (s *targetSpec) shape(v *targetObject) source.Shape {
	need := source.Shape{KeepManagedFields: s.extractor.KeepsManagedFields(), KeepLastApplied: s.extractor.KeepsLastApplied(), Fields: s.fields}
	if s.namespaced {
		if !v.key.Cluster {
			need.Namespace = v.key.Namespace
		} else if len(v.include) == 1 {
			need.Namespace = v.include[0]
		}
	}
	return need
}

func gvkString(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + " " + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + " " + gvk.Kind
}

// selection is a target's compiled choice of objects.
type selection struct {
	objects    labels.Selector
	names      sets.Set[string]
	namespaces labels.Selector // ClusterTarget only
	include    sets.Set[string]
	exclude    sets.Set[string]
	// limits are the ClusterScopes' namespace limits (ClusterTarget only).
	limits *tenancy.Limits
}

// selectorOf compiles a label selector; absent selects everything (the
// library's conversion of nil selects nothing).
func selectorOf(s *metav1.LabelSelector) (labels.Selector, error) {
	if s == nil {
		return labels.Everything(), nil
	}
	return metav1.LabelSelectorAsSelector(s)
}

func newSelection(v *targetObject, limits *tenancy.Limits) (*selection, error) {
	objects, err := selectorOf(v.labelSelector)
	if err != nil {
		return nil, fmt.Errorf("spec.labelSelector: %v", err)
	}
	s := &selection{objects: objects, names: sets.New(v.names...), include: sets.New(v.include...), exclude: sets.New(v.exclude...), limits: limits}
	if v.key.Cluster {
		if s.namespaces, err = selectorOf(v.namespaceSelector); err != nil {
			return nil, fmt.Errorf("spec.namespaceSelector: %v", err)
		}
	}
	return s, nil
}

// namespaceSelected says whether a ClusterTarget collects from a namespace
// with these labels: the ClusterScopes and excludeNamespaces win,
// includeNamespaces restricts, the namespaceSelector picks.
func (s *selection) namespaceSelected(ns string, nsLabels map[string]string) bool {
	if s.exclude.Has(ns) || (s.limits != nil && !s.limits.CollectsFrom(ns)) {
		return false
	}
	if s.include.Len() > 0 && !s.include.Has(ns) {
		return false
	}
	return s.namespaces.Matches(labels.Set(nsLabels))
}

// Values of the kollect.dev/watch label.
const (
	watchEnabled  = "enabled"
	watchDisabled = "disabled"
)

// watched applies the kollect.dev/watch labels: the object's label, when it
// says enabled or disabled, wins over its namespace's; disabled excludes.
// The label never adds an object the selectors do not pick.
func watched(objLabels, nsLabels map[string]string) bool {
	return watchedValue(objLabels[labelWatch], nsLabels)
}

// watchedValue is watched given the value of the object's label.
func watchedValue(objLabel string, nsLabels map[string]string) bool {
	switch objLabel {
	case watchEnabled:
		return true
	case watchDisabled:
		return false
	}
	return nsLabels[labelWatch] != watchDisabled
}

// matches says whether a target collects an object.
func (c *Collector) matches(key targetKey, spec *targetSpec, obj *source.Object) bool {
	var nsLabels map[string]string
	if spec.namespaced {
		ns := obj.Namespace()
		if !key.Cluster && ns != key.Namespace {
			return false
		}
		n, err := c.namespaces.Get(ns)
		switch {
		case err == nil:
			nsLabels = n.Labels
		case key.Cluster:
			// Not in the cache yet: its add event walks it.
			return false
		}
		if key.Cluster && !spec.sel.namespaceSelected(ns, nsLabels) {
			return false
		}
	}
	if spec.sel.names.Len() > 0 && !spec.sel.names.Has(obj.Name()) {
		return false
	}
	if !spec.sel.objects.Matches(obj.Labels()) {
		return false
	}
	return watchedValue(obj.Labels().Get(labelWatch), nsLabels)
}

// matchedNamespaces lists, sorted, the namespaces a ClusterTarget collects from.
func (c *Collector) matchedNamespaces(spec *targetSpec) []string {
	if spec == nil || !spec.namespaced {
		return nil
	}
	all, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range all {
		if spec.sel.namespaceSelected(n.Name, n.Labels) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}
