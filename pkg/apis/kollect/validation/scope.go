package validation

import (
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
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
	quotas := scopeQuotas{spec.MaxTargets, spec.MaxProfiles, spec.MaxInventories, spec.MaxSinks, spec.MaxItems, spec.MaxItemBytes}
	errs := append(validateNamespacedMeta(&obj.ObjectMeta), limits.validate(validateObjectName)...)
	return append(errs, quotas.validate()...)
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
	quotas := scopeQuotas{spec.MaxTargets, nil, spec.MaxInventories, spec.MaxSinks, spec.MaxItems, spec.MaxItemBytes}
	errs := validateClusterMeta(&obj.ObjectMeta)
	errs = append(errs, limits.validate(validateNamespacedName)...)
	errs = append(errs, quotas.validate()...)
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

// MaxItemBytes is the highest maxItemBytes a Scope may set: etcd's default
// request size limit (1.5 MiB), which no item can exceed and still be stored.
var MaxItemBytes = resource.MustParse("1.5Mi")

// scopeQuotas holds the quota fields Scope and ClusterScope specs share. 0
// is a valid limit: nothing of that kind is allowed.
type scopeQuotas struct {
	targets, profiles, inventories, sinks *int32
	items                                 *int64
	itemBytes                             *resource.Quantity
}

func (q scopeQuotas) validate() field.ErrorList {
	var errs field.ErrorList
	for _, c := range []struct {
		value *int32
		name  string
	}{{q.targets, "maxTargets"}, {q.profiles, "maxProfiles"}, {q.inventories, "maxInventories"}, {q.sinks, "maxSinks"}} {
		if c.value != nil {
			errs = append(errs, apivalidation.ValidateNonnegativeField(int64(*c.value), specPath.Child(c.name))...)
		}
	}
	if q.items != nil {
		errs = append(errs, apivalidation.ValidateNonnegativeField(*q.items, specPath.Child("maxItems"))...)
	}
	if b := q.itemBytes; b != nil {
		bytesPath := specPath.Child("maxItemBytes")
		switch {
		case b.Sign() < 0:
			errs = append(errs, field.Invalid(bytesPath, b.String(), "must be greater than or equal to 0"))
		case b.Cmp(MaxItemBytes) > 0:
			errs = append(errs, field.Invalid(bytesPath, b.String(), "must be at most 1.5Mi, etcd's request size limit: no larger item can be stored"))
		case b.MilliValue()%1000 != 0:
			// Within 1.5Mi, MilliValue cannot overflow.
			errs = append(errs, field.Invalid(bytesPath, b.String(), "must be a whole number of bytes"))
		}
	}
	return errs
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
