package admin

import (
	"testing"

	"github.com/lockplane/lockplane/services/audit"
)

// A key's cluster events do not count against the answer's limit, as the
// store does not count them; the answer is truncated only when the key
// has more events than the limit.
func TestAuditEventsCountOnlyTheSubjects(t *testing.T) {
	ev := func(rev int64, key string, kind audit.Kind) audit.Event {
		return audit.Event{ClusterID: "c1", Revision: rev, Key: key, Kind: kind}
	}
	const key = "payments/ledger/1"
	evs := []audit.Event{
		ev(1, key, audit.Grant), ev(2, "", audit.Gap), ev(3, key, audit.Release),
		ev(4, "", audit.EpochAdvance), ev(5, "", audit.ShardMove), ev(6, key, audit.Grant),
	}
	for _, tc := range []struct {
		limit, n  int
		truncated bool
	}{
		{1, 2, true}, // the grant, and the gap before the next of the key's
		{2, 5, true},
		{3, 6, false},
	} {
		got, truncated := auditEvents(evs, tc.limit)
		if len(got) != tc.n || truncated != tc.truncated {
			t.Errorf("limit %d: %d events, truncated %v; want %d, %v", tc.limit, len(got), truncated, tc.n, tc.truncated)
		}
	}
}
