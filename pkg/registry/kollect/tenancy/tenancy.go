// Package tenancy runs the tenancy rules (pkg/tenancy) at admission, in
// the registry: the checks that depend on more than the object being
// written (DESIGN.md §3). The Checker reads the Scopes, ClusterScopes and
// referenced Profiles through the server's own storage, asks the
// authorizer about the requesting user, counts what the quotas limit
// (quota.go, ledger.go) and answers as the API does:
//
//   - a reference the user may not use, list or get, and a quota raised
//     without `escalate`, is 403 Forbidden naming the namespace, kind, name
//     and verb; a quota that is full is 403 Forbidden as kube's
//     ResourceQuota answers;
//   - a broken Scope or ClusterScope limit is 422 Invalid with a
//     field.Forbidden per offending field, naming the limit and the Scope;
//   - --tenant-mode: creating or updating a cluster-scoped kind is 403
//     Forbidden (kinds.go).
//
// The checks run in the registry after the strategy has prepared and
// validated the object (common.Admission), so they see defaulted, valid
// objects and the object an update really replaces.
package tenancy

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/warning"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/tenancy"
)

// Config is how the server runs the checks.
type Config struct {
	// Authorizer answers the `use`, `get` (a sink's Secret) and `list`
	// checks for the requesting user. The server passes the delegated
	// authorizer (a SubjectAccessReview to kube-apiserver, with
	// system:masters allowed without asking) with answers cached under a
	// second, so grants and revocations apply at once. Nil skips the checks;
	// only the in-process test server, which runs without authentication
	// and authorization, has none.
	Authorizer authorizer.Authorizer
	// RESTMapper maps the kind a Profile collects to its resource in the
	// host cluster, for the `list` check: the server passes the
	// kindmapper.Mapper it shares with the collector, which refreshes
	// discovery on a miss. Nil (no host cluster) skips the `list` check.
	RESTMapper meta.RESTMapper
	// TenantMode rejects creating and updating ClusterTargets,
	// ClusterInventories and ClusterScopes (--tenant-mode).
	TenantMode bool
	// Quotas are the defaults of the Scopes' quotas (--default-max-*); the
	// zero value sets none.
	Quotas tenancy.Quotas
}

// Lookups read the server's own storage, in process.
type Lookups struct {
	// Scopes and ClusterScopes list the tenancy limits.
	Scopes, ClusterScopes rest.Lister
	// Profiles gets the Profile a Target references.
	Profiles rest.Getter
	// MemberClusters lists the members a ClusterTarget's clusterSelector
	// selects.
	MemberClusters rest.Lister
	// Quota lists what the quotas count.
	Quota QuotaLookups
}

// Checker runs the checks of every kind.
type Checker struct {
	cfg     Config
	lookups Lookups
	// ledgers are, per lock key (Counted.lockKey), the creates in flight
	// that quota counts must see (ledger.go).
	ledgers sync.Map
	// scopesStored and clusterScopesStored are the newest resourceVersions
	// of a Scope and of a ClusterScope this replica wrote: limits are read
	// from the watch cache once it holds that revision (scopeList).
	scopesStored, clusterScopesStored atomic.Uint64
}

// ScopeStored records a Scope or ClusterScope this replica stored.
func (c *Checker) ScopeStored(obj runtime.Object) {
	if c == nil {
		return
	}
	stored := &c.scopesStored
	if _, ok := obj.(*kollect.ClusterScope); ok {
		stored = &c.clusterScopesStored
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	// A dry run's object has no resourceVersion.
	rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	for {
		old := stored.Load()
		if rv <= old || stored.CompareAndSwap(old, rv) {
			return
		}
	}
}

// scopeList lists Scopes (ClusterScopes when cluster is set) from the watch
// cache once it holds every one this replica wrote, so that a Scope applies
// to the next request this replica serves. Neither a consistent list, which
// waits until the cache has caught up with etcd's newest revision (another
// resource's write moves it; a progress notification every 100 ms brings it
// along), nor a read of etcd, which waits for the writes ahead of it, sits
// in every create. Through another replica a Scope applies once that
// replica's cache has it, milliseconds later.
func (c *Checker) scopeList(ctx context.Context, l rest.Lister, namespace string, cluster bool) (runtime.Object, error) {
	rv := c.scopesStored.Load()
	if cluster {
		rv = c.clusterScopesStored.Load()
	}
	opts := &metainternalversion.ListOptions{ResourceVersion: "0"}
	if rv > 0 {
		opts.ResourceVersion, opts.ResourceVersionMatch = strconv.FormatUint(rv, 10), metav1.ResourceVersionMatchNotOlderThan
	}
	ctx = genericapirequest.WithNamespace(ctx, namespace)
	out, err := l.List(ctx, opts)
	if storage.IsTooLargeResourceVersion(err) {
		// The cache did not catch up in time: ask etcd.
		out, err = l.List(ctx, &metainternalversion.ListOptions{})
	}
	return out, err
}

// New returns a Checker. Call SetLookups once the storage it reads exists,
// before the server serves.
func New(cfg Config) *Checker {
	return &Checker{cfg: cfg}
}

// SetLookups gives the checker the storage it reads. The kinds it checks
// and the storage it reads are built together, hence the separate step.
func (c *Checker) SetLookups(l Lookups) { c.lookups = l }

// Admission is one kind's checks, in the shape of common.Admission.
type Admission struct {
	Create func(ctx context.Context, obj runtime.Object) error
	Update func(ctx context.Context, obj, old runtime.Object) error
	// Begin, when set, starts a create in the namespace of ctx, before
	// admission, and returns the context to create with and the finish,
	// given the stored object (nil when none): a quota holds an admitted
	// create in its ledger until then (ledger.go).
	Begin func(ctx context.Context) (context.Context, func(created runtime.Object))
}

// BeginCreate starts a create: see Admission.Begin.
func (a Admission) BeginCreate(ctx context.Context) (context.Context, func(created runtime.Object)) {
	if a.Begin == nil {
		return ctx, func(runtime.Object) {}
	}
	return a.Begin(ctx)
}

// AdmitCreate checks a new object.
func (a Admission) AdmitCreate(ctx context.Context, obj runtime.Object) error {
	if a.Create == nil {
		return nil
	}
	return a.Create(ctx, obj)
}

// AdmitUpdate checks an object replacing old.
func (a Admission) AdmitUpdate(ctx context.Context, obj, old runtime.Object) error {
	if a.Update == nil {
		return nil
	}
	return a.Update(ctx, obj, old)
}

// verdict collects what the checks of one request found.
type verdict struct {
	resource, kind, name string
	// denied are authorization failures: the request is 403 Forbidden.
	denied []string
	// invalid are limit violations: the request is 422 Invalid.
	invalid field.ErrorList
	// warnings are returned to the client on success.
	warnings []string
}

func newVerdict(resource, kind, name string) *verdict {
	return &verdict{resource: resource, kind: kind, name: name}
}

func (v *verdict) invalidate(errs ...*field.Error) {
	for _, err := range errs {
		if err != nil {
			v.invalid = append(v.invalid, err)
		}
	}
}

// result is the error of the request, if any; authorization comes first.
// Warnings are sent only with a request that succeeds.
func (v *verdict) result(ctx context.Context) error {
	if len(v.denied) > 0 {
		return apierrors.NewForbidden(kollect.Resource(v.resource), v.name, errors.New(strings.Join(v.denied, "; ")))
	}
	if len(v.invalid) > 0 {
		return apierrors.NewInvalid(kollect.Kind(v.kind), v.name, v.invalid)
	}
	for _, w := range v.warnings {
		warning.AddWarning(ctx, "", w)
	}
	return nil
}

// Paths of the fields the checks report on.
var (
	specPath       = field.NewPath("spec")
	profileRefPath = specPath.Child("profileRef")
)

// listScopes lists the Scopes of a namespace.
func (c *Checker) listScopes(ctx context.Context, namespace string) ([]kollect.Scope, error) {
	if c.lookups.Scopes == nil {
		return nil, nil
	}
	out, err := c.scopeList(ctx, c.lookups.Scopes, namespace, false)
	if err != nil {
		return nil, err
	}
	list, ok := out.(*kollect.ScopeList)
	if !ok {
		return nil, fmt.Errorf("listing scopes returned %T", out)
	}
	return list.Items, nil
}

// listClusterScopes lists the ClusterScopes.
func (c *Checker) listClusterScopes(ctx context.Context) ([]kollect.ClusterScope, error) {
	if c.lookups.ClusterScopes == nil {
		return nil, nil
	}
	out, err := c.scopeList(ctx, c.lookups.ClusterScopes, metav1.NamespaceNone, true)
	if err != nil {
		return nil, err
	}
	list, ok := out.(*kollect.ClusterScopeList)
	if !ok {
		return nil, fmt.Errorf("listing clusterscopes returned %T", out)
	}
	return list.Items, nil
}

// scopes are the limits of a namespace.
func (c *Checker) scopes(ctx context.Context, namespace string) (tenancy.Limits, error) {
	scopes, err := c.listScopes(ctx, namespace)
	return tenancy.NamespaceLimits(scopes), err
}

// clusterScopes are the limits of the cluster kinds.
func (c *Checker) clusterScopes(ctx context.Context) (tenancy.Limits, error) {
	scopes, err := c.listClusterScopes(ctx)
	return tenancy.ClusterLimits(scopes), err
}

// profile reads a referenced Profile.
func (c *Checker) profile(ctx context.Context, namespace, name string) (*kollect.Profile, error) {
	if c.lookups.Profiles == nil {
		return nil, apierrors.NewNotFound(kollect.Resource("profiles"), name)
	}
	out, err := c.lookups.Profiles.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	p, ok := out.(*kollect.Profile)
	if !ok {
		return nil, fmt.Errorf("getting a profile returned %T", out)
	}
	return p, nil
}

// resolveProfile reads the Profile a target references when a check needs
// the kind it collects. A missing Profile is an invalid reference then: the
// server cannot check what it would collect, so the target must wait for it.
func (c *Checker) resolveProfile(ctx context.Context, v *verdict, namespace, name string, namePath *field.Path) (*kollect.Profile, error) {
	p, err := c.profile(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		nf := field.NotFound(namePath, name)
		nf.Detail = fmt.Sprintf("Profile %s/%s must exist before it is referenced: the server checks the kind it collects against your permissions and the Scopes", namespace, name)
		v.invalidate(nf)
		return nil, nil
	}
	return p, err
}
