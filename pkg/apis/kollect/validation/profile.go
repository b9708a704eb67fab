package validation

import (
	"errors"
	"fmt"
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/expression"
)

var (
	exportModes      = []kollect.ExportMode{kollect.ExportModeAttributes, kollect.ExportModeResource}
	resourceIncludes = []kollect.ResourceInclude{
		kollect.IncludeMetadata, kollect.IncludeSpec, kollect.IncludeStatus, kollect.IncludeSpecAndStatus, kollect.IncludeAll,
	}
)

// ValidateProfile validates a Profile on creation.
func ValidateProfile(obj *kollect.Profile) field.ErrorList {
	errs := validateNamespacedMeta(&obj.ObjectMeta)
	errs = append(errs, validateTargetGVK(obj.Spec.TargetGVK, specPath.Child("targetGVK"))...)
	errs = append(errs, validateSecretsOptIn(obj)...)
	errs = append(errs, validateAttributes(obj.Spec.Attributes, specPath.Child("attributes"))...)
	errs = append(errs, validateSelectable(obj.Spec.Attributes, obj.Spec.Export.Mode, specPath.Child("attributes"))...)
	return append(errs, validateProfileExport(&obj.Spec, specPath)...)
}

// ValidateProfileUpdate validates a Profile on update: targetGVK is immutable.
func ValidateProfileUpdate(obj, old *kollect.Profile) field.ErrorList {
	errs := validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, ValidateProfile(obj)...)
	return append(errs, apivalidation.ValidateImmutableField(obj.Spec.TargetGVK, old.Spec.TargetGVK, specPath.Child("targetGVK"))...)
}

func validateTargetGVK(gvk kollect.GroupVersionKind, fldPath *field.Path) field.ErrorList {
	errs := validateGroup(gvk.Group, fldPath.Child("group"))
	if gvk.Version == "" {
		errs = append(errs, field.Required(fldPath.Child("version"), ""))
	} else {
		errs = append(errs, invalid(fldPath.Child("version"), gvk.Version, utilvalidation.IsDNS1035Label(gvk.Version))...)
	}
	return append(errs, validateKind(gvk.Kind, fldPath.Child("kind"))...)
}

// validateSecretsOptIn requires the explicit opt-in annotation on a
// Profile that collects core Secrets.
func validateSecretsOptIn(obj *kollect.Profile) field.ErrorList {
	gvk := obj.Spec.TargetGVK
	if gvk.Group != "" || gvk.Kind != "Secret" {
		return nil
	}
	fldPath := metadataPath.Child("annotations").Key(kollect.AnnotationCollectSecrets)
	value, ok := obj.Annotations[kollect.AnnotationCollectSecrets]
	switch {
	case !ok:
		return field.ErrorList{field.Required(fldPath, `collecting Secrets is an explicit opt-in: set the annotation `+kollect.AnnotationCollectSecrets+`: "true"`)}
	case value != "true":
		return field.ErrorList{field.Invalid(fldPath, value, `collecting Secrets is an explicit opt-in: the annotation must be "true"`)}
	}
	return nil
}

func validateAttributes(attrs []kollect.Attribute, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(attrs) > MaxAttributes {
		// Compiling paths is costly: check only as many as are allowed.
		errs = append(errs, field.TooMany(fldPath, len(attrs), MaxAttributes))
		attrs = attrs[:MaxAttributes]
	}
	names := sets.New[string]()
	for i, attr := range attrs {
		attrPath := fldPath.Index(i)
		if names.Has(attr.Name) {
			errs = append(errs, field.Duplicate(attrPath.Child("name"), attr.Name))
		} else {
			names.Insert(attr.Name)
			errs = append(errs, validateAttributeName(attr.Name, attrPath.Child("name"))...)
		}
		pathErrs := validateAttributePath(attr.Path, attrPath.Child("path"))
		errs = append(errs, pathErrs...)
		if len(pathErrs) > 0 && pathErrs[0].Type == field.ErrorTypeInternal {
			// The checker is busy or down: each further path would wait
			// for it again.
			break
		}
	}
	return errs
}

// validateSelectable bounds the selectable attributes, which only items in
// Attributes mode carry: every list of a Profile's items computes one field
// per selectable attribute of each item it reads.
func validateSelectable(attrs []kollect.Attribute, mode kollect.ExportMode, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	n := 0
	for i, attr := range attrs {
		if !attr.Selectable {
			continue
		}
		p := fldPath.Index(i).Child("selectable")
		if mode == kollect.ExportModeResource {
			errs = append(errs, field.Forbidden(p, "only a Profile in Attributes mode has selectable attributes: in Resource mode items carry the object, not attributes"))
			continue
		}
		if n++; n > kollect.MaxSelectableAttributes {
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("at most %d attributes of a Profile may be selectable, and this is selectable attribute number %d", kollect.MaxSelectableAttributes, n)))
		}
	}
	return errs
}

func validateAttributePath(path string, fldPath *field.Path) field.ErrorList {
	switch {
	case path == "":
		return field.ErrorList{field.Required(fldPath, `a JSONPath such as "{.spec.replicas}" or a CEL expression such as "cel:object.spec.replicas"`)}
	case len(path) > MaxPathLength:
		return field.ErrorList{field.TooLong(fldPath, path, MaxPathLength)}
	}
	if _, err := expression.Compile(path); errors.Is(err, expression.ErrCheckerUnavailable) {
		return field.ErrorList{field.InternalError(fldPath, err)}
	} else if err != nil {
		return field.ErrorList{field.Invalid(fldPath, path, err.Error())}
	}
	return nil
}

func validateProfileExport(spec *kollect.ProfileSpec, fldPath *field.Path) field.ErrorList {
	export := spec.Export
	exportPath := fldPath.Child("export")
	errs := validateEnum(export.Mode, exportModes, exportPath.Child("mode"))
	if export.Mode == kollect.ExportModeAttributes && len(spec.Attributes) == 0 {
		errs = append(errs, field.Required(fldPath.Child("attributes"), "at least one attribute is required in Attributes mode"))
	}
	if export.Mode == kollect.ExportModeResource || export.Include != "" {
		errs = append(errs, validateEnum(export.Include, resourceIncludes, exportPath.Child("include"))...)
	}
	if export.Prune != nil {
		errs = append(errs, validatePrune(export.Prune, exportPath.Child("prune"))...)
	}
	return errs
}

func validatePrune(prune *kollect.ResourcePrune, fldPath *field.Path) field.ErrorList {
	errs := validateSet(prune.JSONPointers, maxPruneEntries, validateJSONPointer, fldPath.Child("jsonPointers"))
	return append(errs, validateSet(prune.ScrubKeys, maxPruneEntries, validateScrubKey, fldPath.Child("scrubKeys"))...)
}

// validateJSONPointer checks an RFC 6901 pointer into the object: "~" is
// only allowed in the escapes "~0" and "~1".
func validateJSONPointer(pointer string, fldPath *field.Path) field.ErrorList {
	if !strings.HasPrefix(pointer, "/") {
		return field.ErrorList{field.Invalid(fldPath, pointer, `must be an RFC 6901 JSON pointer starting with "/", such as "/status/conditions"`)}
	}
	for i := 0; i < len(pointer); i++ {
		if pointer[i] == '~' && (i+1 == len(pointer) || (pointer[i+1] != '0' && pointer[i+1] != '1')) {
			return field.ErrorList{field.Invalid(fldPath, pointer, `"~" must be escaped as "~0" ("/" as "~1")`)}
		}
	}
	return nil
}

func validateScrubKey(key string, fldPath *field.Path) field.ErrorList {
	if key == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return nil
}
