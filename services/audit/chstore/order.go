package chstore

import (
	"context"

	"github.com/lockplane/lockplane/services/audit"
)

// History order, the order of every lookup (ByKey, ByIdentity,
// ByNamespaceClass, ExpiriesList):
//
//   - within a cluster (a cluster ID), by revision, then key: etcd's own
//     order of what happened. Never by time: an event's time is not
//     monotonic in revisions. A grant's or handoff's time is its
//     arbiter's clock (arbiters' clocks differ), every other event's is
//     when the tailer read it (which trails by the tailer's lag), so a
//     release can carry an earlier time than the grant it ended.
//   - across clusters there is no common order (each has its own
//     revisions): their histories are merged by time, each taken in
//     revision order. At each step the next event is the earliest of
//     the clusters' next events (ties by cluster ID), so a key that moved
//     shards reads as its old cluster's history, then its new one's, as
//     far as the times tell.
//
// The export (Between, the archive) keeps its own order, by time then
// cluster ID and revision: it is paged by a cursor, which a merge is not.

// runs runs q, whose rows are ordered by cluster ID, then revision and
// key, and returns them one run per cluster, each in revision order, for
// merge.
func (s *Store) runs(ctx context.Context, q string) ([][]audit.Event, error) {
	rows, err := query[row](ctx, s, q)
	if err != nil {
		return nil, err
	}
	var runs [][]audit.Event // one per cluster, each in revision order
	for i, r := range rows {
		if i == 0 || r.ClusterID != rows[i-1].ClusterID {
			runs = append(runs, nil)
		}
		runs[len(runs)-1] = append(runs[len(runs)-1], r.event())
	}
	return runs, nil
}

// merge takes the first n events of runs in history order: each run's in
// its own order, the earliest next event first (ties by cluster ID).
func merge(runs [][]audit.Event, n int) []audit.Event {
	var out []audit.Event
	for len(out) < n {
		best := -1
		for i, r := range runs {
			if len(r) == 0 {
				continue
			}
			if best < 0 || r[0].At.Before(runs[best][0].At) ||
				(r[0].At.Equal(runs[best][0].At) && r[0].ClusterID < runs[best][0].ClusterID) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, runs[best][0])
		runs[best] = runs[best][1:]
	}
	return out
}
