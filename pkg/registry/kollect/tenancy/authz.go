package tenancy

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/tenancy"
)

// authorize asks whether the user of the request may do attrs. On a denial
// it returns what the authorizer said, if anything.
func (c *Checker) authorize(ctx context.Context, attrs authorizer.AttributesRecord) (bool, string) {
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok || u == nil {
		// With an authorizer there is always an authenticated user; a
		// request without one is refused rather than waved through.
		return false, "the request carries no authenticated user"
	}
	attrs.User = u
	decision, reason, err := c.cfg.Authorizer.Authorize(ctx, attrs)
	if decision == authorizer.DecisionAllow {
		return true, ""
	}
	var why []string
	if reason != "" {
		why = append(why, reason)
	}
	if err != nil {
		why = append(why, "authorization error: "+err.Error())
	}
	return false, strings.Join(why, "; ")
}

// userName names the requesting user in messages.
func userName(ctx context.Context) string {
	if u, ok := genericapirequest.UserFrom(ctx); ok && u != nil {
		return u.GetName()
	}
	return "<none>"
}

// require asks whether the user of the request may do attrs and, when not,
// denies the request with denial (who may not do what, and why it is
// needed) and what the authorizer said.
func (c *Checker) require(ctx context.Context, v *verdict, attrs authorizer.AttributesRecord, denial string) {
	ok, why := c.authorize(ctx, attrs)
	if ok {
		return
	}
	if why != "" {
		denial += " (" + why + ")"
	}
	v.denied = append(v.denied, denial)
}

// checkUse requires `use` on the referenced object namespace/name.
func (c *Checker) checkUse(ctx context.Context, v *verdict, r tenancy.Referenced, namespace, name string, path *field.Path) {
	if c.cfg.Authorizer == nil {
		return
	}
	c.require(ctx, v, tenancy.UseAttributes(r, namespace, name), fmt.Sprintf(
		"%s: user %q may not use %s %q in namespace %q: referencing it needs the verb %q on %s.%s %q in namespace %q",
		path, userName(ctx), r.Kind, name, namespace, tenancy.VerbUse, r.Resource, kollect.GroupName, name, namespace))
}

// checkMemberUse requires `use` on a MemberCluster a ClusterTarget selects.
func (c *Checker) checkMemberUse(ctx context.Context, v *verdict, name string, path *field.Path) {
	if c.cfg.Authorizer == nil {
		return
	}
	r := tenancy.MemberClusters
	c.require(ctx, v, tenancy.UseAttributes(r, "", name), fmt.Sprintf(
		"%s: user %q cannot use membercluster %q: a ClusterTarget collects only from the members its user may use, which needs the verb %q on %s.%s %q",
		path, userName(ctx), name, tenancy.VerbUse, r.Resource, kollect.GroupName, name))
}

// MayGet reports whether the user of the request may get one of this
// server's objects (resource, namespace, name; an empty name asks for
// all of them). Without an authorizer, every user may.
func (c *Checker) MayGet(ctx context.Context, resource, namespace, name string) bool {
	if c == nil || c.cfg.Authorizer == nil {
		return true
	}
	ok, _ := c.authorize(ctx, authorizer.AttributesRecord{
		Verb:            "get",
		Namespace:       namespace,
		APIGroup:        kollect.GroupName,
		APIVersion:      v1alpha1.SchemeGroupVersion.Version,
		Resource:        resource,
		Name:            name,
		ResourceRequest: true,
	})
	return ok
}

// The reasons a Secret is read on the authority of whoever names it.
const (
	sinkSecretUse   = "the sink sends the Secret's values on the authority of the user who sets it"
	memberSecretUse = "the hub reads the member's kubeconfig on the authority of the user who sets it"
)

// checkSecret requires `get` on the Secret a sink or a MemberCluster uses,
// for the reason use.
func (c *Checker) checkSecret(ctx context.Context, v *verdict, namespace, name string, path *field.Path, use string) {
	if c.cfg.Authorizer == nil {
		return
	}
	c.require(ctx, v, tenancy.GetSecretAttributes(namespace, name), fmt.Sprintf(
		"%s: user %q may not get Secret %q in namespace %q: %s, which needs the verb %q on secrets %q in namespace %q",
		path, userName(ctx), name, namespace, use, "get", name, namespace))
}

// checkItems requires `list` on the items an inventory exports (namespace
// empty for a ClusterInventory): an export is a read of them.
func (c *Checker) checkItems(ctx context.Context, v *verdict, namespace string) {
	if c.cfg.Authorizer == nil {
		return
	}
	gvr := tenancy.ItemsOf(namespace)
	c.require(ctx, v, tenancy.ListAttributes(gvr, namespace), fmt.Sprintf(
		"%s: user %q may not list %s %s: an inventory exports only items its user may read, which needs the verb %q on %s %s",
		specPath, userName(ctx), tenancy.ResourceString(gvr), tenancy.Where(namespace), "list", tenancy.ResourceString(gvr), tenancy.Where(namespace)))
}

// listChecks tells whether the `list` check of targets runs.
func (c *Checker) listChecks() bool {
	return c.cfg.Authorizer != nil && c.cfg.RESTMapper != nil
}

// checkList requires the user to be allowed to list what profile collects,
// in namespace, or across the cluster when namespace is empty or the kind
// is cluster-scoped. A kind the cluster does not serve (yet: a CRD not
// installed) cannot be checked here; the request passes with a warning and
// the collector, which finds the kind later, is where it is checked then.
func (c *Checker) checkList(ctx context.Context, v *verdict, target string, p *kollect.Profile, namespace string, path *field.Path) error {
	gvk := p.Spec.TargetGVK
	mapping, err := c.cfg.RESTMapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
	if meta.IsNoMatchError(err) {
		v.warnings = append(v.warnings, fmt.Sprintf("Profile %s/%s collects %s, which the cluster does not serve: whether you may list it could not be checked", p.Namespace, p.Name, gvkString(gvk)))
		return nil
	}
	if err != nil {
		return fmt.Errorf("resolving %s through the host cluster's discovery to check the list permission: %w", gvkString(gvk), err)
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		namespace = ""
	}
	c.require(ctx, v, tenancy.ListAttributes(mapping.Resource, namespace), fmt.Sprintf(
		"%s: user %q may not list %s %s, which Profile %s/%s collects (%s): a %s collects only what the user creating it may list",
		path, userName(ctx), tenancy.ResourceString(mapping.Resource), tenancy.Where(namespace), p.Namespace, p.Name, gvkString(gvk), target))
	return nil
}

func gvkString(gvk kollect.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + " " + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + " " + gvk.Kind
}
