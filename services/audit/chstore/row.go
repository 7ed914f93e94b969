package chstore

import (
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// row is an event as the events table holds it (JSONEachRow, both ways):
// the event's own fields under their JSON names, but the time as Unix
// milliseconds, since 18.16 has no DateTime64.
type row struct {
	audit.Event
	AtMs int64 `json:"at_ms"`
	// NoAt hides Event.At: the table derives its `at` from at_ms.
	NoAt     *struct{} `json:"at,omitempty"`
	Ingested uint64    `json:"ingested,omitempty"` // written, never read back
}

// columns selects a row's fields, in the table's order.
const columns = `cluster_id, cluster, revision, key, kind, at_ms, namespace, class,
	identity, instance, session, prev_identity, prev_session, waited_ms, ttl_seconds, epoch, detail`

func toRow(e audit.Event, ingested uint64) row {
	return row{Event: e, AtMs: e.At.UnixMilli(), Ingested: ingested}
}

// event is the row as an audit.Event; At is in UTC, to the millisecond.
func (r row) event() audit.Event {
	e := r.Event
	e.At = time.UnixMilli(r.AtMs).UTC()
	return e
}
