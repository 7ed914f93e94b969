package arbiter

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Two Acquire calls of one session on one key can be live at the arbiter
// at once: the first's caller gave up at its deadline (a leader election
// held its grant Txn up), cleaned up, and asked again, while the first
// call still runs (its Txns run to the arbiter's own deadlines). The
// first call, finding its caller gone, ends whatever it takes for its
// grant (releaseUnheard). So neither call may take the other's hold for
// its own: the hold of the live call would be ended under a holder whose
// CanStart is true, and another session granted the key (the gate's
// leader-kill history that failed CI).
func TestAnAcquireNeverTakesAnotherAcquiresHoldForItsOwn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	a := readyArbiter(t, ctx, cli)
	open := func(name string) (request, int64) { return openTestSession(t, ctx, cli, name, "team-a/named/"+name) }
	// again is the same session's next Acquire call on the key.
	again := func(r request) request { r.grant = newGrantName(); return r }
	leakedOwn := func(t *testing.T, err error, session int64) {
		t.Helper()
		why, meta := reason.Info(err)
		if status.Code(err) != codes.FailedPrecondition || why != lockv1.ErrorReason_LEAKED || meta["holder_session"] != fmtInt(session) {
			t.Fatalf("got %v; want LEAKED naming the session itself", err)
		}
	}
	held := func(t *testing.T, key string, session, rev int64) {
		t.Helper()
		get, err := cli.Get(ctx, lockkey.HoldKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if len(get.Kvs) == 0 || get.Kvs[0].Lease != session || get.Kvs[0].ModRevision != rev {
			t.Fatalf("the live call's hold (revision %d) was ended or replaced", rev)
		}
	}

	t.Run("the first call's grant committed late", func(t *testing.T) {
		first, session := open("late")
		other, otherSession := open("late-other")
		other.key = first.key
		late, err := a.attempt(ctx, first, session)
		if err != nil {
			t.Fatal(err)
		}
		// The caller's next call is not given the first call's hold...
		second := again(first)
		g, err := a.attempt(ctx, second, session)
		if err == nil {
			t.Fatalf("the second call was given the first call's hold (token %d)", g.token)
		}
		leakedOwn(t, err, session)
		if _, held, err := a.ownHold(ctx, second, session); held || err == nil {
			t.Fatalf("a waiter's lookup took the first call's hold: held %v, err %v", held, err)
		}
		// ... it ends it (the client library's Release with any_token),
		// and is granted afresh.
		if released, err := a.releaseAny(ctx, second, session); err != nil || !released {
			t.Fatalf("release any_token: released %v, err %v", released, err)
		}
		live, err := a.attempt(ctx, second, session)
		if err != nil {
			t.Fatal(err)
		}
		// The first call's handler ends the grant it made, too late.
		if _, err := a.releaseHold(ctx, first, session, late.token); err != nil {
			t.Fatal(err)
		}
		held(t, first.key, session, live.token.Revision())
		if _, err := a.attempt(ctx, other, otherSession); err == nil {
			t.Fatal("another session was granted the key the live call holds")
		}
	})

	t.Run("the first call looks its grant up after the second was granted", func(t *testing.T) {
		first, session := open("lookup")
		second := again(first)
		live, err := a.attempt(ctx, second, session)
		if err != nil {
			t.Fatal(err)
		}
		unknown := status.Error(codes.Unavailable, "test: the outcome is unknown")
		if g, err := a.lookUpUnknown(ctx, first, session, unknown); err == nil || reason.Of(err) != lockv1.ErrorReason_NO_QUORUM {
			t.Fatalf("the first call's lookup took the second call's hold: token %d, err %v; want its outcome still unknown (NO_QUORUM)", g.token, err)
		}
		if g, err := a.attempt(ctx, first, session); err == nil {
			t.Fatalf("the first call's attempt was given the second call's hold (token %d)", g.token)
		}
		held(t, first.key, session, live.token.Revision())
		// Its own grant, not yet heard of, each call still finds.
		if g, err := a.attempt(ctx, second, session); err != nil || g.token != live.token {
			t.Fatalf("the second call's own hold: token %d, err %v; want its grant, %d", g.token, err, live.token)
		}
	})
}

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }

// openTestSession writes a live session of identity spiffe://t/NAME
// (instance NAME, the default class) and returns an Acquire call of it on
// key, with a name of its own.
func openTestSession(t *testing.T, ctx context.Context, cli *clientv3.Client, name, key string) (request, int64) {
	t.Helper()
	id := spiffeid.RequireFromString("spiffe://t/" + name)
	cls := class.Default
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, lockkey.SessionKey(int64(lease.ID)), sessionFor(id, cls.TTL, name).Encode(), clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	return request{caller: id, instance: name, key: key, class: cls, grant: newGrantName(),
		labels: labels{namespace: "team-a", class: cls.Name, tier: string(cls.Tier), cluster: "default"}}, int64(lease.ID)
}
