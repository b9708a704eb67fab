package tenancy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// VerbUse is the custom verb a user needs on a Profile or sink to reference
// it, and on a MemberCluster to collect from it.
const VerbUse = "use"

// VerbEscalate is the verb a user needs on scopes to set a Scope's quota
// above the server's default.
const VerbEscalate = "escalate"

// Referenced is a kind that other objects reference, and is checked with `use`.
type Referenced struct {
	Kind, Resource string
}

// The kinds that are referenced.
var (
	Profiles      = Referenced{"Profile", "profiles"}
	SnapshotSinks = Referenced{"SnapshotSink", "snapshotsinks"}
	DatabaseSinks = Referenced{"DatabaseSink", "databasesinks"}
	EventSinks    = Referenced{"EventSink", "eventsinks"}
	// MemberClusters are cluster-scoped: their namespace is "".
	MemberClusters = Referenced{"MemberCluster", "memberclusters"}
)

// UseAttributes asks for `use` on one Profile, sink or MemberCluster.
func UseAttributes(r Referenced, namespace, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb:            VerbUse,
		Namespace:       namespace,
		APIGroup:        kollect.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        r.Resource,
		Name:            name,
		ResourceRequest: true,
	}
}

// Secrets a sink uses are read on the authority of the user recorded on
// the sink, who must be allowed to read them; exports on the authority of
// the inventory's requester, who must be allowed to read the items.
var (
	secretsResource = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	itemsResource   = kollect.Resource("inventoryitems").WithVersion(v1alpha1.SchemeGroupVersion.Version)
	// clusterItemsResource are the items a ClusterInventory exports.
	clusterItemsResource = kollect.Resource("clusterinventoryitems").WithVersion(v1alpha1.SchemeGroupVersion.Version)
)

// GetSecretAttributes asks for `get` on one Secret.
func GetSecretAttributes(namespace, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb:            "get",
		Namespace:       namespace,
		APIVersion:      secretsResource.Version,
		Resource:        secretsResource.Resource,
		Name:            name,
		ResourceRequest: true,
	}
}

// ItemsOf is the item resource an inventory exports: inventoryitems in its
// namespace, or clusterinventoryitems (namespace empty) across the cluster.
func ItemsOf(namespace string) schema.GroupVersionResource {
	if namespace == "" {
		return clusterItemsResource
	}
	return itemsResource
}

// ListAttributes asks for `list` of a resource in a namespace, or across
// the cluster when namespace is empty.
func ListAttributes(gvr schema.GroupVersionResource, namespace string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb:            "list",
		Namespace:       namespace,
		APIGroup:        gvr.Group,
		APIVersion:      gvr.Version,
		Resource:        gvr.Resource,
		ResourceRequest: true,
	}
}

// EscalateAttributes asks for `escalate` on one Scope.
func EscalateAttributes(namespace, name string) authorizer.AttributesRecord {
	return authorizer.AttributesRecord{
		Verb:            VerbEscalate,
		Namespace:       namespace,
		APIGroup:        kollect.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        "scopes",
		Name:            name,
		ResourceRequest: true,
	}
}

// Where names a namespace in messages, or the cluster when it is empty.
func Where(namespace string) string {
	if namespace == "" {
		return "across the cluster (all namespaces)"
	}
	return fmt.Sprintf("in namespace %q", namespace)
}

// ResourceString names a resource in messages: "secrets",
// "inventoryitems.kollect.dev".
func ResourceString(r schema.GroupVersionResource) string {
	if r.Group == "" {
		return r.Resource
	}
	return r.Resource + "." + r.Group
}
