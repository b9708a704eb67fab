package common

import (
	"context"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/warning"

	"kollect.dev/kollect/pkg/apis/kollect"
	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/firstentries"
)

// FirstEntries lets the running export controller give a new inventory the
// status entries its exporters would write the moment they start, when
// the controller's caches alone decide them (a sink that does not exist).
// The create stores them with the object and derives its conditions from
// them, so a new inventory whose sink is missing is one write, not two,
// and reads as Degraded from the create's own answer on. The exporters
// find their entries already there and write nothing.
//
// The controller's caches may lag: a sink created a moment before the
// inventory may not be there yet. So a sink they miss is read again
// through its storage, a consistent read, and only a sink that is really
// missing gets an entry.
//
// The entries tell whether a sink exists, so they are given only for a
// create that passes validation and the kind's tenancy admission (quotas
// aside), by a user who may read the inventory they create (who would see
// them there): that is decided before any sink is looked up, so that a
// create refused learns nothing of which sinks exist, not even from its
// latency. The create's answer also carries a warning per entry, which
// kubectl prints.
//
// Without a source (a replica that does not lead, a controller whose
// caches are not synced yet or that is stopping) a new inventory starts
// with no entries and its exporters write them, as they always could.
//
// The export controller offers itself in the embedded Slot
// (pkg/firstentries), which it shares with the registry without importing
// it.
type FirstEntries struct {
	firstentries.Slot
	// sinks reads the sinks through their storage, by family.
	sinks map[v1alpha1.SinkFamily]rest.Getter
}

// ReadSinksWith sets how sinks are read: the server calls it once its
// storage is built, before it serves.
func (f *FirstEntries) ReadSinksWith(sinks map[v1alpha1.SinkFamily]rest.Getter) { f.sinks = sinks }

// offeredSource returns the source offered, nil when none is or f is nil.
func (f *FirstEntries) offeredSource() firstentries.Source {
	if f == nil {
		return nil
	}
	return f.Source()
}

// Entries returns the first entries of obj, an inventory of the internal
// version being created, which the source reads as scheme converts it into
// versioned: the SinkNotFound entries of sinks that are missing, when
// allowed says the create is valid and admitted and the requesting user
// may read the inventory. Without a source it returns none.
func (f *FirstEntries) Entries(ctx context.Context, scheme *runtime.Scheme, obj, versioned runtime.Object, allowed func(context.Context) bool) []kollect.SinkExportStatus {
	src := f.offeredSource()
	if src == nil || !allowed(ctx) {
		return nil
	}
	if err := scheme.Convert(obj, versioned, nil); err != nil {
		return nil
	}
	first := src.FirstEntries(versioned.(metav1.Object))
	if len(first) == 0 {
		return nil
	}
	// The reads are the create's own latency: one round trip for all.
	missing := make([]bool, len(first))
	var wg sync.WaitGroup
	for i, e := range first {
		if e.Reason == v1alpha1.ReasonSinkNotFound {
			wg.Go(func() { missing[i] = f.missing(ctx, e.Family, e.Namespace, e.Name) })
		}
	}
	wg.Wait()
	var out []kollect.SinkExportStatus
	for i := range first {
		var in kollect.SinkExportStatus
		if missing[i] && v1alpha1.Convert_v1alpha1_SinkExportStatus_To_kollect_SinkExportStatus(&first[i], &in, nil) == nil {
			out = append(out, in)
			// kubectl prints these: whoever creates the inventory learns
			// at once what its status says.
			warning.AddWarning(ctx, "", in.Message)
		}
	}
	return out
}

// missing reports whether a sink is missing from storage; unsure (no way
// to read it, any other error) is not missing.
func (f *FirstEntries) missing(ctx context.Context, family v1alpha1.SinkFamily, namespace, name string) bool {
	g := f.sinks[family]
	if g == nil {
		return false
	}
	_, err := g.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{})
	return apierrors.IsNotFound(err)
}

// Created tells the source of a stored inventory that started with first
// entries, converted by scheme into versioned.
func (f *FirstEntries) Created(scheme *runtime.Scheme, obj, versioned runtime.Object) {
	src := f.offeredSource()
	if src == nil {
		return
	}
	if err := scheme.Convert(obj, versioned, nil); err == nil {
		src.Created(versioned.(metav1.Object))
	}
}
