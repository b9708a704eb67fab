package sink

import (
	"time"
)

// CloudEvents types of item changes.
const (
	EventTypeUpserted = "dev.kollect.item.upserted"
	EventTypeDeleted  = "dev.kollect.item.deleted"
)

// Event is a CloudEvents 1.0 event in structured JSON mode: the body of a
// webhook delivery and of a NATS message alike.
type Event struct {
	SpecVersion     string    `json:"specversion"`
	ID              string    `json:"id"`
	Source          string    `json:"source"`
	Type            string    `json:"type"`
	Subject         string    `json:"subject"`
	Time            time.Time `json:"time"`
	DataContentType string    `json:"datacontenttype"`
	Data            EventData `json:"data"`
}

// EventData is an event's payload.
type EventData struct {
	Inventory Inventory `json:"inventory"`
	Op        Op        `json:"op"`
	// ItemUID and ItemResourceVersion identify the item revision.
	ItemUID             string `json:"itemUID"`
	ItemResourceVersion string `json:"itemResourceVersion"`
	Item                *Item  `json:"item"`
}

// NewEvent builds the event of a change. Its ID, "<item uid>/<item
// resourceVersion>" ("/delete" appended for deletes), is the idempotency
// key (Nats-Msg-Id, and what a webhook receiver deduplicates on):
// publishing the same change again yields the same ID.
func NewEvent(inv Inventory, c Change, now time.Time) Event {
	typ, id := EventTypeUpserted, c.Item.UID+"/"+c.Item.ResourceVersion
	if c.Op == Delete {
		// A delete may carry the revision of the item's last upsert (an
		// inventory deleted with deletionPolicy Delete removes items that
		// still exist): the suffix keeps it from being dropped as a repeat.
		typ, id = EventTypeDeleted, id+"/delete"
	}
	return Event{
		SpecVersion:     "1.0",
		ID:              id,
		Source:          EventSource(inv),
		Type:            typ,
		Subject:         c.Item.Key(),
		Time:            now.UTC(),
		DataContentType: "application/json",
		Data: EventData{
			Inventory:           inv,
			Op:                  c.Op,
			ItemUID:             c.Item.UID,
			ItemResourceVersion: c.Item.ResourceVersion,
			Item:                c.Item,
		},
	}
}

// EventSource is the CloudEvents source of an inventory's events: its API path.
func EventSource(inv Inventory) string {
	if inv.Namespace == "" {
		return "/apis/kollect.dev/v1alpha1/clusterinventories/" + inv.Name
	}
	return "/apis/kollect.dev/v1alpha1/namespaces/" + inv.Namespace + "/inventories/" + inv.Name
}

// Expand replaces the {namespace}, {inventory}, {kind}, {name},
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
