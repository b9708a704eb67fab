// Package validation checks kollect.dev objects in their internal form, after
// defaulting. Every error carries the path of the field it is about, so
// `kubectl apply` shows exactly what is wrong.
package validation

import (
	"context"
	"net"
	"net/netip"
	"regexp"
	"strings"
	"time"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/api/validation/path"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// Options configures the checks that depend on how the server runs.
type Options struct {
	// AllowPrivateSinkEndpoints lets sink endpoints name loopback, private,
	// link-local and metadata addresses (--allow-private-sink-endpoints).
	AllowPrivateSinkEndpoints bool
	// FileSinks admits SnapshotSinks of type file: the server runs with
	// --file-sink-root, under which each namespace has its own directory.
	FileSinks bool
	// AllowLocalGitSinks admits git sinks on the server's own file system,
	// file:// endpoints (--allow-local-git-sinks).
	AllowLocalGitSinks bool
	// LookupIP resolves a host name; nil means net.DefaultResolver.LookupIPAddr with a 2s timeout.
	// The server passes its sink dialer's (--sink-dns-server), so that
	// admission and the exporters agree on what a name resolves to.
	LookupIP func(ctx context.Context, host string) ([]net.IP, error)
	// AllowedSinkCIDRs are reachable although private (--allowed-sink-cidrs).
	AllowedSinkCIDRs []netip.Prefix
}

// Limits enforced on the API.
const (
	// MaxExportInterval bounds every export interval.
	MaxExportInterval = 24 * time.Hour
	// MaxSinkReferences bounds the sink references of an inventory, all families together.
	MaxSinkReferences = 20
	// MaxAttributes bounds the attributes of a Profile.
	MaxAttributes = 64
	// MaxPathLength bounds an attribute path.
	MaxPathLength = 4096
	// MaxMessageLength bounds status messages.
	MaxMessageLength = 4096

	maxPruneEntries    = 64
	maxSelectedNames   = 1000
	maxNamespaces      = 1000
	maxScopeEntries    = 100
	maxWebhookTimeout  = time.Minute
	maxWebhookAttempts = 20
	maxKindLength      = 63
)

// Bounds of the lists Kubernetes itself leaves unbounded, so that a request
// cannot make the controllers match every object against thousands of
// entries.
const (
	// maxSelectorRequirements bounds the matchLabels and the
	// matchExpressions of a label selector, each.
	maxSelectorRequirements = 100
	// maxSelectorValues bounds the values of one selector expression.
	maxSelectorValues = 1000
	// maxTargetRefs bounds the targetRefs of a ClusterInventory.
	maxTargetRefs = 1000
)

var (
	metadataPath = field.NewPath("metadata")
	specPath     = field.NewPath("spec")

	kindRegexp = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

func validateNamespacedMeta(meta *metav1.ObjectMeta) field.ErrorList {
	return apivalidation.ValidateObjectMeta(meta, true, apivalidation.NameIsDNSSubdomain, metadataPath)
}

func validateClusterMeta(meta *metav1.ObjectMeta) field.ErrorList {
	return apivalidation.ValidateObjectMeta(meta, false, apivalidation.NameIsDNSSubdomain, metadataPath)
}

func validateMetaUpdate(meta, old *metav1.ObjectMeta) field.ErrorList {
	return apivalidation.ValidateObjectMetaUpdate(meta, old, metadataPath)
}

// invalid turns the messages of a k8s.io/apimachinery validator into errors.
func invalid(fldPath *field.Path, value string, msgs []string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range msgs {
		errs = append(errs, field.Invalid(fldPath, value, msg))
	}
	return errs
}

// validateObjectName checks a required reference to a kollect.dev object.
func validateObjectName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return invalid(fldPath, name, utilvalidation.IsDNS1123Subdomain(name))
}

// validateNamespaceName checks a required namespace.
func validateNamespaceName(namespace string, fldPath *field.Path) field.ErrorList {
	if namespace == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return invalid(fldPath, namespace, utilvalidation.IsDNS1123Label(namespace))
}

// validateAnyObjectName checks the name of a collected object, which may be
// of any kind: some kinds, like ClusterRoles, allow more than DNS names.
func validateAnyObjectName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	errs := invalid(fldPath, name, path.ValidatePathSegmentName(name, false))
	if len(name) > utilvalidation.DNS1123SubdomainMaxLength {
		errs = append(errs, field.TooLong(fldPath, name, utilvalidation.DNS1123SubdomainMaxLength))
	}
	return errs
}

// stringRule describes a required string: at most maxLen bytes, and
// accepted by valid, which msg explains.
type stringRule struct {
	maxLen int
	valid  func(string) bool
	msg    string
}

func (r stringRule) validate(value string, fldPath *field.Path) field.ErrorList {
	switch {
	case value == "":
		return field.ErrorList{field.Required(fldPath, "")}
	case len(value) > r.maxLen:
		return field.ErrorList{field.TooLong(fldPath, value, r.maxLen)}
	case !r.valid(value):
		return field.ErrorList{field.Invalid(fldPath, value, r.msg)}
	}
	return nil
}

var (
	kindRule = stringRule{maxKindLength, kindRegexp.MatchString,
		"must be a CamelCase kind such as Deployment: an upper-case letter followed by letters and digits"}
	attributeNameRule = stringRule{kollect.MaxAttributeNameLength, kollect.IsAttributeName, kollect.AttributeNameRule}
	reasonRule        = stringRule{maxKindLength, kindRegexp.MatchString, "must be a CamelCase word such as SinkNotFound"}
)

// validateKind checks a required CamelCase kind.
func validateKind(kind string, fldPath *field.Path) field.ErrorList {
	return kindRule.validate(kind, fldPath)
}

// validateGroup checks an optional API group; empty is the core group.
func validateGroup(group string, fldPath *field.Path) field.ErrorList {
	if group == "" {
		return nil
	}
	return invalid(fldPath, group, utilvalidation.IsDNS1123Subdomain(group))
}

func validateAttributeName(name string, fldPath *field.Path) field.ErrorList {
	return attributeNameRule.validate(name, fldPath)
}

// validateSet checks a list of at most max unique strings, each with validate.
func validateSet(values []string, max int, validate func(string, *field.Path) field.ErrorList, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(values) > max {
		errs = append(errs, field.TooMany(fldPath, len(values), max))
	}
	return append(errs, validateUnique(values, fldPath.Index, validate)...)
}

// validateRefNames checks the names of a list of references keyed by name,
// reporting on fldPath[i].name: each required, valid and unique.
func validateRefNames(names []string, fldPath *field.Path) field.ErrorList {
	namePath := func(i int) *field.Path { return fldPath.Index(i).Child("name") }
	return validateUnique(names, namePath, validateObjectName)
}

// validateUnique checks that values are unique, and each valid, reporting
// on the path at(i) of value i.
func validateUnique(values []string, at func(int) *field.Path, validate func(string, *field.Path) field.ErrorList) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for i, v := range values {
		if seen.Has(v) {
			errs = append(errs, field.Duplicate(at(i), v))
			continue
		}
		seen.Insert(v)
		errs = append(errs, validate(v, at(i))...)
	}
	return errs
}

// validateSelector checks a label selector, and bounds its size: the
// collector and the exporter match every object they see against it, and
// Kubernetes sets no limit of its own.
func validateSelector(selector *metav1.LabelSelector, fldPath *field.Path) field.ErrorList {
	if selector == nil {
		return nil
	}
	var errs field.ErrorList
	if n := len(selector.MatchLabels); n > maxSelectorRequirements {
		errs = append(errs, field.TooMany(fldPath.Child("matchLabels"), n, maxSelectorRequirements))
	}
	exprs := selector.MatchExpressions
	if n := len(exprs); n > maxSelectorRequirements {
		errs = append(errs, field.TooMany(fldPath.Child("matchExpressions"), n, maxSelectorRequirements))
		exprs = exprs[:maxSelectorRequirements]
	}
	for i, expr := range exprs {
		if n := len(expr.Values); n > maxSelectorValues {
			errs = append(errs, field.TooMany(fldPath.Child("matchExpressions").Index(i).Child("values"), n, maxSelectorValues))
		}
	}
	if len(errs) > 0 {
		// Validating every entry of an oversized selector would only
		// repeat the same point thousands of times.
		return errs
	}
	return metav1validation.ValidateLabelSelector(selector, metav1validation.LabelSelectorValidationOptions{}, fldPath)
}

// validateDuration checks an optional duration between 0 and max.
func validateDuration(d *metav1.Duration, max time.Duration, fldPath *field.Path) field.ErrorList {
	switch {
	case d == nil:
		return nil
	case d.Duration < 0:
		return field.ErrorList{field.Invalid(fldPath, d.Duration.String(), "must be non-negative")}
	case d.Duration > max:
		return field.ErrorList{field.Invalid(fldPath, d.Duration.String(), "must be at most "+shortDuration(max))}
	}
	return nil
}

// validateInterval checks an export interval.
func validateInterval(d *metav1.Duration, fldPath *field.Path) field.ErrorList {
	return validateDuration(d, MaxExportInterval, fldPath)
}

// shortDuration prints 24h rather than 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// validateEnum checks a required value against its supported values.
func validateEnum[T ~string](value T, supported []T, fldPath *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	for _, s := range supported {
		if value == s {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(fldPath, value, supported)}
}

func validateNonNegative(value int64, fldPath *field.Path) field.ErrorList {
	return apivalidation.ValidateNonnegativeField(value, fldPath)
}

func validateMessage(msg string, fldPath *field.Path) field.ErrorList {
	if len(msg) > MaxMessageLength {
		return field.ErrorList{field.TooLong(fldPath, msg, MaxMessageLength)}
	}
	return nil
}

// validateReason checks an optional CamelCase reason word.
func validateReason(reason string, fldPath *field.Path) field.ErrorList {
	if reason == "" {
		return nil
	}
	return reasonRule.validate(reason, fldPath)
}
