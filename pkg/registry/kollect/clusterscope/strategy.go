// Package clusterscope is the registry of ClusterScopes: static limits with no status.
package clusterscope

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/registry/kollect/common"
)

// kind describes ClusterScopes to the shared strategy; the generation follows its spec.
var kind = common.Static[*kollect.ClusterScope]{
	Meta:           func(o *kollect.ClusterScope) *metav1.ObjectMeta { return &o.ObjectMeta },
	Content:        func(o *kollect.ClusterScope) any { return o.Spec },
	Validate:       validation.ValidateClusterScope,
	ValidateUpdate: validation.ValidateClusterScopeUpdate,
}
