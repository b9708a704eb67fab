// Package common holds what every kollect.dev registry shares: the boring
// half of a strategy, generation bookkeeping, reset fields, the status
// subresource, store construction, table conversion and the read-only
// storage of inventory items.
package common

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/utils/clock"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/apis/kollect/validation"
	"kollect.dev/kollect/pkg/netguard"
	"kollect.dev/kollect/pkg/registry/kollect/tenancy"
)

// Base implements the parts of rest.RESTCreateUpdateStrategy that are the
// same for every kind. Kinds embed it and add preparation and validation.
type Base struct {
	runtime.ObjectTyper
	names.NameGenerator
	// Namespaced tells whether the kind is namespace-scoped.
	Namespaced bool
	// Clock is the reference time of status derived on write.
	Clock clock.PassiveClock
}

// NewBase returns the shared strategy half for a kind.
func NewBase(typer runtime.ObjectTyper, namespaced bool, clk clock.PassiveClock) Base {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return Base{ObjectTyper: typer, NameGenerator: names.SimpleNameGenerator, Namespaced: namespaced, Clock: clk}
}

// NamespaceScoped tells whether the kind is namespace-scoped.
func (b Base) NamespaceScoped() bool { return b.Namespaced }

// AllowCreateOnUpdate is false: objects are created with POST (or apply).
func (Base) AllowCreateOnUpdate() bool { return false }

// AllowUnconditionalUpdate is true so that kubectl replace and edits without
// a resourceVersion work, as for built-in kinds.
func (Base) AllowUnconditionalUpdate() bool { return true }

// Canonicalize does nothing: stored objects are already canonical.
func (Base) Canonicalize(runtime.Object) {}

// WarningsOnCreate returns no warnings.
func (Base) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }

// WarningsOnUpdate returns no warnings.
func (Base) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string { return nil }

// Now is the reference time for derived status, truncated to the second
// that metav1.Time serializes.
func (b Base) Now() metav1.Time {
	return metav1.NewTime(b.Clock.Now().Truncate(1e9))
}

// BumpGeneration advances metadata.generation when the spec changed, so
// controllers can tell spec changes from metadata and status changes.
func BumpGeneration(newMeta, oldMeta *metav1.ObjectMeta, newSpec, oldSpec any) {
	if !apiequality.Semantic.DeepEqual(newSpec, oldSpec) {
		newMeta.Generation = oldMeta.Generation + 1
	}
}

// KeepMetadataOnStatusUpdate restores the user-owned metadata a status write
// must not change.
func KeepMetadataOnStatusUpdate(newMeta, oldMeta *metav1.ObjectMeta) {
	newMeta.Labels = oldMeta.Labels
	newMeta.Annotations = oldMeta.Annotations
	newMeta.Finalizers = oldMeta.Finalizers
	newMeta.OwnerReferences = oldMeta.OwnerReferences
}

// ResetStatus are the fields the main resource resets: status belongs to
// the status subresource.
func ResetStatus() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(fieldpath.MakePathOrDie("status"))
}

// ResetSpecAndMetadata are the fields the status subresource resets.
func ResetSpecAndMetadata() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(fieldpath.MakePathOrDie("spec"), fieldpath.MakePathOrDie("metadata"))
}

func resetFields(paths ...fieldpath.Path) map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		fieldpath.APIVersion(v1alpha1.SchemeGroupVersion.String()): fieldpath.NewSet(paths...),
	}
}

// Options are what the registries need from the server configuration.
type Options struct {
	// Clock is the reference time of status derived on write; nil is the real clock.
	Clock clock.PassiveClock
	// AllowPrivateSinkEndpoints lets sinks point at private, loopback and
	// link-local addresses (--allow-private-sink-endpoints).
	AllowPrivateSinkEndpoints bool
	// SinkDialer is the exporters' guarded dialer. Admission resolves sink
	// host names with its resolver (--sink-dns-server) and honours its
	// allowed prefixes (--allowed-sink-cidrs); nil uses the system's
	// resolver and allows no prefix.
	SinkDialer *netguard.Dialer
	// FileSinks admits file sinks: the server runs with --file-sink-root.
	FileSinks bool
	// AllowLocalGitSinks admits git sinks with file:// endpoints
	// (--allow-local-git-sinks).
	AllowLocalGitSinks bool
	// Tenancy configures the admission checks that depend on who asks and
	// on the tenancy limits: the authorizer of the `use` and `list` checks,
	// the host cluster's RESTMapper, --tenant-mode.
	Tenancy tenancy.Config
	// Checker runs those checks. The server builds it from Tenancy and its
	// own Scope, ClusterScope and Profile storage before it builds the kinds
	// that need it; nil runs no checks.
	Checker *tenancy.Checker
	// FirstEntries, when set, gives new inventories the status entries
	// the export controller knows at once.
	FirstEntries *FirstEntries
}

// SinkValidation is the validation.Options of the three sink kinds.
func (o Options) SinkValidation() validation.Options {
	v := validation.Options{AllowPrivateSinkEndpoints: o.AllowPrivateSinkEndpoints, FileSinks: o.FileSinks, AllowLocalGitSinks: o.AllowLocalGitSinks}
	if o.SinkDialer != nil {
		v.LookupIP = o.SinkDialer.LookupIP
		v.AllowedSinkCIDRs = o.SinkDialer.Policy().AllowedCIDRs
	}
	return v
}
