package chstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// ByKey returns the events of one lock key at or after since, with its
// clusters' own events (withClusterEvents), oldest first (in history
// order, see order.go), at most limit of the key's.
func (s *Store) ByKey(ctx context.Context, key string, since time.Time, limit int) ([]audit.Event, error) {
	return s.withClusterEvents(ctx, "key = "+quote(key), since, limit)
}

// ByIdentity returns the events whose holder is identity (the new holder
// of a grant or handoff, the ending hold's otherwise) at or after since,
// oldest first, at most limit.
func (s *Store) ByIdentity(ctx context.Context, identity string, since time.Time, limit int) ([]audit.Event, error) {
	return s.since(ctx, "identity = "+quote(identity), since, limit)
}

// ByNamespaceClass returns the events of namespace ns and class (every
// class when class is empty) at or after since, with their clusters' own
// events (withClusterEvents), oldest first, at most limit of the
// namespace's.
func (s *Store) ByNamespaceClass(ctx context.Context, ns, class string, since time.Time, limit int) ([]audit.Event, error) {
	where := "namespace = " + quote(ns)
	if class != "" {
		where += " AND class = " + quote(class)
	}
	return s.withClusterEvents(ctx, where, since, limit)
}

// clusterEvents are a whole cluster's events, stored with an empty key: a
// compaction gap, an epoch advance, a shard move (audit.Event.ClusterWide).
const clusterEvents = "key = '' AND kind IN ('gap', 'epoch_advance', 'shard_move')"

// withClusterEvents returns the first limit events of subject at or after
// since in history order, and the cluster events among and after them of
// the clusters they are on: a gap in a key's history is then in its
// answer, and so is an advance or a move that ended none of its holds.
// With no event of subject in the window, every cluster's gaps in it are
// answered: its history there may be in one. Cluster events do not count
// against limit. Two queries, each bounded by the window (the partitions
// by month): the subject's, whose rows name the clusters; then those
// clusters' events, read by cluster ID (the sorting key's first column).
func (s *Store) withClusterEvents(ctx context.Context, subject string, since time.Time, limit int) ([]audit.Event, error) {
	if limit <= 0 {
		return nil, errors.New("chstore: limit must be positive")
	}
	n := min(limit, MaxLimit)
	// Never a cluster event here: it would be answered twice.
	runs, err := s.runs(ctx, fmt.Sprintf(`SELECT %s FROM events FINAL WHERE (%s) AND NOT (%s) AND %s
		ORDER BY cluster_id, revision, key LIMIT %d BY cluster_id`, columns, subject, clusterEvents, sinceCond(since), n))
	if err != nil {
		return nil, err
	}
	clusters := "kind = 'gap'"
	if len(runs) > 0 {
		var on []string
		for _, r := range runs {
			c := "cluster_id = " + quote(r[0].ClusterID)
			if len(r) == n {
				// The subject's events here may go on past the n read: the
				// answer ends before any cluster event after them.
				c += fmt.Sprintf(" AND revision <= %d", r[n-1].Revision)
			}
			on = append(on, "("+c+")")
		}
		clusters = strings.Join(on, " OR ")
	}
	// Cluster events are few (a gap, an advance or a move each); MaxLimit
	// per cluster bounds a pathological window.
	others, err := s.runs(ctx, fmt.Sprintf(`SELECT %s FROM events FINAL WHERE %s AND (%s) AND %s
		ORDER BY cluster_id, revision, key LIMIT %d BY cluster_id`, columns, clusterEvents, clusters, sinceCond(since), MaxLimit))
	if err != nil {
		return nil, err
	}
	byCluster := map[string][]audit.Event{}
	for _, r := range others {
		byCluster[r[0].ClusterID] = r
	}
	for i, r := range runs {
		runs[i] = interleave(r, byCluster[r[0].ClusterID])
		delete(byCluster, r[0].ClusterID)
	}
	for _, r := range byCluster { // gaps of clusters the subject is not on
		runs = append(runs, r)
	}
	// The clusters' order decides merge's ties: keep it by cluster ID.
	slices.SortFunc(runs, func(a, b []audit.Event) int { return strings.Compare(a[0].ClusterID, b[0].ClusterID) })
	evs := merge(runs, math.MaxInt)
	// Cut after the subject's n-th event if it has more: what follows may
	// miss its events, which the first query did not read.
	seen, total := 0, 0
	for _, e := range evs {
		if !e.ClusterWide() {
			total++
		}
	}
	for i, e := range evs {
		if e.ClusterWide() {
			continue
		}
		if seen++; seen == n && total > n {
			return evs[:i+1], nil
		}
	}
	return evs, nil
}

// interleave merges a cluster's subject events and its cluster events,
// each in revision order, into revision order (then key: a cluster event,
// with no key, before the subject's events at its revision).
func interleave(a, b []audit.Event) []audit.Event {
	out := make([]audit.Event, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if b[0].Revision < a[0].Revision || (b[0].Revision == a[0].Revision && b[0].Key < a[0].Key) {
			out, b = append(out, b[0]), b[1:]
		} else {
			out, a = append(out, a[0]), a[1:]
		}
	}
	return append(append(out, a...), b...)
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
	runs, err := s.runs(ctx, fmt.Sprintf(`SELECT %s FROM events FINAL WHERE %s AND %s
		ORDER BY cluster_id, revision, key LIMIT %d BY cluster_id`, columns, where, sinceCond(since), n))
	if err != nil {
		return nil, err
	}
	return merge(runs, n), nil
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
