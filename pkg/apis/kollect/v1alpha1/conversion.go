package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

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
	"InventoryItem":        {"source.apiVersion", "source.kind", "source.namespace", "source.name", "source.uid"},
	"ClusterInventoryItem": {"source.apiVersion", "source.kind", "source.namespace", "source.name", "source.uid"},
}

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, extra := range selectableFields {
		allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
		for _, f := range extra {
			allowed[f] = true
		}
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind), func(label, value string) (string, string, error) {
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
