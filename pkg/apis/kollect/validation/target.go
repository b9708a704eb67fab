package validation

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// ValidateTarget validates a Target on creation.
func ValidateTarget(obj *kollect.Target) field.ErrorList {
	errs := validateNamespacedMeta(&obj.ObjectMeta)
	errs = append(errs, validateObjectName(obj.Spec.ProfileRef.Name, specPath.Child("profileRef", "name"))...)
	errs = append(errs, validateSelector(obj.Spec.LabelSelector, specPath.Child("labelSelector"))...)
	return append(errs, validateSelectedNames(obj.Spec.Names, specPath.Child("names"))...)
}

// ValidateTargetUpdate validates a Target on update.
func ValidateTargetUpdate(obj, old *kollect.Target) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateTarget(obj)...)
}

// ValidateClusterTarget validates a ClusterTarget on creation.
func ValidateClusterTarget(obj *kollect.ClusterTarget) field.ErrorList {
	spec := &obj.Spec
	errs := validateClusterMeta(&obj.ObjectMeta)
	errs = append(errs, validateClusterProfileRef(spec.ProfileRef, specPath.Child("profileRef"))...)
	errs = append(errs, validateSelector(spec.NamespaceSelector, specPath.Child("namespaceSelector"))...)
	errs = append(errs, validateSet(spec.IncludeNamespaces, maxNamespaces, validateNamespaceName, specPath.Child("includeNamespaces"))...)
	errs = append(errs, validateSet(spec.ExcludeNamespaces, maxNamespaces, validateNamespaceName, specPath.Child("excludeNamespaces"))...)
	errs = append(errs, validateSelector(spec.LabelSelector, specPath.Child("labelSelector"))...)
	errs = append(errs, validateSelector(spec.ClusterSelector, specPath.Child("clusterSelector"))...)
	return append(errs, validateSelectedNames(spec.Names, specPath.Child("names"))...)
}

// ValidateClusterTargetUpdate validates a ClusterTarget on update.
func ValidateClusterTargetUpdate(obj, old *kollect.ClusterTarget) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateClusterTarget(obj)...)
}

// validateClusterProfileRef requires the namespace: cluster kinds have no
// namespace of their own to default to.
func validateClusterProfileRef(ref kollect.NamespacedObjectReference, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if ref.Namespace == "" {
		errs = append(errs, field.Required(fldPath.Child("namespace"), "cluster kinds have no implicit namespace: name the namespace of the Profile"))
	} else {
		errs = append(errs, validateNamespaceName(ref.Namespace, fldPath.Child("namespace"))...)
	}
	return append(errs, validateObjectName(ref.Name, fldPath.Child("name"))...)
}

// validateSelectedNames checks the names of the objects a target collects.
func validateSelectedNames(names []string, fldPath *field.Path) field.ErrorList {
	return validateSet(names, maxSelectedNames, validateAnyObjectName, fldPath)
}
