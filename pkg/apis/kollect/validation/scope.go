package validation

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// wildcard matches every group or kind in a Scope's allowedGVKs.
const wildcard = "*"

// ValidateScope validates a Scope on creation.
func ValidateScope(obj *kollect.Scope) field.ErrorList {
	spec := &obj.Spec
	limits := scopeLimits{spec.MinExportInterval, spec.AllowedGVKs, spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs}
	return append(validateNamespacedMeta(&obj.ObjectMeta), limits.validate(validateObjectName)...)
}

// ValidateScopeUpdate validates a Scope on update.
func ValidateScopeUpdate(obj, old *kollect.Scope) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateScope(obj)...)
}

// ValidateClusterScope validates a ClusterScope on creation. Its sink
// references are "namespace/name".
func ValidateClusterScope(obj *kollect.ClusterScope) field.ErrorList {
	spec := &obj.Spec
	limits := scopeLimits{spec.MinExportInterval, spec.AllowedGVKs, spec.SnapshotSinkRefs, spec.DatabaseSinkRefs, spec.EventSinkRefs}
	errs := validateClusterMeta(&obj.ObjectMeta)
	errs = append(errs, limits.validate(validateNamespacedName)...)
	errs = append(errs, validateSet(spec.AllowedNamespaces, maxNamespaces, validateNamespaceName, specPath.Child("allowedNamespaces"))...)
	errs = append(errs, validateSet(spec.DeniedNamespaces, maxNamespaces, validateNamespaceName, specPath.Child("deniedNamespaces"))...)
	errs = append(errs, validateNotBoth(spec.AllowedNamespaces, spec.DeniedNamespaces, specPath.Child("deniedNamespaces"))...)
	return append(errs, validateSet(spec.ReferenceNamespaces, maxNamespaces, validateNamespaceName, specPath.Child("referenceNamespaces"))...)
}

// ValidateClusterScopeUpdate validates a ClusterScope on update.
func ValidateClusterScopeUpdate(obj, old *kollect.ClusterScope) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateClusterScope(obj)...)
}

// scopeLimits holds the fields Scope and ClusterScope specs share.
type scopeLimits struct {
	minExportInterval         *metav1.Duration
	allowedGVKs               []kollect.GroupKind
	snapshot, database, event []string
}

// validate checks the limits; validateSinkRef checks each sink reference.
func (l scopeLimits) validate(validateSinkRef func(string, *field.Path) field.ErrorList) field.ErrorList {
	errs := validateInterval(l.minExportInterval, specPath.Child("minExportInterval"))
	errs = append(errs, validateAllowedGVKs(l.allowedGVKs, specPath.Child("allowedGVKs"))...)
	errs = append(errs, validateSet(l.snapshot, maxScopeEntries, validateSinkRef, specPath.Child("snapshotSinkRefs"))...)
	errs = append(errs, validateSet(l.database, maxScopeEntries, validateSinkRef, specPath.Child("databaseSinkRefs"))...)
	return append(errs, validateSet(l.event, maxScopeEntries, validateSinkRef, specPath.Child("eventSinkRefs"))...)
}

func validateAllowedGVKs(gks []kollect.GroupKind, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(gks) > maxScopeEntries {
		errs = append(errs, field.TooMany(fldPath, len(gks), maxScopeEntries))
	}
	for i, gk := range gks {
		if gk.Group != wildcard {
			errs = append(errs, validateGroup(gk.Group, fldPath.Index(i).Child("group"))...)
		}
		if gk.Kind != wildcard {
			errs = append(errs, validateKind(gk.Kind, fldPath.Index(i).Child("kind"))...)
		}
	}
	return errs
}

// validateNotBoth reports the denied namespaces that are also allowed.
func validateNotBoth(allowed, denied []string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	allowedSet := sets.New(allowed...)
	for i, ns := range denied {
		if allowedSet.Has(ns) {
			errs = append(errs, field.Invalid(fldPath.Index(i), ns, "must not also be in allowedNamespaces"))
		}
	}
	return errs
}

// validateNamespacedName checks a "namespace/name" reference.
func validateNamespacedName(ref string, fldPath *field.Path) field.ErrorList {
	namespace, name, ok := strings.Cut(ref, "/")
	if !ok {
		return field.ErrorList{field.Invalid(fldPath, ref, `must be "namespace/name"`)}
	}
	var errs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Label(namespace) {
		errs = append(errs, field.Invalid(fldPath, ref, "namespace: "+msg))
	}
	for _, msg := range utilvalidation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(fldPath, ref, "name: "+msg))
	}
	return errs
}
