package validation

import (
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kollect.dev/kollect/pkg/apis/kollect"
)

// Bounds of what the owning replica reports about a member.
const (
	maxOwnerLength         = 253
	maxServerVersionLength = 64
)

// ValidateMemberCluster validates a MemberCluster on creation. Its name is
// a DNS label: it becomes the items' source.cluster and the value of their
// label kollect.dev/cluster.
func ValidateMemberCluster(obj *kollect.MemberCluster) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, false, apivalidation.NameIsDNSLabel, metadataPath)
	ref := obj.Spec.KubeconfigSecretRef
	refPath := specPath.Child("kubeconfigSecretRef")
	errs = append(errs, validateNamespaceName(ref.Namespace, refPath.Child("namespace"))...)
	errs = append(errs, validateObjectName(ref.Name, refPath.Child("name"))...)
	if ref.Key == "" {
		errs = append(errs, field.Required(refPath.Child("key"), `the key of the Secret's data holding the kubeconfig ("kubeconfig" when omitted)`))
	} else {
		errs = append(errs, invalid(refPath.Child("key"), ref.Key, utilvalidation.IsConfigMapKey(ref.Key))...)
	}
	return errs
}

// ValidateMemberClusterUpdate validates a MemberCluster on update.
func ValidateMemberClusterUpdate(obj, old *kollect.MemberCluster) field.ErrorList {
	return append(validateMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta), ValidateMemberCluster(obj)...)
}

// ValidateMemberClusterStatus validates the status of a MemberCluster
// written through /status.
func ValidateMemberClusterStatus(status *kollect.MemberClusterStatus, fldPath *field.Path) field.ErrorList {
	errs := validateStatusCommon(status.ObservedGeneration, status.Conditions, fldPath)
	c := status.Collection
	if c == nil {
		return errs
	}
	p := fldPath.Child("collection")
	errs = append(errs, validateNonNegative(c.ObservedGeneration, p.Child("observedGeneration"))...)
	if len(c.Owner) > maxOwnerLength {
		errs = append(errs, field.TooLong(p.Child("owner"), c.Owner, maxOwnerLength))
	}
	if len(c.ServerVersion) > maxServerVersionLength {
		errs = append(errs, field.TooLong(p.Child("serverVersion"), c.ServerVersion, maxServerVersionLength))
	}
	errs = append(errs, validateNonNegative(c.ItemCount, p.Child("itemCount"))...)
	errs = append(errs, validateReason(c.ErrorClass, p.Child("errorClass"))...)
	errs = append(errs, validateMessage(c.LastError, p.Child("lastError"))...)
	if c.Reachable && c.UnreachableSince != nil {
		errs = append(errs, field.Forbidden(p.Child("unreachableSince"), "must be unset while the member is reachable"))
	}
	return errs
}

// validateMemberName checks a required MemberCluster name.
func validateMemberName(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "")}
	}
	return invalid(fldPath, name, utilvalidation.IsDNS1123Label(name))
}
