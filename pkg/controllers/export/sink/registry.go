package sink

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/netguard"
)

// Params is what every sink type is built from, besides its spec.
type Params struct {
	// Namespace and UID of the sink object.
	Namespace, UID string
	// Secret is the data of spec.secretRef's Secret (nil without one).
	Secret Secret
	// Dialer makes every network connection (nil refuses them all).
	Dialer *netguard.Dialer
	// StateDir is the sink's own working directory (git clones).
	StateDir string
	// FileSinkRoot (--file-sink-root): file sinks write under
	// FileSinkRoot/<Namespace>; empty refuses them.
	FileSinkRoot string
	// AllowLocal (--allow-local-git-sinks) admits repositories on the
	// server's file system.
	AllowLocal bool
}

// Factory builds a sink of one type from its spec (*v1alpha1.SnapshotSinkSpec,
// *v1alpha1.DatabaseSinkSpec or *v1alpha1.EventSinkSpec for the type's family).
type Factory[Spec, S any] func(ctx context.Context, spec *Spec, p Params) (S, error)

// Registry maps a family's sink types to their factories. The sink
// packages register themselves from init; the exporter imports them.
type Registry[Spec, S any] struct {
	family    v1alpha1.SinkFamily
	mu        sync.RWMutex
	factories map[string]Factory[Spec, S]
}

// Register adds a type; registering one twice is a programming error.
func (r *Registry[Spec, S]) Register(typ string, f Factory[Spec, S]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.factories == nil {
		r.factories = map[string]Factory[Spec, S]{}
	}
	if _, ok := r.factories[typ]; ok {
		panic(fmt.Sprintf("%s sink type %q registered twice", r.family, typ))
	}
	r.factories[typ] = f
}

// Build constructs a sink of type typ. An unknown type is a permanent error.
func (r *Registry[Spec, S]) Build(ctx context.Context, typ string, spec *Spec, p Params) (S, error) {
	r.mu.RLock()
	f, ok := r.factories[typ]
	r.mu.RUnlock()
	if !ok {
		var zero S
		return zero, fmt.Errorf("unknown %sSink type %q: %w", r.family, typ, ErrPermanent)
	}
	return f(ctx, spec, p)
}

// Types lists the registered types, sorted.
func (r *Registry[Spec, S]) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.factories))
	for t := range r.factories {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// The registries of the three families.
var (
	Snapshots = &Registry[v1alpha1.SnapshotSinkSpec, SnapshotSink]{family: v1alpha1.SinkFamilySnapshot}
	Databases = &Registry[v1alpha1.DatabaseSinkSpec, DatabaseSink]{family: v1alpha1.SinkFamilyDatabase}
	Events    = &Registry[v1alpha1.EventSinkSpec, EventSink]{family: v1alpha1.SinkFamilyEvent}
)
