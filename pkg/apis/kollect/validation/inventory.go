package validation

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// exportSpec holds the fields Inventory and ClusterInventory specs share.
type exportSpec struct {
	targetSelector            *metav1.LabelSelector
	exportMinInterval         *metav1.Duration
	snapshot, database, event []kollect.SinkReference
}

// ValidateInventory validates an Inventory on creation.
func ValidateInventory(obj *kollect.Inventory) field.ErrorList {
	spec := &obj.Spec
	export := exportSpec{spec.TargetSelector, spec.ExportMinInterval, spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs}
	return append(validateNamespacedMeta(&obj.ObjectMeta), export.validate(validateLocalSinkNamespace)...)
}

// ValidateInventoryUpdate validates an Inventory on update.
func ValidateInventoryUpdate(obj, old *kollect.Inventory) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateInventory(obj)...)
}

// ValidateClusterInventory validates a ClusterInventory on creation.
func ValidateClusterInventory(obj *kollect.ClusterInventory) field.ErrorList {
	spec := &obj.Spec
	export := exportSpec{spec.TargetSelector, spec.ExportMinInterval, spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs}
	errs := validateClusterMeta(&obj.ObjectMeta)
	errs = append(errs, validateNamespaceName(spec.SinkNamespace, specPath.Child("sinkNamespace"))...)
	if n := len(spec.TargetRefs); n > maxTargetRefs {
		errs = append(errs, field.TooMany(specPath.Child("targetRefs"), n, maxTargetRefs))
	} else {
		errs = append(errs, validateRefNames(localRefNames(spec.TargetRefs), specPath.Child("targetRefs"))...)
	}
	return append(errs, export.validate(validateClusterSinkNamespace)...)
}

// ValidateClusterInventoryUpdate validates a ClusterInventory on update.
func ValidateClusterInventoryUpdate(obj, old *kollect.ClusterInventory) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateClusterInventory(obj)...)
}

// validate checks the selector, the interval and each family's references,
// and that all families together hold at most MaxSinkReferences: the error
// is reported on the family whose references cross the limit.
func (e exportSpec) validate(validateNamespace func(string, *field.Path) field.ErrorList) field.ErrorList {
	errs := validateSelector(e.targetSelector, specPath.Child("targetSelector"))
	errs = append(errs, validateInterval(e.exportMinInterval, specPath.Child("exportMinInterval"))...)
	total := len(e.snapshot) + len(e.database) + len(e.event)
	counted := 0
	for _, family := range []struct {
		field string
		refs  []kollect.SinkReference
	}{
		{"snapshotSinkRefs", e.snapshot},
		{"databaseSinkRefs", e.database},
		{"eventSinkRefs", e.event},
	} {
		familyPath := specPath.Child(family.field)
		errs = append(errs, validateSinkRefs(family.refs, validateNamespace, familyPath)...)
		if counted <= MaxSinkReferences && counted+len(family.refs) > MaxSinkReferences {
			errs = append(errs, tooManySinkRefs(familyPath, total))
		}
		counted += len(family.refs)
	}
	return errs
}

func tooManySinkRefs(fldPath *field.Path, total int) *field.Error {
	err := field.TooMany(fldPath, total, MaxSinkReferences)
	err.Detail = fmt.Sprintf("must have at most %d sink references across snapshotSinkRefs, databaseSinkRefs and eventSinkRefs", MaxSinkReferences)
	return err
}

// validateSinkRefs checks the references of one family: names valid and
// unique (the list is keyed by name), namespaces and intervals valid.
func validateSinkRefs(refs []kollect.SinkReference, validateNamespace func(string, *field.Path) field.ErrorList, fldPath *field.Path) field.ErrorList {
	names := make([]string, len(refs))
	for i, ref := range refs {
		names[i] = ref.Name
	}
	errs := validateRefNames(names, fldPath)
	for i, ref := range refs {
		refPath := fldPath.Index(i)
		errs = append(errs, validateNamespace(ref.Namespace, refPath.Child("namespace"))...)
		errs = append(errs, validateInterval(ref.ExportMinInterval, refPath.Child("exportMinInterval"))...)
	}
	return errs
}

// validateLocalSinkNamespace forbids a namespace on the references of an
// Inventory: its sinks are in its own namespace.
func validateLocalSinkNamespace(namespace string, fldPath *field.Path) field.ErrorList {
	if namespace != "" {
		return field.ErrorList{field.Forbidden(fldPath, "an Inventory's sinks are in its own namespace; only ClusterInventory references name a namespace")}
	}
	return nil
}

// validateClusterSinkNamespace checks the optional namespace of the
// references of a ClusterInventory, which defaults to spec.sinkNamespace.
func validateClusterSinkNamespace(namespace string, fldPath *field.Path) field.ErrorList {
	if namespace == "" {
		return nil
	}
	return validateNamespaceName(namespace, fldPath)
}

func localRefNames(refs []kollect.LocalObjectReference) []string {
	names := make([]string, len(refs))
	for i, ref := range refs {
		names[i] = ref.Name
	}
	return names
}
