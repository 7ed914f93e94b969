package lockclient

import "testing"

// An ended lease may live on at etcd for any time (each leader change
// restarts its expiry) and etcd never reuses a lease ID, so the client
// remembers ended leases by count: the most recent 1024.
func TestRetiredLeasesAreRememberedByCount(t *testing.T) {
	c := &Client{retired: map[int64]bool{}}
	c.retire(&lease{id: 1})
	c.retire(&lease{id: 1}) // ended twice (fenced, then closed): once
	if len(c.retiredIDs) != 1 || !c.retiredLease(1) {
		t.Fatalf("ended lease remembered %d times", len(c.retiredIDs))
	}
	const n = 2000
	for id := int64(2); id <= n; id++ {
		c.retire(&lease{id: id})
	}
	if len(c.retired) != maxRetired || len(c.retiredIDs) != maxRetired {
		t.Fatalf("%d ended leases remembered, want the most recent %d", len(c.retired), maxRetired)
	}
	if !c.retiredLease(n) || !c.retiredLease(n-maxRetired+1) || c.retiredLease(n-maxRetired) {
		t.Fatal("the newest ended leases are forgotten, or an older one remembered")
	}
}
