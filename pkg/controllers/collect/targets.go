package collect

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/source"
	"kollect.dev/kollect/pkg/tenancy"
)

// Finalizer keeps a Target or ClusterTarget until the collector has deleted
// its items: no garbage collector runs on this API.
const Finalizer = v1alpha1.ItemsFinalizer

// targetKey names a Target (Cluster false) or a ClusterTarget.
type targetKey struct {
	Cluster   bool
	Namespace string
	Name      string
}

func (k targetKey) String() string {
	if k.Cluster {
		return "ClusterTarget " + k.Name
	}
	return "Target " + k.Namespace + "/" + k.Name
}

// kind is the Kollect kind of the target, for metrics and events.
func (k targetKey) kind() string {
	if k.Cluster {
		return "ClusterTarget"
	}
	return "Target"
}

// itemKind is the kind of the items the target makes.
func (k targetKey) itemKind() string {
	if k.Cluster {
		return "ClusterInventoryItem"
	}
	return "InventoryItem"
}

// view is what the collector reads of a Target or ClusterTarget.
type view struct {
	key             targetKey
	uid             types.UID
	resourceVersion string
	generation      int64
	deleting        bool
	finalizer       bool
	suspend         bool
	profile         types.NamespacedName

	labelSelector     *metav1.LabelSelector
	names             []string
	namespaceSelector *metav1.LabelSelector
	include, exclude  []string

	collection *v1alpha1.CollectionObservation
	requester  *v1alpha1.RequesterInfo
}

func viewOf(key targetKey, meta *metav1.ObjectMeta) *view {
	return &view{
		key:             key,
		uid:             meta.UID,
		resourceVersion: meta.ResourceVersion,
		generation:      meta.Generation,
		deleting:        meta.DeletionTimestamp != nil,
		finalizer:       slices.Contains(meta.Finalizers, Finalizer),
	}
}

func viewOfTarget(t *v1alpha1.Target) *view {
	v := viewOf(targetKey{Namespace: t.Namespace, Name: t.Name}, &t.ObjectMeta)
	v.suspend = t.Spec.Suspend
	v.profile = types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ProfileRef.Name}
	v.labelSelector, v.names = t.Spec.LabelSelector, t.Spec.Names
	v.collection, v.requester = t.Status.Collection, t.Status.Requester
	return v
}

func viewOfClusterTarget(t *v1alpha1.ClusterTarget) *view {
	v := viewOf(targetKey{Cluster: true, Name: t.Name}, &t.ObjectMeta)
	v.suspend = t.Spec.Suspend
	v.profile = types.NamespacedName{Namespace: t.Spec.ProfileRef.Namespace, Name: t.Spec.ProfileRef.Name}
	v.labelSelector, v.names = t.Spec.LabelSelector, t.Spec.Names
	v.namespaceSelector = t.Spec.NamespaceSelector
	v.include, v.exclude = t.Spec.IncludeNamespaces, t.Spec.ExcludeNamespaces
	v.collection, v.requester = t.Status.Collection, t.Status.Requester
	return v
}

// getView reads a target from the informer cache; nil when it does not exist.
func (c *Collector) getView(key targetKey) (*view, error) {
	if key.Cluster {
		t, err := c.clusterTargetLister.Get(key.Name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return viewOfClusterTarget(t), nil
	}
	t, err := c.targetLister.Targets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return viewOfTarget(t), nil
}

// setFinalizer adds or removes the items finalizer. Metadata edits on the
// main resource keep spec and status.
func (c *Collector) setFinalizer(ctx context.Context, key targetKey, present bool) error {
	api := c.kollect.KollectV1alpha1()
	if key.Cluster {
		return finalizers.Set[*v1alpha1.ClusterTarget](ctx, api.ClusterTargets(), key.Name, Finalizer, fieldManager, present)
	}
	return finalizers.Set[*v1alpha1.Target](ctx, api.Targets(key.Namespace), key.Name, Finalizer, fieldManager, present)
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

func newSelection(v *view, limits *tenancy.Limits) (*selection, error) {
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
func (c *Collector) matches(key targetKey, cfg *targetConfig, obj *source.Object) bool {
	var nsLabels map[string]string
	if cfg.namespaced {
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
		if key.Cluster && !cfg.sel.namespaceSelected(ns, nsLabels) {
			return false
		}
	}
	if cfg.sel.names.Len() > 0 && !cfg.sel.names.Has(obj.Name()) {
		return false
	}
	if !cfg.sel.objects.Matches(obj.Labels()) {
		return false
	}
	return watchedValue(obj.Labels().Get(labelWatch), nsLabels)
}

// matchedNamespaces lists, sorted, the namespaces a ClusterTarget collects from.
func (c *Collector) matchedNamespaces(cfg *targetConfig) []string {
	if cfg == nil || !cfg.namespaced {
		return nil
	}
	all, err := c.namespaces.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range all {
		if cfg.sel.namespaceSelected(n.Name, n.Labels) {
			out = append(out, n.Name)
		}
	}
	slices.Sort(out)
	return out
}
