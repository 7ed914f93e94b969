package arbiter

import (
	"encoding/json"
	"testing"
	"time"
)

// A wait counts from the earlier of the call's own start and its session's
// first queueing; a queue record from a clock ahead of this one's counts
// no wait rather than a negative one, and a record from before queue times
// were written still decodes, with none.
func TestWaitedCountsFromTheFirstQueueing(t *testing.T) {
	now := time.Now()
	call := now.Add(-100 * time.Millisecond)
	for _, tc := range []struct {
		name   string
		queued time.Time
		want   time.Duration
	}{
		{"no record", time.Time{}, 100 * time.Millisecond},
		{"queued before this call", now.Add(-5 * time.Second).UTC(), 5 * time.Second},
		{"a clock ahead", now.Add(time.Hour).UTC(), 100 * time.Millisecond},
	} {
		if got := waited(request{waitingSince: call, queuedAt: tc.queued}, now); got != tc.want {
			t.Errorf("%s: waited %s, want %s", tc.name, got, tc.want)
		}
	}
	var old waitRecord
	if err := json.Unmarshal([]byte(`{"identity":"spiffe://td/x","until":"2026-01-02T03:04:05Z"}`), &old); err != nil || !old.Queued.IsZero() {
		t.Errorf("a record without queued: %+v, %v", old, err)
	}
}
