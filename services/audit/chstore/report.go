package chstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/client/protocol"
)

// Contention reports, per namespace and class, how holds began (grants,
// handoffs to a waiter) and ended (releases, expiries), how many of them
// went to a request that had waited and how long it waited (the hold
// record's waited_ms), and how long they were held: each hold runs from
// its grant or handoff to the key's next event. Holds still running are
// not in the hold times.
func (s *Store) Contention(ctx context.Context, since time.Time) ([]audit.Contention, error) {
	return query[audit.Contention](ctx, s, fmt.Sprintf(`SELECT
			namespace, class,
			countIf(kind = 'grant') AS grants,
			countIf(kind = 'handoff') AS handoffs,
			countIf(waited_ms > 0) AS waits,
			toInt64(quantileExactIf(0.5)(waited_ms, waited_ms > 0)) AS wait_p50_ms,
			toInt64(quantileExactIf(0.99)(waited_ms, waited_ms > 0)) AS wait_p99_ms,
			countIf(kind = 'release') AS releases,
			countIf(kind = 'expiry') AS expiries,
			countIf(held_ms >= 0) AS holds,
			toInt64(quantileExactIf(0.5)(held_ms, held_ms >= 0)) AS hold_p50_ms,
			toInt64(quantileExactIf(0.99)(held_ms, held_ms >= 0)) AS hold_p99_ms,
			maxIf(held_ms, held_ms >= 0) AS hold_max_ms
		FROM (
			SELECT
				evs.2 AS kind, evs.4 AS namespace, evs.5 AS class,
				if(evs.2 IN ('grant', 'handoff'), evs.6, 0) AS waited_ms,
				if(evs.2 IN ('grant', 'handoff') AND idx < length(sorted), sorted[idx + 1].3 - evs.3, -1) AS held_ms
			FROM (
				SELECT arraySort(e -> e.1, groupArray((revision, kind, at_ms, namespace, class, waited_ms))) AS sorted
				FROM events FINAL
				WHERE key != '' AND namespace != '' AND %s
				GROUP BY cluster_id, key
			)
			ARRAY JOIN sorted AS evs, arrayEnumerate(sorted) AS idx
		)
		GROUP BY namespace, class
		ORDER BY handoffs + grants DESC, namespace, class`, sinceCond(since)))
}

// Cost reports, per identity, what it asked of the lock log: sessions
// opened, holds granted (and handed to it), the writes its locks made
// (every event is one revision), and its keepalives, estimated
// (keepalives below): they write no revision. An identity whose only cost
// in the window is keepalives (a session opened before it) has a row too.
func (s *Store) Cost(ctx context.Context, since time.Time) ([]audit.Cost, error) {
	rows, err := query[audit.Cost](ctx, s, fmt.Sprintf(`SELECT identity,
			countIf(kind = 'session_open') AS sessions,
			countIf(kind IN ('grant', 'handoff')) AS holds,
			count() AS writes
		FROM events FINAL
		WHERE identity != '' AND %s
		GROUP BY identity
		ORDER BY writes DESC, identity`, sinceCond(since)))
	if err != nil {
		return nil, err
	}
	kas, err := s.keepalives(ctx, since, protocol.RenewalsPerTTL)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].KeepalivesEstimated = kas[rows[i].Identity]
		delete(kas, rows[i].Identity)
	}
	// Rows with writes come first (most first); these have none.
	for _, id := range slices.Sorted(maps.Keys(kas)) {
		if kas[id] > 0 {
			rows = append(rows, audit.Cost{Identity: id, KeepalivesEstimated: kas[id]})
		}
	}
	return rows, nil
}

// keepalives estimates, per identity, the renewals in [since, now] of its
// sessions' leases. A client renews a lease as it opens and then every
// TTL/perTTL (protocol.RenewalsPerTTL), so a lease opened at o was
// renewed at o + k·TTL/perTTL, k >= 0, and the estimate counts those in
// [greatest(o, since), least(end, now)]. The end is its close; a TTL
// before its expiry, when the holder had stopped; or now while it is open,
// which is also where a session whose close the log lost (in a gap) is
// capped. Every session whose end is at or after since counts, opened in
// the window or before it, so the sessions' opens are read whenever they
// were. A session is one lease per cluster (a Router's shard leases are
// renewed with it), each counted: they are etcd's renewals. Sessions whose
// TTL the log does not give (stored before it was) are not estimated.
// Times are the tailer's readings, so this is an estimate.
func (s *Store) keepalives(ctx context.Context, since time.Time, perTTL int) (map[string]int64, error) {
	nowMs, sinceMs := s.now().UnixMilli(), max(since.UnixMilli(), 0)
	// [lo, hi] is the part of the lease's life in the window, whose
	// renewals are floor(perTTL·(hi-o)/ttl) - ceil(perTTL·(lo-o)/ttl) + 1.
	// hi is at least the open: its renewal counts whatever the tailer's
	// reading of the end says.
	rows, err := query[struct {
		Identity   string `json:"identity"`
		Keepalives int64  `json:"keepalives"`
	}](ctx, s, fmt.Sprintf(`SELECT identity,
			toInt64(sum(intDiv(%[1]d * (hi - opened), ttl_ms) - intDiv(%[1]d * (lo - opened) + ttl_ms - 1, ttl_ms) + 1)) AS keepalives
		FROM (
			SELECT identity, opened, ttl_ms,
				greatest(opened, toInt64(%[2]d)) AS lo,
				greatest(least(ended, toInt64(%[3]d)), opened) AS hi
			FROM (
				SELECT
					anyIf(identity, kind = 'session_open') AS identity,
					anyIf(at_ms, kind = 'session_open') AS opened,
					maxIf(ttl_seconds, kind = 'session_open') * 1000 AS ttl_ms,
					multiIf(countIf(kind = 'session_close') > 0, anyIf(at_ms, kind = 'session_close'),
						countIf(kind = 'expiry') > 0, anyIf(at_ms, kind = 'expiry') - ttl_ms,
						toInt64(%[3]d)) AS ended
				FROM events FINAL
				WHERE key = '' AND session != 0 AND kind IN ('session_open', 'session_close', 'expiry')
				GROUP BY cluster_id, session
				HAVING countIf(kind = 'session_open') > 0 AND ttl_ms > 0
			)
			WHERE hi >= lo
		)
		GROUP BY identity`, perTTL, sinceMs, nowMs))
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Identity] = r.Keepalives
	}
	return out, nil
}

// GrantsByClass counts the holds each class began (grants and handoffs).
func (s *Store) GrantsByClass(ctx context.Context, since time.Time) (map[string]int64, error) {
	rows, err := query[struct {
		Class  string `json:"class"`
		Grants int64  `json:"grants"`
	}](ctx, s, fmt.Sprintf(`SELECT class, count() AS grants FROM events FINAL
		WHERE kind IN ('grant', 'handoff') AND %s GROUP BY class`, sinceCond(since)))
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Class] = r.Grants
	}
	return out, nil
}
