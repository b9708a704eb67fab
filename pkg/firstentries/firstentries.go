// Package firstentries is where the running export controller and the
// registry meet so that a new inventory is created with the status entries
// its exporters would write the moment they start (a sink that does not
// exist): the controller offers itself as the Source while its caches are
// synced, and the registry's create asks whatever Source is offered
// (pkg/registry/kollect/common.FirstEntries). Neither imports the other.
package firstentries

import (
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
)

// Source is the export controller's side of first entries.
type Source interface {
	// FirstEntries returns the entries of a new inventory, a v1alpha1
	// Inventory or ClusterInventory as the create will store it
	// (generation 1, no status yet).
	FirstEntries(obj metav1.Object) []v1alpha1.SinkExportStatus
	// Created is given the stored inventory, whose entries are those
	// FirstEntries gave: it emits the Warning Events the exporters would
	// have emitted on writing them.
	Created(obj metav1.Object)
}

// Slot holds the Source offered, if any. The zero value holds none.
type Slot struct {
	source atomic.Pointer[offered]
}

// offered boxes a source so that only the offer that set it withdraws it:
// a late withdraw of an earlier offer leaves a later one in place.
type offered struct{ Source }

// Offer makes s the source of first entries until the returned withdraw
// is called.
func (sl *Slot) Offer(s Source) (withdraw func()) {
	box := &offered{s}
	sl.source.Store(box)
	return func() { sl.source.CompareAndSwap(box, nil) }
}

// Source returns the source offered, nil when none is.
func (sl *Slot) Source() Source {
	if box := sl.source.Load(); box != nil {
		return box.Source
	}
	return nil
}
