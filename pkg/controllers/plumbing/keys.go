package plumbing

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// Kinds names the two kinds an ObjectKey may name an object of.
type Kinds interface {
	// Kinds returns the namespaced kind and its cluster-scoped twin.
	Kinds() (namespaced, cluster string)
}

// TargetKinds are Target and ClusterTarget.
type TargetKinds struct{}

// Kinds returns Target and ClusterTarget.
func (TargetKinds) Kinds() (string, string) { return "Target", "ClusterTarget" }

// InventoryKinds are Inventory and ClusterInventory.
type InventoryKinds struct{}

// Kinds returns Inventory and ClusterInventory.
func (InventoryKinds) Kinds() (string, string) { return "Inventory", "ClusterInventory" }

// ObjectKey names an object of K's namespaced kind (Cluster false) or of
// its cluster-scoped twin, whose Namespace is empty. It is a work queue's
// key and a map key: small and comparable; the kinds live in its type.
type ObjectKey[K Kinds] struct {
	Cluster   bool
	Namespace string
	Name      string
}

// TargetKey names a Target or a ClusterTarget.
type TargetKey = ObjectKey[TargetKinds]

// InventoryKey names an Inventory or a ClusterInventory.
type InventoryKey = ObjectKey[InventoryKinds]

// Kind is the object's kind: the label of its metrics, its Events' kind.
func (k ObjectKey[K]) Kind() string {
	var kinds K
	namespaced, cluster := kinds.Kinds()
	if k.Cluster {
		return cluster
	}
	return namespaced
}

// String names the object for logs: "Target ns/name", "ClusterTarget name".
func (k ObjectKey[K]) String() string {
	if k.Cluster {
		return k.Kind() + " " + k.Name
	}
	return k.Kind() + " " + k.Namespace + "/" + k.Name
}

// ItemKind is the kind of the items a Target collects and an Inventory
// exports: ClusterInventoryItem for the cluster-scoped kinds.
func (k ObjectKey[K]) ItemKind() string {
	if k.Cluster {
		return "ClusterInventoryItem"
	}
	return "InventoryItem"
}

// ItemNamespace is the namespace of those items: "" for the cluster-scoped kinds.
func (k ObjectKey[K]) ItemNamespace() string {
	if k.Cluster {
		return ""
	}
	return k.Namespace
}

// Reference is what an Event about one version of the object regards.
func (k ObjectKey[K]) Reference(uid types.UID, resourceVersion string) *corev1.ObjectReference {
	return ObjectReference(k.Kind(), k.Namespace, k.Name, uid, resourceVersion)
}

// ObjectReference refers to one version of a Kollect object of any kind.
func ObjectReference(kind, namespace, name string, uid types.UID, resourceVersion string) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      v1alpha1.SchemeGroupVersion.String(),
		Kind:            kind,
		Namespace:       namespace,
		Name:            name,
		UID:             uid,
		ResourceVersion: resourceVersion,
	}
}
