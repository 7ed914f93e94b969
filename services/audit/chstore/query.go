package chstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// ByKey returns the events of one lock key at or after since, with its
// clusters' own events (withClusterEvents), oldest first (in history
// order, see order.go), at most limit.
func (s *Store) ByKey(ctx context.Context, key string, since time.Time, limit int) ([]audit.Event, error) {
	return s.since(ctx, withClusterEvents("key = "+quote(key)), since, limit)
}

// ByIdentity returns the events whose holder is identity (the new holder
// of a grant or handoff, the ending hold's otherwise) at or after since,
// oldest first, at most limit.
func (s *Store) ByIdentity(ctx context.Context, identity string, since time.Time, limit int) ([]audit.Event, error) {
	return s.since(ctx, "identity = "+quote(identity), since, limit)
}

// ByNamespaceClass returns the events of namespace ns and class (every
// class when class is empty) at or after since, with their clusters' own
// events (withClusterEvents), oldest first, at most limit.
func (s *Store) ByNamespaceClass(ctx context.Context, ns, class string, since time.Time, limit int) ([]audit.Event, error) {
	where := "namespace = " + quote(ns)
	if class != "" {
		where += " AND class = " + quote(class)
	}
	return s.since(ctx, withClusterEvents(where), since, limit)
}

// clusterEvents are a whole cluster's events, stored with an empty key: a
// compaction gap, an epoch advance, a shard move.
const clusterEvents = "key = '' AND kind IN ('gap', 'epoch_advance', 'shard_move')"

// withClusterEvents selects the rows subject selects and the cluster
// events of the clusters those rows are on (at any time: a gap can be all
// a window holds of a key): a gap in a key's history is then in its answer,
// and so is an advance or a move that ended none of its holds. With no row
// of subject at all, every cluster's gaps are in it: its whole history may
// be in one.
func withClusterEvents(subject string) string {
	return fmt.Sprintf(`((%[1]s) OR (%[2]s AND (cluster_id IN (SELECT cluster_id FROM events WHERE %[1]s)
		OR (kind = 'gap' AND (SELECT count() FROM events WHERE %[1]s) = 0))))`, subject, clusterEvents)
}

// ExpiriesList returns the holds that ended by lease expiry at or after
// since, oldest first, at most limit.
func (s *Store) ExpiriesList(ctx context.Context, since time.Time, limit int) ([]audit.Event, error) {
	// Holds only: a session's own expiry (key '') is its lease's end.
	return s.since(ctx, "kind = "+quote(string(audit.Expiry))+" AND key != ''", since, limit)
}

// Expiries counts the holds that ended by lease expiry at or after since,
// per namespace and class, most expiries first (then by namespace, class).
func (s *Store) Expiries(ctx context.Context, since time.Time) ([]audit.ExpiryCount, error) {
	return query[audit.ExpiryCount](ctx, s, fmt.Sprintf(`SELECT namespace, class, count() AS count
		FROM events FINAL WHERE kind = %s AND key != '' AND %s
		GROUP BY namespace, class ORDER BY count DESC, namespace, class`,
		quote(string(audit.Expiry)), sinceCond(since)))
}

// LastRevision is the highest revision stored for a cluster, 0 if none.
func (s *Store) LastRevision(ctx context.Context, clusterID string) (int64, error) {
	// max needs no FINAL: a replayed row has the same revision.
	rows, err := query[struct {
		Revision int64 `json:"revision"`
	}](ctx, s, "SELECT max(revision) AS revision FROM events WHERE cluster_id = "+quote(clusterID))
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	return rows[0].Revision, nil
}

// since runs the query every lookup by key, holder or namespace shares:
// the first limit events at or after since in history order (order.go):
// each cluster's in revision order, the clusters' merged by time.
func (s *Store) since(ctx context.Context, where string, since time.Time, limit int) ([]audit.Event, error) {
	if limit <= 0 {
		return nil, errors.New("chstore: limit must be positive")
	}
	n := min(limit, MaxLimit)
	// The first n of the merge are among the first n of each cluster.
	return s.history(ctx, fmt.Sprintf(`SELECT %s FROM events FINAL WHERE %s AND %s
		ORDER BY cluster_id, revision, key LIMIT %d BY cluster_id`, columns, where, sinceCond(since), n), n)
}

// events returns the events where holds, in the order orderBy, at most
// limit (lowered to MaxLimit), one row per event (FINAL). where and
// orderBy must be built from quote and numbers only.
func (s *Store) events(ctx context.Context, where, orderBy string, limit int) ([]audit.Event, error) {
	if limit <= 0 {
		return nil, errors.New("chstore: limit must be positive")
	}
	rows, err := query[row](ctx, s, fmt.Sprintf(`SELECT %s FROM events FINAL WHERE %s
		ORDER BY %s LIMIT %d`, columns, where, orderBy, min(limit, MaxLimit)))
	if err != nil {
		return nil, err
	}
	out := make([]audit.Event, len(rows))
	for i, r := range rows {
		out[i] = r.event()
	}
	return out, nil
}

// sinceCond selects events at or after t (times before 1970 select all):
// at_ms is exact, and the condition on at lets ClickHouse skip the months
// before t.
func sinceCond(t time.Time) string {
	ms := max(t.UnixMilli(), 0)
	return fmt.Sprintf("at >= toDateTime(%d) AND at_ms >= %d", ms/1000, ms)
}

var _ audit.Reader = (*Store)(nil)
