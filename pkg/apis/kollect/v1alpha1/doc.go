// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=kollect.dev/kollect/pkg/apis/kollect
// +k8s:defaulter-gen=TypeMeta
// +groupName=kollect.dev
// +k8s:openapi-model-package=dev.kollect.v1alpha1

// Package v1alpha1 is the v1alpha1 version of the kollect.dev API: what to
// collect from a cluster (Profile, Target, ClusterTarget), where to export it
// (Inventory, ClusterInventory and the sink kinds), the tenancy limits (Scope,
// ClusterScope) and the collected inventory itself (InventoryItem,
// ClusterInventoryItem).
package v1alpha1
