package chstore

import (
	"context"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/audit"
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
// (keepalives below): they write no revision.
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
	kas, err := s.keepalives(ctx, since)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].KeepalivesEstimated = kas[rows[i].Identity]
	}
	return rows, nil
}

// keepalives estimates, per identity, the renewals of the sessions it
// opened at or after since: lockclient renews a lease at once and then
// every TTL/3 (services/client/lockclient/session.go), so a lease renewed
// from its open to t was renewed floor(3(t - open)/TTL) + 1 times. t is
// its close; a TTL before its expiry, when the holder had stopped; or now
// while it is open. A session is one lease per cluster (a Router's shard
// leases are renewed with it), each counted: they are etcd's renewals.
// Sessions whose TTL the log does not give (stored before it was) are not
// estimated. Times are the tailer's readings, so this is an estimate.
func (s *Store) keepalives(ctx context.Context, since time.Time) (map[string]int64, error) {
	nowMs := s.now().UnixMilli()
	rows, err := query[struct {
		Identity   string `json:"identity"`
		Keepalives int64  `json:"keepalives"`
	}](ctx, s, fmt.Sprintf(`SELECT identity, toInt64(sum(intDiv(3 * greatest(renewed_to - opened, 0), ttl * 1000) + 1)) AS keepalives
		FROM (
			SELECT
				anyIf(identity, kind = 'session_open') AS identity,
				anyIf(at_ms, kind = 'session_open') AS opened,
				maxIf(ttl_seconds, kind = 'session_open') AS ttl,
				multiIf(countIf(kind = 'session_close') > 0, anyIf(at_ms, kind = 'session_close'),
					countIf(kind = 'expiry') > 0, anyIf(at_ms, kind = 'expiry') - ttl * 1000,
					toInt64(%d)) AS renewed_to
			FROM events FINAL
			WHERE key = '' AND session != 0 AND kind IN ('session_open', 'session_close', 'expiry') AND %s
			GROUP BY cluster_id, session
			HAVING countIf(kind = 'session_open') > 0 AND ttl > 0
		)
		GROUP BY identity`, nowMs, sinceCond(since)))
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
