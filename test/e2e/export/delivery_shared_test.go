package export

import (
	"testing"
	"time"

	"kollect.dev/kollect/pkg/controllers/export/sink"
)

// TestDeliverySharedSinks is issue 11's acceptance point 2: two
// Inventories in one namespace, exporting the same items to one NATS
// stream, one webhook and one Postgres table, each receive every event:
// folded per inventory, each sink holds the live set for both, through
// changes of every kind. (Before, the message id had no inventory in it,
// and JetStream dropped the second inventory's events as duplicates.)
func TestDeliverySharedSinks(t *testing.T) {
	ctx := testContext(t, 3*time.Minute)
	r := newRig(ctx, t, "delivery-shared", rigOptions{inventories: []string{"alpha", "beta"}})
	base := r.stats()
	r.churn(ctx, t)
	r.churn(ctx, t)
	r.converge(ctx, t, "after changes")
	r.verify(ctx, t, base)

	perInventory := map[string]int{}
	ids := map[string]string{}
	for _, ev := range streamEvents(ctx, t, r.stream) {
		path := sink.InventoryPath(ev.Data.Inventory)
		perInventory[path]++
		if other, ok := ids[ev.ID]; ok && other != path {
			t.Errorf("id %s is an event of %s and of %s", ev.ID, other, path)
		}
		ids[ev.ID] = path
	}
	for _, inv := range r.invs {
		t.Logf("%s: %d messages in the shared stream", r.path(inv), perInventory[r.path(inv)])
	}
	if len(perInventory) != 2 {
		t.Errorf("the stream holds events of %d inventories: %v; want alpha and beta", len(perInventory), perInventory)
	}
}
