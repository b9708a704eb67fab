package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of Kollect.
const GroupName = "kollect.dev"

// The finalizers of Kollect's controllers. The registry puts them on every
// new object of their kinds, so that deleting one always waits for its
// controller, and the controller never writes an object just to add one.
const (
	// ItemsFinalizer holds a Target or ClusterTarget until the collector
	// has deleted its items.
	ItemsFinalizer = "kollect.dev/items"
	// ExportFinalizer holds an Inventory or ClusterInventory until the
	// exporters have stopped and removed what deletionPolicy Delete asks.
	ExportFinalizer = "kollect.dev/export"
)

// SchemeGroupVersion is the group version objects are served and stored at.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder registers the types, defaults and conversions of this version.
	SchemeBuilder      runtime.SchemeBuilder
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds this version to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	localSchemeBuilder.Register(addKnownTypes, addDefaultingFuncs, addFieldLabelConversionFuncs)
}

// Resource qualifies a resource name with the group.
func Resource(resource string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(resource).GroupResource()
}

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
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
