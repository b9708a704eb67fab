package kollect

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Kollect.
const GroupName = "kollect.dev"

// SchemeGroupVersion is the internal version used by the registry.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: runtime.APIVersionInternal}

// Kind qualifies a kind name with the group.
func Kind(kind string) schema.GroupKind {
	return SchemeGroupVersion.WithKind(kind).GroupKind()
}

// Resource qualifies a resource name with the group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

var (
	// SchemeBuilder registers the internal types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the internal types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&Profile{}, &ProfileList{},
		&Target{}, &TargetList{},
		&ClusterTarget{}, &ClusterTargetList{},
		&Inventory{}, &InventoryList{},
		&ClusterInventory{}, &ClusterInventoryList{},
		&SnapshotSink{}, &SnapshotSinkList{},
		&DatabaseSink{}, &DatabaseSinkList{},
		&EventSink{}, &EventSinkList{},
		&Scope{}, &ScopeList{},
		&ClusterScope{}, &ClusterScopeList{},
		&MemberCluster{}, &MemberClusterList{},
		&InventoryItem{}, &InventoryItemList{},
		&ClusterInventoryItem{}, &ClusterInventoryItemList{},
	)
	return nil
}
