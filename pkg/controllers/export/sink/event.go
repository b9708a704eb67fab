package sink

import (
	"strconv"
	"time"
)

// CloudEvents types. docs/export.md ("Consuming events") is the contract
// a consumer folds them by.
const (
	EventTypeUpserted = "dev.kollect.item.upserted"
	EventTypeDeleted  = "dev.kollect.item.deleted"
	// EventTypeResynced opens a resync: the exporter does not know what
	// the consumer holds (it restarted, leads anew, or an anti-drift
	// re-export is due) and republishes the live set, data.resync.itemCount
	// upserts carrying the resync's token; once a consumer has seen them
	// all it drops the inventory's items it did not see.
	EventTypeResynced = "dev.kollect.inventory.resynced"
)

// Event is a CloudEvents 1.0 event in structured JSON mode: the body of a
// webhook delivery and of a NATS message alike.
type Event struct {
	SpecVersion string `json:"specversion"`
	// ID is the idempotency key (Nats-Msg-Id; what a webhook receiver
	// deduplicates on): it names the cluster, the inventory, the leader's
	// epoch and the item revision, so the same change published again by
	// the same leader has the same ID and no two meanings share one. See
	// NewEvent.
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject,omitempty"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	// Cluster (extension attribute) is the exporting server's --cluster-name.
	Cluster string `json:"kollectcluster"`
	// Epoch (extension attribute) is the publisher's leadership epoch: a
	// consumer ignores an inventory's events older than the newest epoch
	// it saw for that inventory, which makes a paused former leader that
	// resumes harmless.
	Epoch int64 `json:"kollectepoch"`
	// Resync (extension attribute) is the token of the resync an upsert
	// belongs to; empty outside resyncs.
	Resync string    `json:"kollectresync,omitempty"`
	Data   EventData `json:"data"`
}

// EventData is an event's payload.
type EventData struct {
	Inventory Inventory `json:"inventory"`
	// Op, ItemUID, ItemResourceVersion and Item describe an item event.
	Op Op `json:"op,omitempty"`
	// ItemUID and ItemResourceVersion identify the item revision.
	ItemUID             string `json:"itemUID,omitempty"`
	ItemResourceVersion string `json:"itemResourceVersion,omitempty"`
	Item                *Item  `json:"item,omitempty"`
	// Resync describes a resynced event.
	Resync *Resync `json:"resync,omitempty"`
}

// Resync is the payload of a resynced event.
type Resync struct {
	// Token tags the upserts of this resync (the kollectresync attribute).
	Token string `json:"token"`
	// ItemCount is how many upserts follow: the live set's size.
	ItemCount int `json:"itemCount"`
	// Checksum is the live set's checksum (see Checksum): what a consumer
	// that folded the stream holds once the resync is complete.
	Checksum string `json:"checksum"`
}

// InventoryPath names an inventory across clusters:
// "<cluster>/Inventory/<namespace>/<name>" or "<cluster>/ClusterInventory/<name>".
func InventoryPath(inv Inventory) string {
	if inv.Namespace == "" {
		return inv.Cluster + "/ClusterInventory/" + inv.Name
	}
	return inv.Cluster + "/Inventory/" + inv.Namespace + "/" + inv.Name
}

// NewEvent builds the event of a change, as part of the resync named by
// resync (or outside any resync when it is empty). Its ID is
// "<InventoryPath>/<epoch>/<item uid>/<item resourceVersion>", with
// "/delete" appended for a delete and "/resync/<token>" for a resync's
// upsert: a leader publishing the same change again yields the same ID,
// and two inventories or clusters never share one. The epoch is part of
// it because a receiver that drops repeated ids (JetStream) would
// otherwise drop a leader's event when a former leader, resumed after a
// pause, published the same change first: the consumer ignores that one
// as stale and would be left with neither.
func NewEvent(inv Inventory, c Change, epoch int64, resync string, now time.Time) Event {
	typ, id := EventTypeUpserted, InventoryPath(inv)+"/"+strconv.FormatInt(epoch, 10)+"/"+c.Item.UID+"/"+c.Item.ResourceVersion
	if c.Op == Delete {
		// A delete may carry the revision of the item's last upsert (an
		// inventory deleted with deletionPolicy Delete removes items that
		// still exist): the suffix keeps it from being dropped as a repeat.
		typ, id = EventTypeDeleted, id+"/delete"
	}
	if resync != "" {
		// A resync restates an item the consumer may hold already; a
		// receiver that drops repeated ids (JetStream) must not drop it.
		id += "/resync/" + resync
	}
	return Event{
		SpecVersion:     "1.0",
		ID:              id,
		Source:          EventSource(inv),
		Type:            typ,
		Subject:         c.Item.Key(),
		Time:            now.UTC(),
		DataContentType: "application/json",
		Cluster:         inv.Cluster,
		Epoch:           epoch,
		Resync:          resync,
		Data: EventData{
			Inventory:           inv,
			Op:                  c.Op,
			ItemUID:             c.Item.UID,
			ItemResourceVersion: c.Item.ResourceVersion,
			Item:                c.Item,
		},
	}
}

// NewResyncEvent builds the event that opens a resync of count items
// whose checksum is checksum. Its ID is "<InventoryPath>/resync/<token>".
func NewResyncEvent(inv Inventory, token string, count int, checksum string, epoch int64, now time.Time) Event {
	return Event{
		SpecVersion:     "1.0",
		ID:              InventoryPath(inv) + "/resync/" + token,
		Source:          EventSource(inv),
		Type:            EventTypeResynced,
		Time:            now.UTC(),
		DataContentType: "application/json",
		Cluster:         inv.Cluster,
		Epoch:           epoch,
		Data: EventData{
			Inventory: inv,
			Resync:    &Resync{Token: token, ItemCount: count, Checksum: checksum},
		},
	}
}

// EventSource is the CloudEvents source of an inventory's events: its API
// path under its cluster, "/clusters/<cluster>/apis/kollect.dev/v1alpha1/...".
func EventSource(inv Inventory) string {
	prefix := "/clusters/" + inv.Cluster + "/apis/kollect.dev/v1alpha1/"
	if inv.Namespace == "" {
		return prefix + "clusterinventories/" + inv.Name
	}
	return prefix + "namespaces/" + inv.Namespace + "/inventories/" + inv.Name
}

// Expand replaces the {cluster}, {namespace}, {inventory}, {kind}, {name},
// {itemCount}, {checksum} and {ext} placeholders of a template with the
// values given; unknown placeholders stay as they are.
func Expand(template string, values map[string]string) string {
	out := make([]byte, 0, len(template))
	for i := 0; i < len(template); i++ {
		if template[i] == '{' {
			if j := indexByte(template[i:], '}'); j > 0 {
				if v, ok := values[template[i+1:i+j]]; ok {
					out = append(out, v...)
					i += j
					continue
				}
			}
		}
		out = append(out, template[i])
	}
	return string(out)
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}
