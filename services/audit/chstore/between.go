package chstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// Between returns one page of the events with from <= At < to (no upper
// bound when to is zero) that come after the cursor in the order (time,
// cluster ID, revision, key), at most limit (lowered to MaxLimit), of the
// given kinds (every kind when none). Reading page after page, each from
// the cursor of the last event of the one before, until a page is short,
// reads the whole range once, however large.
func (s *Store) Between(ctx context.Context, from, to time.Time, after audit.Cursor, limit int, kinds ...audit.Kind) ([]audit.Event, error) {
	conds := []string{sinceCond(from), afterCond(after)}
	if !to.IsZero() {
		conds = append(conds, beforeCond(to))
	}
	if len(kinds) > 0 {
		quoted := make([]string, len(kinds))
		for i, k := range kinds {
			quoted[i] = quote(string(k))
		}
		conds = append(conds, "kind IN ("+strings.Join(quoted, ", ")+")")
	}
	return s.events(ctx, strings.Join(conds, " AND "), "at_ms, cluster_id, revision, key", limit)
}

// beforeCond selects events before t (none when t is before 1970); the
// condition on at, implied by the one on at_ms, lets ClickHouse skip the
// months after t.
func beforeCond(t time.Time) string {
	ms := max(t.UnixMilli(), 0)
	return fmt.Sprintf("at < toDateTime(%d) AND at_ms < %d", (ms+999)/1000, ms)
}

// afterCond selects the events after c in the order (at_ms, cluster_id,
// revision, key), spelled out: 18.16 compares no tuples.
func afterCond(c audit.Cursor) string {
	return fmt.Sprintf(`(at_ms > %d OR (at_ms = %d AND (cluster_id > %s OR (cluster_id = %s AND
		(revision > %d OR (revision = %d AND key > %s))))))`,
		c.AtMs, c.AtMs, quote(c.ClusterID), quote(c.ClusterID), c.Revision, c.Revision, quote(c.Key))
}
