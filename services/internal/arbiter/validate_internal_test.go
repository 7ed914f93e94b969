package arbiter

import (
	"context"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ValidateToken answers from the epoch record and the hold read together:
// an arbiter whose cached epoch lags an advance must not call a token of
// the old epoch current because the hold's revision happens to match it.
func TestValidateTokenComparesTheEpochReadWithTheHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	// Not Run: no watch updates the cache, so it keeps epoch E.
	a := readyArbiter(t, ctx, cli)
	cached, _ := a.epochs.get()
	adv, err := epoch.Advance(ctx, cli, cli, epoch.Change{Cluster: "default", Expected: cached.Epoch, Reason: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// A hold granted in epoch E+1, at revision R.
	id := spiffeid.RequireFromString("spiffe://t/holder")
	lease, _ := cli.Grant(ctx, 60)
	cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), sessionFor(id, class.Default.TTL, "").Encode(), clientv3.WithLease(lease.ID))
	key := "team-a/validate/epoch"
	put, err := cli.Put(ctx, lockkey.HoldKey(key), holdRecord{Identity: id.String(), Session: int64(lease.ID), Class: class.Default.Name}.Encode(), clientv3.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := a.epochs.get(); st.Epoch != cached.Epoch {
		t.Fatalf("the cache moved to epoch %d; the test needs it stale at %d", st.Epoch, cached.Epoch)
	}
	for _, c := range []struct {
		epoch uint32
		want  lockv1.TokenState
	}{
		{cached.Epoch, lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH}, // (E, R) was never issued
		{adv.Epoch, lockv1.TokenState_TOKEN_STATE_CURRENT},          // (E+1, R) is the grant
	} {
		tk, _ := token.Mint(c.epoch, put.Header.Revision)
		got, err := a.validate(ctx, request{caller: id, key: key}, tk)
		if err != nil {
			t.Fatal(err)
		}
		if got.GetState() != c.want {
			t.Errorf("token of epoch %d at the hold's revision, epoch now %d, cache %d: %s, want %s",
				c.epoch, adv.Epoch, cached.Epoch, got.GetState(), c.want)
		}
	}
}
