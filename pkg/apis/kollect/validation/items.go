package validation

import (
	"encoding/json"
	"regexp"
	"sort"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

var (
	sourcePath     = field.NewPath("source")
	attributesPath = field.NewPath("attributes")
	hashRegexp     = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// itemContent holds the fields the two item kinds share.
type itemContent struct {
	source     *kollect.ItemSource
	attributes map[string]kollect.Value
	object     *kollect.Value
	selectable []string
	hash       string
}

// ValidateInventoryItem validates an InventoryItem on creation.
func ValidateInventoryItem(obj *kollect.InventoryItem) field.ErrorList {
	errs := validateNamespacedMeta(&obj.ObjectMeta)
	errs = append(errs, itemContent{&obj.Source, obj.Attributes, obj.Object, obj.SelectableAttributes, obj.Hash}.validate()...)
	if ns := obj.Source.Namespace; ns != "" && ns != obj.Namespace {
		errs = append(errs, field.Invalid(sourcePath.Child("namespace"), ns, "must be the item's own namespace, "+obj.Namespace))
	}
	return errs
}

// ValidateInventoryItemUpdate validates an InventoryItem on update: source.uid is immutable.
func ValidateInventoryItemUpdate(obj, old *kollect.InventoryItem) field.ErrorList {
	errs := validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, ValidateInventoryItem(obj)...)
	return append(errs, validateSourceUIDUpdate(&obj.Source, &old.Source)...)
}

// ValidateClusterInventoryItem validates a ClusterInventoryItem on creation.
func ValidateClusterInventoryItem(obj *kollect.ClusterInventoryItem) field.ErrorList {
	errs := validateClusterMeta(&obj.ObjectMeta)
	errs = append(errs, itemContent{&obj.Source, obj.Attributes, obj.Object, obj.SelectableAttributes, obj.Hash}.validate()...)
	if ns := obj.Source.Namespace; ns != "" {
		errs = append(errs, validateNamespaceName(ns, sourcePath.Child("namespace"))...)
	}
	return errs
}

// ValidateClusterInventoryItemUpdate validates a ClusterInventoryItem on update: source.uid is immutable.
func ValidateClusterInventoryItemUpdate(obj, old *kollect.ClusterInventoryItem) field.ErrorList {
	errs := validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta)
	errs = append(errs, ValidateClusterInventoryItem(obj)...)
	return append(errs, validateSourceUIDUpdate(&obj.Source, &old.Source)...)
}

func validateSourceUIDUpdate(source, old *kollect.ItemSource) field.ErrorList {
	return apivalidation.ValidateImmutableField(source.UID, old.UID, sourcePath.Child("uid"))
}

func (c itemContent) validate() field.ErrorList {
	errs := validateSource(c.source, sourcePath)
	// Sorted, so that errors come in a stable order.
	keys := make([]string, 0, len(c.attributes))
	for key := range c.attributes {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		keyPath := attributesPath.Key(key)
		errs = append(errs, validateAttributeName(key, keyPath)...)
		errs = append(errs, validateValue(c.attributes[key], keyPath)...)
	}
	if c.object != nil {
		errs = append(errs, validateValue(*c.object, field.NewPath("object"))...)
	}
	errs = append(errs, c.validateSelectable()...)
	if c.hash != "" && !hashRegexp.MatchString(c.hash) {
		errs = append(errs, field.Invalid(field.NewPath("hash"), c.hash, "must be a lower-case hex SHA-256 digest of 64 characters"))
	}
	return errs
}

// validateSelectable checks that each selectable attribute is one of the
// item's attributes, once, with a scalar value: the field selector
// attributes.<name> matches that value's text.
func (c itemContent) validateSelectable() field.ErrorList {
	fldPath := field.NewPath("selectableAttributes")
	if len(c.selectable) > kollect.MaxSelectableAttributes {
		return field.ErrorList{field.TooMany(fldPath, len(c.selectable), kollect.MaxSelectableAttributes)}
	}
	return validateUnique(c.selectable, fldPath.Index, func(name string, p *field.Path) field.ErrorList {
		v, ok := c.attributes[name]
		_, scalar := kollect.AttributeFieldValue(v)
		switch {
		case !ok:
			return field.ErrorList{field.Invalid(p, name, "must name one of the item's attributes")}
		case !scalar:
			return field.ErrorList{field.Invalid(p, name, "the attribute's value must be a string, a number or a boolean")}
		}
		return nil
	})
}

func validateSource(source *kollect.ItemSource, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if source.Cluster != "" {
		errs = append(errs, invalid(fldPath.Child("cluster"), source.Cluster, utilvalidation.IsDNS1123Label(source.Cluster))...)
	}
	apiVersionPath := fldPath.Child("apiVersion")
	if source.APIVersion == "" {
		errs = append(errs, field.Required(apiVersionPath, ""))
	} else if gv, err := schema.ParseGroupVersion(source.APIVersion); err != nil || gv.Version == "" {
		errs = append(errs, field.Invalid(apiVersionPath, source.APIVersion, "must be group/version or version, such as apps/v1"))
	}
	errs = append(errs, validateKind(source.Kind, fldPath.Child("kind"))...)
	return append(errs, validateAnyObjectName(source.Name, fldPath.Child("name"))...)
}

// validateValue checks that a value holds JSON; empty is null.
func validateValue(v kollect.Value, fldPath *field.Path) field.ErrorList {
	if len(v.Raw) > 0 && !json.Valid(v.Raw) {
		return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{}, "must be valid JSON")}
	}
	return nil
}
