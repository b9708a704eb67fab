// Package tenancy holds the tenancy rules (DESIGN.md §3) as pure functions
// over Scopes, references, requesters and an authorizer. The registry
// applies them at admission, to the request's user and the object written
// (pkg/registry/kollect/tenancy); the controllers apply them again at
// reconcile, to the requester an object records (reconcile.go).
//
//   - RBAC-native references: creating an object that references a Profile
//     or a sink, or changing those references, requires the requesting user
//     to hold the verb `use` on each referenced object, asked of the server's
//     (delegated) authorizer the way Kubernetes checks `bind` and `escalate`
//     in pkg/registry/rbac; a Target also requires the user to be allowed to
//     `list` the kind its Profile collects in its namespace, a ClusterTarget
//     across the cluster; an Inventory requires `list` on the items it
//     exports (inventoryitems in its namespace, clusterinventoryitems for a
//     ClusterInventory), and a sink `get` on the Secret it uses; a Scope
//     setting a quota above the server's default requires `escalate` on
//     scopes (quota.go). authz.go builds these questions.
//   - The tenancy limits of Scopes (per namespace) and ClusterScopes (for the
//     cluster kinds): allowed kinds, sink allowlists, the export interval
//     floor, the namespaces cluster kinds may reference and collect from
//     (limits.go), and quotas (quota.go). At admission a violation is a
//     field.Forbidden per offending field, naming the limit and the Scope.
//   - --tenant-mode: the cluster-scoped kinds cannot be created or updated,
//     and nothing is collected or exported for those that exist
//     (TenantModeDenial).
//
// Several Scopes in one namespace (or several ClusterScopes) all apply, and
// the strictest wins: an object must pass every allowlist that is set (the
// allowlists intersect; an absent or empty list allows everything), the
// floor is the highest minExportInterval, and denied namespaces add up.
//
// Limits are ratcheted on update: a value that already broke a limit before
// the update (a Scope created after the object, a floor raised later) does
// not block unrelated changes; only new or changed offending values are
// rejected. The exporter clamps intervals to the floor in any case.
package tenancy
