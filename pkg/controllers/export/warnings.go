package export

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"kollect.dev/kollect/pkg/apis/kollect/v1alpha1"
	"kollect.dev/kollect/pkg/controllers/plumbing"
)

// warn emits a Warning Event about an inventory, as the cache holds it,
// in the host cluster.
func (c *Controller) warn(k plumbing.InventoryKey, reason, note string) {
	obj, err := c.getInventory(k)
	if err != nil || obj == nil {
		return
	}
	c.warnAt(k, string(obj.GetUID()), obj.GetResourceVersion(), reason, note)
}

// warnAt emits a Warning Event about one version of an inventory in the
// host cluster. ClusterInventory events go to the default namespace, as
// Kubernetes does for cluster-scoped objects; their note names no sink,
// since more users read Events there (the built-in view role bound in
// default) than may read the ClusterInventory and its status.
func (c *Controller) warnAt(k plumbing.InventoryKey, uid, resourceVersion, reason, note string) {
	if k.Cluster {
		note = clusterEventNote
	}
	c.recorder.Warn(k.Reference(types.UID(uid), resourceVersion), reason, "Export", note)
}

// clusterEventNote is the note of every ClusterInventory Event.
const clusterEventNote = "see the ClusterInventory's status.sinkExports for the sinks and why; this Event is in namespace default, which more users may read than the ClusterInventory"

// warnings are the Warning Events of entries written together: one per
// write (resourceVersion) and reason, its note naming every sink.
type warnings struct {
	order []warning
	notes map[warning][]sinkNote
}

type warning struct{ rv, reason string }

func (w *warnings) add(rv, reason string, family v1alpha1.SinkFamily, namespace, name, text string) {
	ev := warning{rv: rv, reason: reason}
	if w.notes == nil {
		w.notes = map[warning][]sinkNote{}
	}
	if _, ok := w.notes[ev]; !ok {
		w.order = append(w.order, ev)
	}
	w.notes[ev] = append(w.notes[ev], sinkNote{sink: fmt.Sprintf("%s %s/%s", family, namespace, name), text: text})
}

func (w *warnings) emit(c *Controller, k plumbing.InventoryKey, uid string) {
	for _, ev := range w.order {
		c.warnAt(k, uid, ev.rv, ev.reason, joinNotes(w.notes[ev]))
	}
}

// sinkNote is what one Warning Event says about one sink: "Snapshot
// ns/audit: SnapshotSink ns/audit does not exist".
type sinkNote struct{ sink, text string }

// noteSep separates the sinks of one note.
const noteSep = "; "

// joinNotes makes one Event note of what it says about several sinks,
// within plumbing.MaxEventNote bytes (the recorder's cut would lose the
// last sinks' names): every sink is named, in order, and the texts share
// what the names leave, the shortest whole and the longest cut, on
// character boundaries. Sinks whose names do not fit are counted.
func joinNotes(notes []sinkNote) string {
	room := plumbing.MaxEventNote - len(noteSep)*(len(notes)-1)
	for _, n := range notes {
		room -= len(n.sink) + len(": ")
	}
	if room < 0 {
		// Names only, as many as fit with the count of the others.
		var b strings.Builder
		for i, n := range notes {
			sep := noteSep
			if i == 0 {
				sep = ""
			}
			tail := 0
			if rest := len(notes) - i - 1; rest > 0 {
				tail = len(fmt.Sprintf(" and %d more", rest))
			}
			if b.Len()+len(sep)+len(n.sink)+tail > plumbing.MaxEventNote {
				fmt.Fprintf(&b, " and %d more", len(notes)-i)
				break
			}
			b.WriteString(sep + n.sink)
		}
		return b.String()
	}
	// Water-filling: each text gets an equal share of what is left,
	// shorter ones leave theirs to the others.
	byLength := make([]int, len(notes))
	for i := range byLength {
		byLength[i] = i
	}
	slices.SortStableFunc(byLength, func(a, b int) int { return len(notes[a].text) - len(notes[b].text) })
	texts := make([]string, len(notes))
	for k, i := range byLength {
		share := room / (len(notes) - k)
		texts[i] = plumbing.Truncate(strings.ToValidUTF8(notes[i].text, ""), share)
		room -= len(texts[i])
	}
	parts := make([]string, len(notes))
	for i, n := range notes {
		parts[i] = n.sink + ": " + texts[i]
	}
	return strings.Join(parts, noteSep)
}
