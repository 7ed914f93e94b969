package audit

// Cursor is a position in the export order (at_ms, cluster_id, revision,
// key): the last event of a page, after which the next page starts. The
// zero Cursor is before every event (etcd has no revision 0).
type Cursor struct {
	AtMs      int64
	ClusterID string
	Revision  int64
	Key       string
}

// CursorOf is the position of e, to read the events after it.
func CursorOf(e Event) Cursor {
	return Cursor{AtMs: e.At.UnixMilli(), ClusterID: e.ClusterID, Revision: e.Revision, Key: e.Key}
}
