package collect

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/finalizers"
	"kollect.dev/kollect/pkg/controllers/plumbing"
	"kollect.dev/kollect/pkg/tenancy"
)

// Finalizer keeps a Target or ClusterTarget until the collector has deleted
// its items: no garbage collector runs on this API.
const Finalizer = v1alpha1.ItemsFinalizer

// targetKey names a Target (Cluster false) or a ClusterTarget: the key of
// the target and status queues, and of every part's state.
type targetKey = plumbing.TargetKey

// targetObject is what the collector reads of a Target or ClusterTarget.
type targetObject struct {
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
	clusterSelector   *metav1.LabelSelector
	// clusters are the members that reported in status.clusters.
	clusters []string

	collection *v1alpha1.CollectionObservation
	requester  *v1alpha1.RequesterInfo
}

func targetObjectOf(key targetKey, meta *metav1.ObjectMeta) *targetObject {
	return &targetObject{
		key:             key,
		uid:             meta.UID,
		resourceVersion: meta.ResourceVersion,
		generation:      meta.Generation,
		deleting:        meta.DeletionTimestamp != nil,
		finalizer:       slices.Contains(meta.Finalizers, Finalizer),
	}
}

func targetObjectOfTarget(t *v1alpha1.Target) *targetObject {
	v := targetObjectOf(targetKey{Namespace: t.Namespace, Name: t.Name}, &t.ObjectMeta)
	v.suspend = t.Spec.Suspend
	v.profile = types.NamespacedName{Namespace: t.Namespace, Name: t.Spec.ProfileRef.Name}
	v.labelSelector, v.names = t.Spec.LabelSelector, t.Spec.Names
	v.collection, v.requester = t.Status.Collection, t.Status.Requester
	return v
}

func targetObjectOfClusterTarget(t *v1alpha1.ClusterTarget) *targetObject {
	v := targetObjectOf(targetKey{Cluster: true, Name: t.Name}, &t.ObjectMeta)
	v.suspend = t.Spec.Suspend
	v.profile = types.NamespacedName{Namespace: t.Spec.ProfileRef.Namespace, Name: t.Spec.ProfileRef.Name}
	v.labelSelector, v.names = t.Spec.LabelSelector, t.Spec.Names
	v.namespaceSelector = t.Spec.NamespaceSelector
	v.include, v.exclude = t.Spec.IncludeNamespaces, t.Spec.ExcludeNamespaces
	v.clusterSelector = t.Spec.ClusterSelector
	for _, cc := range t.Status.Clusters {
		v.clusters = append(v.clusters, cc.Name)
	}
	v.collection, v.requester = t.Status.Collection, t.Status.Requester
	return v
}

// getTarget reads a target from the informer cache; nil when it does not
// exist.
func (c *Collector) getTarget(key targetKey) (*targetObject, error) {
	if key.Cluster {
		t, err := c.clusterTargetLister.Get(key.Name)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return targetObjectOfClusterTarget(t), nil
	}
	t, err := c.targetLister.Targets(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return targetObjectOfTarget(t), nil
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

// target is what the collector keeps of a target between its syncs: the
// outcome of the last one, and what it last reported. Its items are in
// the itemIndex, its informer in the informerSet.
type target struct {
	// spec is what the target collects with; nil while it cannot collect
	// (no Profile, unknown kind, denied, suspended).
	spec       *targetSpec
	generation int64
	suspended  bool
	// reason and message say why it cannot collect.
	reason, message string
	// partial is a denial the target collects despite: a ClusterTarget
	// including namespaces the ClusterScopes forbid. Reported when there
	// is no blocking reason.
	partial *tenancy.Denial

	walked     string // what the target was last walked with
	walkNeeded bool
	walkedOnce bool
	kindRetry  time.Duration

	lastFullSync       time.Time
	reported           *v1alpha1.CollectionObservation
	reportedNamespaces []string
	reportedAt         time.Time
	// reportedUnreachable is the member's unreachableSince last reported.
	reportedUnreachable time.Time
}

// targetSet holds the state of every target the collector has seen; its
// mutex guards the map and every target in it. Readers get copies.
type targetSet struct {
	mu      sync.Mutex
	targets map[targetKey]*target
}

func newTargetSet() *targetSet { return &targetSet{targets: map[targetKey]*target{}} }

// get is a copy of a target's state, false when it has none.
func (s *targetSet) get(key targetKey) (target, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.targets[key]
	if !ok {
		return target{}, false
	}
	return *t, true
}

// update changes a target's state, creating it; f runs under the lock.
func (s *targetSet) update(key targetKey, f func(t *target)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.targets[key]
	if t == nil {
		t = &target{}
		s.targets[key] = t
	}
	f(t)
}

// remove forgets a target.
func (s *targetSet) remove(key targetKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.targets, key)
}

// keys lists the targets with state.
func (s *targetSet) keys() []targetKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.targets))
}

// spec is a target's spec, nil while it does not collect.
func (s *targetSet) spec(key targetKey) *targetSpec {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.targets[key]; t != nil {
		return t.spec
	}
	return nil
}

// collectingNamespaced lists the targets that may collect namespaced
// objects in namespace ns.
func (s *targetSet) collectingNamespaced(ns string) []targetKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []targetKey
	for key, t := range s.targets {
		if t.spec != nil && t.spec.namespaced && (key.Cluster || key.Namespace == ns) {
			out = append(out, key)
		}
	}
	return out
}

// requestWalks marks every target for a walk at its next sync.
func (s *targetSet) requestWalks() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.targets {
		t.walkNeeded = true
	}
}
