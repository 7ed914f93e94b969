package lockclient

import (
	"testing"
	"time"
)

// An ended lease may live on at etcd for more than a TTL (a leader change
// restarts its expiry; the lessor revokes only every 500 ms), so the
// client remembers it for 2×TTL + 5 s; but only the most recent 1024.
func TestRetiredLeasesAreRememberedLongEnoughAndBounded(t *testing.T) {
	c := &Client{retired: map[int64]time.Time{}}
	const ttl = 3 * time.Second
	start := time.Now()
	c.retire(&lease{id: 1, ttl: ttl})
	if until, want := c.retired[1], start.Add(2*ttl+5*time.Second); until.Before(want) {
		t.Fatalf("an ended lease of TTL %s is remembered for %s, want at least %s", ttl, until.Sub(start), want.Sub(start))
	}
	const n = 2000
	for id := int64(2); id <= n; id++ {
		c.retire(&lease{id: id, ttl: ttl})
	}
	if len(c.retired) != 1024 {
		t.Fatalf("%d ended leases remembered, want the most recent 1024", len(c.retired))
	}
	if !c.retiredLease(n) || c.retiredLease(1) {
		t.Fatal("the newest ended lease is forgotten, or the oldest remembered")
	}
}
