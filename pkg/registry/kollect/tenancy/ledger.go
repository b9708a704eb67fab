package tenancy

import (
	"context"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// A quota's count and the admission of the create it decides are one step
// under the ledger of what the quota counts (Counted.lockKey). The step
// does not span the write: a create admitted and not yet finished is held
// in the ledger, and counts add the held creates the listing does not
// show yet. So creates in one namespace reach etcd together, as a CRD's
// do, instead of one write at a time, and still never overshoot.

// ledger is one lock key's creates in flight.
type ledger struct {
	mu sync.Mutex
	// stored is, per kind, the newest resourceVersion of an object this
	// replica created under the key: a count reads the watch cache once it
	// holds that revision, so every finished create is in the listing.
	stored map[string]uint64
	// held are the admitted creates not yet finished, with how many
	// requests (two creates of one name) hold each.
	held map[heldCreate]int
}

// heldCreate names an admitted create: its kind ("EventSink"), namespace
// ("" for the cluster kinds) and name.
type heldCreate struct{ kind, namespace, name string }

// ledger is the ledger of key.
func (c *Checker) ledger(key string) *ledger {
	if l, ok := c.ledgers.Load(key); ok {
		return l.(*ledger)
	}
	l, _ := c.ledgers.LoadOrStore(key, &ledger{stored: map[string]uint64{}, held: map[heldCreate]int{}})
	return l.(*ledger)
}

// heldIn are the names ("namespace/name") of the creates of kind held in
// namespace, all namespaces when empty; the caller holds l.mu.
func (l *ledger) heldIn(kind, namespace string) map[string]bool {
	var out map[string]bool
	for h := range l.held {
		if h.kind == kind && (namespace == "" || h.namespace == namespace) {
			if out == nil {
				out = map[string]bool{}
			}
			out[h.namespace+"/"+h.name] = true
		}
	}
	return out
}

// createTicket is one create request's place in a ledger, from BeginCreate
// until its finish.
type createTicket struct {
	ledger *ledger
	// held is set while admission holds the create in the ledger.
	held *heldCreate
}

type ticketKey struct{}

// ticketFrom is the ticket BeginCreate put in ctx, if any.
func ticketFrom(ctx context.Context) *createTicket {
	t, _ := ctx.Value(ticketKey{}).(*createTicket)
	return t
}

// release takes the ticket's create out of its ledger; the caller holds
// the ledger's lock. An update that creates may run admission again after
// a conflict: its new count must not see its own earlier hold.
func (t *createTicket) release() {
	if t.held == nil {
		return
	}
	if t.ledger.held[*t.held]--; t.ledger.held[*t.held] <= 0 {
		delete(t.ledger.held, *t.held)
	}
	t.held = nil
}

// finish ends the create: created is the stored object, nil when nothing
// was stored. Its revision is recorded before the hold goes, in one step,
// so a count sees the create either held or listed.
func (t *createTicket) finish(created runtime.Object) {
	l := t.ledger
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.held != nil && created != nil {
		// A dry run's object has no resourceVersion.
		if m, err := meta.Accessor(created); err == nil {
			if rv, err := strconv.ParseUint(m.GetResourceVersion(), 10, 64); err == nil && rv > l.stored[t.held.kind] {
				l.stored[t.held.kind] = rv
			}
		}
	}
	t.release()
}
