// Package clustertarget is the registry of ClusterTargets. Ready and Degraded
// are derived on write from the collector's reports in status.collection
// and, per member cluster, status.clusters.
package clustertarget

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/derive"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// kind describes ClusterTargets to the shared strategies.
var kind = common.SpecStatus[*kollect.ClusterTarget, kollect.ClusterTargetSpec, kollect.ClusterTargetStatus]{
	Meta:   func(o *kollect.ClusterTarget) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.ClusterTarget) *kollect.ClusterTargetSpec { return &o.Spec },
	Status: func(o *kollect.ClusterTarget) *kollect.ClusterTargetStatus { return &o.Status },
	Derive: func(t *kollect.ClusterTarget, now metav1.Time) {
		sortClusters(t.Status.Clusters)
		t.Status.ObservedGeneration = t.Generation
		t.Status.Conditions = derive.ClusterTargetConditions(t.Generation, t.Spec.Suspend, t.Spec.ClusterSelector != nil,
			t.Status.Collection, t.Status.Clusters, t.Status.Conditions, now)
	},
	ValidateStatus: func(o *kollect.ClusterTarget) field.ErrorList {
		return validation.ValidateClusterTargetStatus(&o.Status, field.NewPath("status"))
	},
	Validate:          validation.ValidateClusterTarget,
	ValidateUpdate:    validation.ValidateClusterTargetUpdate,
	Requester:         func(o *kollect.ClusterTarget) **kollect.RequesterInfo { return &o.Status.Requester },
	Finalizer:         v1alpha1.ItemsFinalizer,
	ReferencesChanged: tenancy.ClusterTargetReferencesChanged,
}

// sortClusters sorts the members' entries by name, as the API promises:
// each member's collector applies its own entry, which server-side apply
// appends. Entries that share a name stay where they are, so that
// validation names the indexes the client sent.
func sortClusters(clusters []kollect.ClusterCollection) {
	seen := make(map[string]bool, len(clusters))
	for _, c := range clusters {
		if seen[c.Name] {
			return
		}
		seen[c.Name] = true
	}
	slices.SortFunc(clusters, func(a, b kollect.ClusterCollection) int { return strings.Compare(a.Name, b.Name) })
}

func selectableFields(obj runtime.Object) fields.Set {
	ref := obj.(*kollect.ClusterTarget).Spec.ProfileRef
	return fields.Set{"spec.profileRef.namespace": ref.Namespace, "spec.profileRef.name": ref.Name}
}
