package validation

import (
	"regexp"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

var (
	sinkFamilies   = []kollect.SinkFamily{kollect.SinkFamilySnapshot, kollect.SinkFamilyDatabase, kollect.SinkFamilyEvent}
	exportOutcomes = []kollect.ExportOutcome{kollect.OutcomeExported, kollect.OutcomeDebounced, kollect.OutcomeFailed}

	// ProbeOutcomes are the values of a sink's status.probe.outcome: the
	// prober's classes (sink.Outcome), and nothing a status writer makes up.
	ProbeOutcomes = []string{"Succeeded", "AddressForbidden", "DNS", "Refused", "Timeout", "TLS", "Auth", "HTTPStatus", "Protocol", "SecretForbidden"}

	sinksSyncedRegexp = regexp.MustCompile(`^[0-9]+/[0-9]+$`)
)

// validateStatusCommon checks the generation and conditions every status has.
func validateStatusCommon(observedGeneration int64, conditions []metav1.Condition, fldPath *field.Path) field.ErrorList {
	errs := validateNonNegative(observedGeneration, fldPath.Child("observedGeneration"))
	return append(errs, metav1validation.ValidateConditions(conditions, fldPath.Child("conditions"))...)
}

// ValidateInventoryStatus validates the status of an Inventory or a
// ClusterInventory written through /status.
func ValidateInventoryStatus(status *kollect.InventoryStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	errs = append(errs, validateSinkExports(status.SinkExports, fldPath.Child("sinkExports"))...)
	errs = append(errs, validateNonNegative(status.ItemCount, fldPath.Child("itemCount"))...)
	if status.SinksSynced != "" && !sinksSyncedRegexp.MatchString(status.SinksSynced) {
		errs = append(errs, field.Invalid(fldPath.Child("sinksSynced"), status.SinksSynced, `must be "N/M"`))
	}
	return errs
}

// validateSinkExports checks the exporters' entries, keyed by family and name.
func validateSinkExports(entries []kollect.SinkExportStatus, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	type key struct {
		family kollect.SinkFamily
		name   string
	}
	seen := sets.New[key]()
	for i := range entries {
		entry := &entries[i]
		entryPath := fldPath.Index(i)
		k := key{entry.Family, entry.Name}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(entryPath.Child("name"), entry.Name))
		}
		seen.Insert(k)
		errs = append(errs, validateSinkExport(entry, entryPath)...)
	}
	return errs
}

func validateSinkExport(entry *kollect.SinkExportStatus, fldPath *field.Path) field.ErrorList {
	errs := validateEnum(entry.Family, sinkFamilies, fldPath.Child("family"))
	errs = append(errs, validateObjectName(entry.Name, fldPath.Child("name"))...)
	if entry.Namespace != "" {
		errs = append(errs, validateNamespaceName(entry.Namespace, fldPath.Child("namespace"))...)
	}
	errs = append(errs, validateNonNegative(entry.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	if entry.Outcome != "" {
		errs = append(errs, validateEnum(entry.Outcome, exportOutcomes, fldPath.Child("outcome"))...)
	}
	errs = append(errs, validateReason(entry.Reason, fldPath.Child("reason"))...)
	errs = append(errs, validateMessage(entry.Message, fldPath.Child("message"))...)
	errs = append(errs, validateNonNegative(entry.ItemCount, fldPath.Child("itemCount"))...)
	errs = append(errs, validateNonNegative(int64(entry.ConsecutiveFailures), fldPath.Child("consecutiveFailures"))...)
	return append(errs, validateInterval(entry.EffectiveInterval, fldPath.Child("effectiveInterval"))...)
}

// ValidateTargetStatus validates the status of a Target written through /status.
func ValidateTargetStatus(status *kollect.TargetStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	return append(errs, validateCollection(status.Collection, fldPath.Child("collection"))...)
}

// ValidateClusterTargetStatus validates the status of a ClusterTarget written through /status.
func ValidateClusterTargetStatus(status *kollect.ClusterTargetStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	errs = append(errs, validateCollection(status.Collection, fldPath.Child("collection"))...)
	errs = append(errs, validateUnique(status.MatchedNamespaces, fldPath.Child("matchedNamespaces").Index, validateNamespaceName)...)
	return append(errs, validateClusterCollections(status.Clusters, fldPath.Child("clusters"))...)
}

// validateClusterCollections checks the per-member reports of a
// ClusterTarget, keyed by the member's name.
func validateClusterCollections(clusters []kollect.ClusterCollection, fldPath *field.Path) field.ErrorList {
	names := make([]string, len(clusters))
	for i := range clusters {
		names[i] = clusters[i].Name
	}
	namePath := func(i int) *field.Path { return fldPath.Index(i).Child("name") }
	errs := validateUnique(names, namePath, validateMemberName)
	for i := range clusters {
		errs = append(errs, validateCollection(&clusters[i].Collection, fldPath.Index(i).Child("collection"))...)
	}
	return errs
}

func validateCollection(c *kollect.CollectionObservation, fldPath *field.Path) field.ErrorList {
	if c == nil {
		return nil
	}
	errs := validateNonNegative(c.ObservedGeneration, fldPath.Child("observedGeneration"))
	errs = append(errs, validateNonNegative(c.ItemCount, fldPath.Child("itemCount"))...)
	errs = append(errs, validateNonNegative(c.FailedCount, fldPath.Child("failedCount"))...)
	errs = append(errs, validateNonNegative(c.OverQuotaCount, fldPath.Child("overQuotaCount"))...)
	errs = append(errs, validateMessage(c.LastError, fldPath.Child("lastError"))...)
	return append(errs, validateReason(c.Reason, fldPath.Child("reason"))...)
}

// ValidateSinkStatus validates the status of a sink of any family written through /status.
func ValidateSinkStatus(status *kollect.SinkStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	if probe := status.Probe; probe != nil {
		probePath := fldPath.Child("probe")
		if probe.Outcome != "" {
			errs = append(errs, validateEnum(probe.Outcome, ProbeOutcomes, probePath.Child("outcome"))...)
		}
		errs = append(errs, validateMessage(probe.Message, probePath.Child("message"))...)
		errs = append(errs, validateNonNegative(probe.LatencyMillis, probePath.Child("latencyMillis"))...)
	}
	return errs
}

// ValidateProfileStatus validates the status of a Profile written through /status.
func ValidateProfileStatus(status *kollect.ProfileStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	if status.Resource != "" {
		errs = append(errs, invalid(fldPath.Child("resource"), status.Resource, utilvalidation.IsDNS1123Subdomain(status.Resource))...)
	}
	return errs
}
