package v1alpha1

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// itemFields are the field selectors of both item kinds; each also has
// attributes.<name> for its selectable attributes (kollect.AttributeFieldPrefix).
var itemFields = []string{"source.cluster", "source.apiVersion", "source.kind", "source.namespace", "source.name", "source.uid"}

// selectableFields lists, per kind, the field selectors beyond
// metadata.name and metadata.namespace. The registries compute the values.
var selectableFields = map[string][]string{
	"Profile":              {"spec.targetGVK.group", "spec.targetGVK.kind"},
	"Target":               {"spec.profileRef.name"},
	"ClusterTarget":        {"spec.profileRef.namespace", "spec.profileRef.name"},
	"Inventory":            {"spec.suspend"},
	"ClusterInventory":     {"spec.suspend"},
	"SnapshotSink":         {"spec.type"},
	"DatabaseSink":         {"spec.type"},
	"EventSink":            {"spec.type"},
	"Scope":                nil,
	"ClusterScope":         nil,
	"MemberCluster":        {"spec.kubeconfigSecretRef.namespace", "spec.kubeconfigSecretRef.name"},
	"InventoryItem":        itemFields,
	"ClusterInventoryItem": itemFields,
}

// itemKinds have a field per selectable attribute.
var itemKinds = map[string]bool{"InventoryItem": true, "ClusterInventoryItem": true}

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, extra := range selectableFields {
		allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
		for _, f := range extra {
			allowed[f] = true
		}
		attributes := itemKinds[kind]
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
			if name, ok := strings.CutPrefix(label, kollect.AttributeFieldPrefix); ok && attributes {
				if !kollect.IsAttributeName(name) {
					return "", "", fmt.Errorf("field label not supported for %s: %s: %q is not an attribute name: it %s, at most %d characters",
						kind, label, name, kollect.AttributeNameRule, kollect.MaxAttributeNameLength)
				}
				return label, value, nil
			}
			if !allowed[label] {
				return "", "", fmt.Errorf("field label not supported for %s: %s", kind, label)
			}
			return label, value, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
