package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A shard map stamp rewrites the epoch record without changing the epoch.
// A hold granted before it must still be releasable by an arbiter whose
// cached record predates the stamp (its watch has not delivered it yet).
func TestAHoldGrantedBeforeAMapStampIsReleasedWithAStaleCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	// Not Run: no watch refreshes the cache, so it stays stale.
	a := readyArbiter(t, ctx, cli)
	id := spiffeid.RequireFromString("spiffe://t/holder")
	cls := class.Default
	lease, _ := cli.Grant(ctx, 60)
	cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), sessionFor(id, cls.TTL, "").Encode(), clientv3.WithLease(lease.ID))
	r := request{caller: id, key: "team-a/stamped/1", class: cls, labels: labels{namespace: "team-a", class: cls.Name, tier: string(cls.Tier), cluster: "default"}}
	g, err := a.attempt(ctx, r, int64(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	stale, _ := a.epochs.get()
	if _, err := epoch.Stamp(ctx, cli, 7); err != nil {
		t.Fatal(err)
	}

	// The broken path: one Txn against the stale record is refused.
	if released, err := a.release(ctx, r, int64(lease.ID), g.token, stale); err != nil || released {
		t.Fatalf("a release against the stale record: released %v, err %v; the check below would prove nothing", released, err)
	}
	released, err := a.releaseHold(ctx, r, int64(lease.ID), g.token)
	if err != nil || !released {
		t.Fatalf("release after a map stamp: released %v, err %v", released, err)
	}
	if get, _ := cli.Get(ctx, lockkey.HoldKey(r.key)); len(get.Kvs) != 0 {
		t.Fatal("the hold is still there")
	}
}
