package arbiter

import (
	"testing"
	"time"
)

// Cached shard leases of sessions that stopped being used are forgotten;
// those in use stay.
func TestUnusedShardLeasesAreForgotten(t *testing.T) {
	ro := &Router{}
	ro.remembered(1, "a", 101, "spiffe://t/a")
	ro.remembered(2, "a", 201, "spiffe://t/a")
	old, _ := ro.leases.Load(shardLease{1, "a"})
	old.(*cachedLease).used.Store(time.Now().Add(-time.Hour).UnixNano())
	ro.forgetUnusedSince(time.Now().Add(-2 * time.Minute))
	if _, ok := ro.leases.Load(shardLease{1, "a"}); ok {
		t.Fatal("a lease unused for an hour is still cached")
	}
	if _, ok := ro.leases.Load(shardLease{2, "a"}); !ok {
		t.Fatal("a lease just used was forgotten")
	}
}
