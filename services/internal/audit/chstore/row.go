package chstore

import (
	"time"

	"github.com/lockplane/lockplane/services/internal/audit"
)

// row is an event as the events table holds it (JSONEachRow, both ways).
type row struct {
	ClusterID    string     `json:"cluster_id"`
	Cluster      string     `json:"cluster"`
	Revision     int64      `json:"revision"`
	Key          string     `json:"key"`
	Kind         audit.Kind `json:"kind"`
	AtMs         int64      `json:"at_ms"`
	Namespace    string     `json:"namespace"`
	Class        string     `json:"class"`
	Identity     string     `json:"identity"`
	Instance     string     `json:"instance"`
	Session      int64      `json:"session"`
	PrevIdentity string     `json:"prev_identity"`
	PrevSession  int64      `json:"prev_session"`
	Epoch        uint32     `json:"epoch"`
	Detail       string     `json:"detail"`
	Ingested     uint64     `json:"ingested,omitempty"` // written, never read back
}

// columns selects a row's fields, in the table's order.
const columns = `cluster_id, cluster, revision, key, kind, at_ms, namespace, class,
	identity, instance, session, prev_identity, prev_session, epoch, detail`

func toRow(e audit.Event, ingested uint64) row {
	return row{
		ClusterID: e.ClusterID, Cluster: e.Cluster, Revision: e.Revision, Key: e.Key, Kind: e.Kind,
		AtMs: e.At.UnixMilli(), Namespace: e.Namespace, Class: e.Class,
		Identity: e.Identity, Instance: e.Instance, Session: e.Session,
		PrevIdentity: e.PrevIdentity, PrevSession: e.PrevSession, Epoch: e.Epoch, Detail: e.Detail,
		Ingested: ingested,
	}
}

// event is the row as an audit.Event; At is in UTC, to the millisecond.
func (r row) event() audit.Event {
	return audit.Event{
		ClusterID: r.ClusterID, Cluster: r.Cluster, Revision: r.Revision, Key: r.Key, Kind: r.Kind,
		At: time.UnixMilli(r.AtMs).UTC(), Namespace: r.Namespace, Class: r.Class,
		Identity: r.Identity, Instance: r.Instance, Session: r.Session,
		PrevIdentity: r.PrevIdentity, PrevSession: r.PrevSession, Epoch: r.Epoch, Detail: r.Detail,
	}
}
