package tenancy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// The controllers ask the same questions again at reconcile, about objects
// that passed admission: a grant may have been revoked since, or a Scope
// written later may forbid what the object does. What follows gives them
// the admission rules in that form: a Denial with the reason the object's
// status shows, instead of a rejected request.

// Denial is a reference or a limit an existing object may no longer use.
type Denial struct {
	// Reason is the status reason: SinkForbidden, ProfileForbidden,
	// SecretForbidden, ItemsForbidden, RequesterExpired, ScopeGVKDenied,
	// ScopeNamespaceDenied, ScopeSinkDenied or SinkNamespaceDenied.
	Reason string
	// Message names the user or the limit, and what is denied.
	Message string
}

func (d *Denial) Error() string { return d.Reason + ": " + d.Message }

// TenantModeDenial is what a ClusterTarget or ClusterInventory created
// before --tenant-mode was turned on reports: the controllers no longer
// collect or export for it, and deleting it still cleans up.
func TenantModeDenial(kind string) *Denial {
	doing := "collects"
	if kind == "ClusterInventory" {
		doing = "exports"
	}
	return &Denial{Reason: kollect.ReasonTenantMode,
		Message: fmt.Sprintf("the server runs with --tenant-mode: no %s %s anything; delete it (deletion cleans up as usual)", kind, doing)}
}

// AnnotationReaffirm is kollect.AnnotationReaffirm, for the messages that
// tell users how to re-affirm.
const AnnotationReaffirm = kollect.AnnotationReaffirm

// Floor is the highest minExportInterval of the limits, 0 when none sets one.
func (l Limits) Floor() time.Duration {
	floor, _ := l.ls.floor()
	return floor
}

// Kind denies collecting a kind that some allowedGVKs leaves out.
func (l Limits) Kind(group, kind string) *Denial {
	by := l.ls.denyingKind(group, kind)
	if len(by) == 0 {
		return nil
	}
	return &Denial{Reason: kollect.ReasonScopeGVKDenied,
		Message: fmt.Sprintf("kind %s is not in the allowedGVKs of %s: collection stopped, the items are kept", groupKindString(group, kind), names(by))}
}

// ProfileNamespace denies a ClusterTarget's Profile in a namespace outside
// some referenceNamespaces.
func (l Limits) ProfileNamespace(namespace string) *Denial {
	by := l.ls.denying(func(x limit) []string { return x.referenceNamespaces }, namespace)
	if len(by) == 0 {
		return nil
	}
	return &Denial{Reason: kollect.ReasonScopeNamespaceDenied,
		Message: fmt.Sprintf("the Profile's namespace %q is not in the referenceNamespaces of %s: collection stopped, the items are kept", namespace, names(by))}
}

// Sink denies an inventory's sink that a sink allowlist leaves out
// (ScopeSinkDenied) or, for a ClusterInventory, whose namespace is outside
// some referenceNamespaces (SinkNamespaceDenied). A ClusterInventory's sinks
// are listed as "namespace/name" in ClusterScopes, an Inventory's by name.
func (l Limits) Sink(family kollect.SinkFamily, namespace, name string, cluster bool) *Denial {
	if cluster {
		if by := l.ls.denying(func(x limit) []string { return x.referenceNamespaces }, namespace); len(by) > 0 {
			return &Denial{Reason: kollect.ReasonSinkNamespaceDenied,
				Message: fmt.Sprintf("the sink's namespace %q is not in the referenceNamespaces of %s: nothing more is exported there", namespace, names(by))}
		}
	}
	allowed := name
	if cluster {
		allowed = namespace + "/" + name
	}
	for _, f := range families {
		if f.family != family {
			continue
		}
		if by := l.ls.denying(func(x limit) []string { return x.sinks[family] }, allowed); len(by) > 0 {
			return &Denial{Reason: kollect.ReasonScopeSinkDenied,
				Message: fmt.Sprintf("%s %q is not in the %s allowlist of %s: nothing more is exported there", f.sink.Kind, allowed, f.field, names(by))}
		}
	}
	return nil
}

// CollectsFrom tells whether a ClusterTarget may collect in a namespace:
// it is in every allowedNamespaces that is set and in no deniedNamespaces.
func (l Limits) CollectsFrom(namespace string) bool {
	if len(l.ls.denying(func(x limit) []string { return x.allowedNamespaces }, namespace)) > 0 {
		return false
	}
	for _, x := range l.ls {
		if slices.Contains(x.deniedNamespaces, namespace) {
			return false
		}
	}
	return true
}

// IncludedNamespaces denies a ClusterTarget that names, in
// includeNamespaces, namespaces it may not collect from. It still collects
// from the others; the denied ones are left out.
func (l Limits) IncludedNamespaces(include []string) *Denial {
	var denied []string
	for _, ns := range include {
		if !l.CollectsFrom(ns) {
			denied = append(denied, ns)
		}
	}
	if len(denied) == 0 {
		return nil
	}
	return &Denial{Reason: kollect.ReasonScopeNamespaceDenied,
		Message: fmt.Sprintf("includeNamespaces lists %s, which the ClusterScopes do not allow (allowedNamespaces, deniedNamespaces): they are not collected", strings.Join(quoteAll(denied), ", "))}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// RequesterUser is the user an object's status.requester records, as the
// authorizer sees users.
func RequesterUser(r *v1alpha1.RequesterInfo) user.Info {
	u := &user.DefaultInfo{Name: r.Username, UID: r.UID, Groups: slices.Clone(r.Groups)}
	if len(r.Extra) > 0 {
		u.Extra = make(map[string][]string, len(r.Extra))
		for k, v := range r.Extra {
			u.Extra[k] = slices.Clone(v)
		}
	}
	return u
}

// noRequester explains a denial of an object nobody is recorded for: with
// authorization on, every admitted object records its requester, so one
// without was written around the checks and gets no benefit of the doubt.
const noRequester = "the object records no requester (status.requester), so whether it may use the reference cannot be checked; update its references to record you"

// MayUse re-asks whether the requester may still hold `use` on a Profile
// or sink (resource "profiles", "snapshotsinks", ...). A Denial means the
// authorizer said no; an error means it could not answer and the caller
// retries rather than treat the reference as forbidden.
func MayUse(ctx context.Context, authz authorizer.Authorizer, requester *v1alpha1.RequesterInfo, resource, namespace, name string) (*Denial, error) {
	r, ok := referencedByResource(resource)
	if !ok {
		return nil, fmt.Errorf("%s cannot be referenced", resource)
	}
	reason := kollect.ReasonSinkForbidden
	switch r {
	case Profiles:
		reason = kollect.ReasonProfileForbidden
	case MemberClusters:
		reason = kollect.ReasonMemberForbidden
	}
	if requester == nil {
		return &Denial{Reason: reason, Message: noRequester}, nil
	}
	why, allowed, err := ask(ctx, authz, requester, UseAttributes(r, namespace, name))
	if allowed || err != nil {
		return nil, err
	}
	where := ""
	if namespace != "" {
		where = fmt.Sprintf(" in namespace %q", namespace)
	}
	msg := fmt.Sprintf("user %q, recorded as the requester, may no longer use %s %q%s (the verb %q on %s.%s): nothing more is done with it",
		requester.Username, r.Kind, name, where, VerbUse, r.Resource, kollect.GroupName)
	return &Denial{Reason: reason, Message: msg + why}, nil
}

// MayList re-asks whether the requester of a Target (namespace set) or
// ClusterTarget (namespace empty) may still list what its Profile collects.
// A revoked grant is reported as ProfileForbidden: the Profile can no
// longer be used by this target.
func MayList(ctx context.Context, authz authorizer.Authorizer, requester *v1alpha1.RequesterInfo, gvr schema.GroupVersionResource, namespace string) (*Denial, error) {
	if requester == nil {
		return &Denial{Reason: kollect.ReasonProfileForbidden, Message: noRequester}, nil
	}
	why, allowed, err := ask(ctx, authz, requester, ListAttributes(gvr, namespace))
	if allowed || err != nil {
		return nil, err
	}
	where := "across the cluster"
	if namespace != "" {
		where = fmt.Sprintf("in namespace %q", namespace)
	}
	msg := fmt.Sprintf("user %q, recorded as the requester, may no longer list %s %s, which the Profile collects: collection stopped, the items are kept",
		requester.Username, ResourceString(gvr), where)
	return &Denial{Reason: kollect.ReasonProfileForbidden, Message: msg + why}, nil
}

// noSinkRequester explains a denial of a sink that records no requester:
// sinks record one since they need `get` on their Secret; one written
// before that must be re-affirmed before its Secret is used again.
const noSinkRequester = "the sink records no requester (status.requester), so whether its Secret may be used cannot be checked (it was written before sinks recorded who set their Secret); re-affirm it to record you: kubectl annotate --overwrite <kind> <name> " + AnnotationReaffirm + "=<timestamp>"

// MayGetSecret re-asks whether the requester recorded on a sink may still
// `get` the Secret it uses, in the sink's namespace. A Denial
// (SecretForbidden) means the Secret must not be read; an error means the
// authorizer could not answer and the caller retries.
func MayGetSecret(ctx context.Context, authz authorizer.Authorizer, requester *v1alpha1.RequesterInfo, namespace, name string) (*Denial, error) {
	if requester == nil {
		return &Denial{Reason: kollect.ReasonSecretForbidden, Message: noSinkRequester}, nil
	}
	why, allowed, err := ask(ctx, authz, requester, GetSecretAttributes(namespace, name))
	if allowed || err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("user %q, recorded as the sink's requester, may no longer get Secret %q in namespace %q (the verb %q on secrets): the Secret is not read and the sink is not used",
		requester.Username, name, namespace, "get")
	return &Denial{Reason: kollect.ReasonSecretForbidden, Message: msg + why}, nil
}

// MayListItems re-asks whether the requester of an Inventory (namespace
// set) or ClusterInventory (namespace empty) may still list the items it
// exports: inventoryitems in its namespace, or clusterinventoryitems.
func MayListItems(ctx context.Context, authz authorizer.Authorizer, requester *v1alpha1.RequesterInfo, namespace string) (*Denial, error) {
	if requester == nil {
		return &Denial{Reason: kollect.ReasonItemsForbidden, Message: noRequester}, nil
	}
	gvr := ItemsOf(namespace)
	why, allowed, err := ask(ctx, authz, requester, ListAttributes(gvr, namespace))
	if allowed || err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("user %q, recorded as the requester, may no longer list %s %s: nothing is exported",
		requester.Username, ResourceString(gvr), Where(namespace))
	return &Denial{Reason: kollect.ReasonItemsForbidden, Message: msg + why}, nil
}

// RequesterExpired denies an object whose requester was recorded more than
// maxAge before now (--requester-max-age; 0 turns the check off), or
// records no time at all: the groups recorded then are no longer trusted
// to be current. An update that re-affirms the requester ends it.
func RequesterExpired(requester *v1alpha1.RequesterInfo, maxAge time.Duration, now time.Time) *Denial {
	if maxAge <= 0 {
		return nil
	}
	if requester == nil || requester.RecordedAt == nil {
		return &Denial{Reason: kollect.ReasonRequesterExpired,
			Message: fmt.Sprintf("the server runs with --requester-max-age=%s and the object records no requester time: nothing is done on its authority until someone re-affirms it (changes its references, or annotates it with %s=<timestamp>)", maxAge, AnnotationReaffirm)}
	}
	at := requester.RecordedAt.Time
	if now.Sub(at) <= maxAge {
		return nil
	}
	return &Denial{Reason: kollect.ReasonRequesterExpired,
		Message: fmt.Sprintf("user %q was recorded as the requester at %s, more than --requester-max-age=%s ago: nothing is done on their authority until someone re-affirms it (changes its references, or annotates it with %s=<timestamp>)",
			requester.Username, at.UTC().Format(time.RFC3339), maxAge, AnnotationReaffirm)}
}

// ask runs one authorization check for the requester. Only an answer
// counts as a denial: an authorizer that fails (kube-apiserver unreachable)
// is an error to retry.
func ask(ctx context.Context, authz authorizer.Authorizer, requester *v1alpha1.RequesterInfo, attrs authorizer.AttributesRecord) (why string, allowed bool, err error) {
	attrs.User = RequesterUser(requester)
	decision, reason, err := authz.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return "", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("asking the authorizer whether %q may %s %s: %w", attrs.User.GetName(), attrs.Verb, attrs.Resource, err)
	}
	if reason != "" {
		why = " (" + reason + ")"
	}
	return why, false, nil
}

func referencedByResource(resource string) (Referenced, bool) {
	for _, r := range []Referenced{Profiles, SnapshotSinks, DatabaseSinks, EventSinks, MemberClusters} {
		if r.Resource == resource {
			return r, true
		}
	}
	return Referenced{}, false
}

// ResourceOf is the resource a sink family's objects are served as.
func ResourceOf(family kollect.SinkFamily) string {
	for _, f := range families {
		if f.family == family {
			return f.sink.Resource
		}
	}
	return ""
}
