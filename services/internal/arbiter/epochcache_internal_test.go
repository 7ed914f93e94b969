package arbiter

import (
	"testing"

	"github.com/lockplane/lockplane/services/epoch"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
)

func record(e uint32, id uint64, modRev int64) epoch.State {
	return epoch.State{Record: epoch.Record{Epoch: e, ClusterID: epoch.FormatID(id)}, ModRevision: modRev}
}

// The cache orders observations by where they were made, so one that
// arrives late never undoes a newer one, in either direction.
func TestTheEpochCacheKeepsTheNewestObservation(t *testing.T) {
	const id = 7
	var c epochCache
	c.observe(&etcdserverpb.ResponseHeader{ClusterId: id})

	c.set(record(2, id, 90), obs{id, 95})
	c.setMissing(obs{id, 105}) // the watch: deleted at 105
	c.set(record(2, id, 90), obs{id, 100})
	if !c.sealed() || c.cause() != "no_epoch_record" {
		t.Fatalf("a read from before the delete unsealed the cluster (sealed %v, cause %s)", c.sealed(), c.cause())
	}

	c.set(record(3, id, 110), obs{id, 110}) // the advance
	c.setMissing(obs{id, 104})              // a read made before the delete, answered late
	if c.sealed() {
		t.Fatal("a read from before the advance sealed the cluster again")
	}
	if st, _ := c.get(); st.Epoch != 3 {
		t.Fatalf("cached epoch %d, want 3", st.Epoch)
	}
}

// Revisions that go backwards on one cluster ID (restored or rebuilt
// keeping its ID) seal it until a record written after the regression.
func TestRevisionsGoingBackwardsSealUntilANewerRecord(t *testing.T) {
	const id = 7
	var c epochCache
	c.observe(&etcdserverpb.ResponseHeader{ClusterId: id})
	c.set(record(2, id, 90), obs{id, 120})
	c.linearizable(obs{id, 130}, c.observed())
	if c.sealed() {
		t.Fatal("a read ahead of the cache sealed the cluster")
	}
	c.linearizable(obs{id, 40}, c.observed())
	if !c.sealed() || c.cause() != "revision_regressed" {
		t.Fatalf("revisions went from 120 to 40: sealed %v, cause %s", c.sealed(), c.cause())
	}
	c.set(record(2, id, 30), obs{id, 41}) // the restored record, read again
	if !c.sealed() {
		t.Fatal("the restored record unsealed the cluster")
	}
	c.set(record(9, id, 45), obs{id, 45}) // the operator's advance
	if c.sealed() {
		t.Fatal("the advance after the regression left the cluster sealed")
	}
}

// A linearizable read answers at or above what was observed before it
// started, not what other calls observed while it was in flight: a grant
// committed during the read is newer than the read, with no regression.
func TestAnObservationDuringAReadIsNotARegression(t *testing.T) {
	const id = 7
	var c epochCache
	c.observe(&etcdserverpb.ResponseHeader{ClusterId: id})
	c.set(record(2, id, 90), obs{id, 120})

	before := c.observed()                 // the read starts
	c.set(record(2, id, 90), obs{id, 135}) // a grant's Txn answers first
	c.linearizable(obs{id, 125}, before)   // the read answers at 125
	c.set(record(2, id, 90), obs{id, 125})
	if c.sealed() {
		t.Fatalf("a read overtaken by a concurrent grant sealed the cluster (cause %s)", c.cause())
	}
	if c.observed().rev != 135 {
		t.Fatalf("the cache fell back to %d, want the newest observation 135", c.observed().rev)
	}
}
