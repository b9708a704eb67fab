package collect

import (
	"context"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"kollect.dev/kollect/pkg/controllers/metrics"
	"kollect.dev/kollect/pkg/tenancy"
)

// Admission checked a target against its requester's permissions and the
// Scopes when it was written. Both can change afterwards, so every sync of
// a target (on its own changes, its Profile's, a Scope's, and each full
// walk) asks again; a target that lost a grant or that a later Scope
// forbids stops collecting and keeps its items, like a suspended one.

// namespaceLimits are the Scopes of a Target's namespace.
func (c *Collector) namespaceLimits(namespace string) tenancy.Limits {
	list, _ := c.scopeLister.Scopes(namespace).List(labels.Everything())
	return tenancy.ScopeLimits(list)
}

// clusterLimits are the ClusterScopes, and a fingerprint of them that
// changes whenever one does: the namespaces a ClusterTarget collects from
// depend on them, so a new fingerprint means a new walk.
func (c *Collector) clusterLimits() (tenancy.Limits, string) {
	list, _ := c.clusterScopeLister.List(labels.Everything())
	fp := make([]string, len(list))
	for i, s := range list {
		fp[i] = s.Name + "@" + s.ResourceVersion
	}
	sort.Strings(fp)
	return tenancy.ClusterScopeLimits(list), strings.Join(fp, ",")
}

// admit re-checks a target that can collect. denied stops its collection;
// partial (a ClusterTarget including namespaces it may not collect from)
// is reported while it collects from the rest. An error means the
// authorizer could not answer: the sync is retried, nothing changes.
func (c *Collector) admit(ctx context.Context, v *targetObject, spec *targetSpec) (denied, partial *tenancy.Denial, err error) {
	kind := v.key.Kind()
	if c.cfg.TenantMode && v.key.Cluster {
		return tenancy.TenantModeDenial(kind), nil, nil
	}
	defer func() {
		switch {
		case err != nil:
		case denied != nil:
			metrics.Resolved(kind, "Profile", metrics.ResolutionForbidden)
		default:
			metrics.Resolved(kind, "Profile", metrics.ResolutionOK)
		}
	}()
	if denied = tenancy.RequesterExpired(v.requester, c.cfg.RequesterMaxAge, time.Now()); denied != nil {
		return denied, nil, nil
	}
	var limits tenancy.Limits
	if v.key.Cluster {
		// compile read the ClusterScopes into the selection; a change of
		// them makes a new configuration.
		limits = *spec.sel.limits
		if denied = limits.ProfileNamespace(v.profile.Namespace); denied != nil {
			return denied, nil, nil
		}
	} else {
		limits = c.namespaceLimits(v.key.Namespace)
	}
	if denied = limits.Kind(spec.gvk.Group, spec.gvk.Kind); denied != nil {
		return denied, nil, nil
	}
	if c.cfg.Authorizer != nil {
		if denied, err = tenancy.MayUse(ctx, c.cfg.Authorizer, v.requester, "profiles", v.profile.Namespace, v.profile.Name); denied != nil || err != nil {
			return denied, nil, err
		}
		if c.cfg.Member != nil {
			// In a member, the member's own RBAC (its kubeconfig's user)
			// bounds what is listed; the requester needs `use` on it.
			if denied, err = tenancy.MayUse(ctx, c.cfg.Authorizer, v.requester, tenancy.MemberClusters.Resource, "", c.cfg.Cluster); denied != nil || err != nil {
				return denied, nil, err
			}
		} else {
			namespace := v.key.Namespace // a Target lists in its namespace, a ClusterTarget everywhere
			if denied, err = tenancy.MayList(ctx, c.cfg.Authorizer, v.requester, spec.gvr, namespace); denied != nil || err != nil {
				return denied, nil, err
			}
		}
	}
	if v.key.Cluster && spec.namespaced {
		partial = limits.IncludedNamespaces(v.include)
	}
	return nil, partial, nil
}
