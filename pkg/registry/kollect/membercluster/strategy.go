// Package membercluster is the registry of MemberClusters, the clusters
// the hub collects from. Reachable and Ready are derived on write from the
// owning replica's report in status.collection.
package membercluster

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
	"kollect.dev/kollect/pkg/registry/kollect/derive"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// kind describes MemberClusters to the shared strategies. The collector
// adds its own finalizer when it starts collecting from a member.
var kind = common.SpecStatus[*kollect.MemberCluster, kollect.MemberClusterSpec, kollect.MemberClusterStatus]{
	Meta:   func(o *kollect.MemberCluster) *metav1.ObjectMeta { return &o.ObjectMeta },
	Spec:   func(o *kollect.MemberCluster) *kollect.MemberClusterSpec { return &o.Spec },
	Status: func(o *kollect.MemberCluster) *kollect.MemberClusterStatus { return &o.Status },
	Derive: func(m *kollect.MemberCluster, now metav1.Time) {
		m.Status.ObservedGeneration = m.Generation
		m.Status.Conditions = derive.MemberConditions(m.Generation, m.Spec.Suspend, m.Status.Collection, m.Status.Conditions, now)
	},
	ValidateStatus: func(o *kollect.MemberCluster) field.ErrorList {
		return validation.ValidateMemberClusterStatus(&o.Status, field.NewPath("status"))
	},
	Validate:       validation.ValidateMemberCluster,
	ValidateUpdate: validation.ValidateMemberClusterUpdate,
	// The kubeconfig Secret is read on the authority of the user who named it.
	Requester:         func(o *kollect.MemberCluster) **kollect.RequesterInfo { return &o.Status.Requester },
	ReferencesChanged: tenancy.MemberClusterReferencesChanged,
}

func selectableFields(obj runtime.Object) fields.Set {
	ref := obj.(*kollect.MemberCluster).Spec.KubeconfigSecretRef
	return fields.Set{"spec.kubeconfigSecretRef.namespace": ref.Namespace, "spec.kubeconfigSecretRef.name": ref.Name}
}
