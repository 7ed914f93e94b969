package arbiter_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Durable waiters keep their arrival order across an arbiter restart: they
// queue again in the reverse order and are still granted in the first
// order. The same scenario on a memory class is the control: its order is
// the order of re-arrival, as ADR-14 declares.
func TestDurableOrderSurvivesAnArbiterRestart(t *testing.T) {
	for _, tc := range []struct {
		fairness class.Fairness
		want     func(n int) []int
	}{
		{class.FairnessDurable, func(n int) []int { return seq(n, false) }},
		{class.FairnessMemory, func(n int) []int { return seq(n, true) }},
	} {
		t.Run(string(tc.fairness), func(t *testing.T) {
			got := grantOrderAcrossRestart(t, tc.fairness, 4)
			t.Logf("%s: waiters queued 0..3, re-queued 3..0 after the restart, granted %v", tc.fairness, got)
			if want := tc.want(4); !slices.Equal(got, want) {
				t.Fatalf("granted in order %v, want %v", got, want)
			}
		})
	}
}

func seq(n int, reverse bool) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
		if reverse {
			s[i] = n - 1 - i
		}
	}
	return s
}

// grantOrderAcrossRestart queues n waiters in order, restarts the arbiter,
// queues them again in reverse, releases the key and returns the order of
// the grants.
func grantOrderAcrossRestart(t *testing.T, fairness class.Fairness, n int) []int {
	cls := class.Class{Name: "ordered", TTL: time.Minute, Tier: class.TierCoord, Fairness: fairness}
	// Each waiter its own identity: one identity's second session on a key
	// it holds is a leak, not a waiter.
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(cls), PollInterval: time.Hour, Workers: n})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/durable/1"
	holder := raw(devenvtest.Client(t, env, "demo"))
	waiters := make([]lockv1.LockServiceClient, n)
	for i := range waiters {
		waiters[i] = raw(devenvtest.Client(t, env, fmt.Sprintf("worker-%d", i)))
	}
	open := func(c lockv1.LockServiceClient) int64 {
		s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionId
	}
	hs := open(holder)
	held, err := holder.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: hs, Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	sessions := make([]int64, n)
	for i := range sessions {
		sessions[i] = open(waiters[i])
	}
	type result struct {
		i    int
		resp *lockv1.AcquireResponse
		err  error
	}
	// queue starts the waiters in order, each once the one before it has
	// its queue key (or, for memory, its place in the arbiter's queue).
	queue := func(order []int) chan result {
		queued := queuedOn(t, env) // the arbiter running now
		out := make(chan result, n)
		for _, i := range order {
			go func() {
				resp, err := waiters[i].Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: sessions[i], Class: cls.Name, Wait: true})
				out <- result{i, resp, err}
			}()
			awaitQueued(t, ctx, queued, key)
		}
		return out
	}
	first := queue(seq(n, false))
	env.StopArbiter()
	for range n {
		if r := <-first; r.err == nil {
			t.Fatalf("waiter %d was granted while the holder held the key", r.i)
		}
	}
	if err := env.StartArbiter(); err != nil {
		t.Fatal(err)
	}
	again := queue(seq(n, true))
	if _, err := holder.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: hs, Token: held.Token.Value}); err != nil {
		t.Fatal(err)
	}
	var order []int
	for range n {
		r := <-again
		if r.err != nil {
			t.Fatalf("waiter %d: %v", r.i, r.err)
		}
		order = append(order, r.i)
		if _, err := waiters[r.i].Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: sessions[r.i], Token: r.resp.Token.Value}); err != nil {
			t.Fatal(err)
		}
	}
	if fairness == class.FairnessDurable {
		// Two consensus writes per waiter: its queue key, then its grant,
		// which removed the key.
		left, _ := env.Etcd.Get(ctx, lockkey.WaitersOf(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if left.Count != 0 {
			t.Fatalf("%d queue keys left after every waiter was granted", left.Count)
		}
	}
	return order
}

// A try-lock of a durable class does not barge past a queued waiter, even
// when the key is free for a moment.
func TestDurableTryLockDoesNotBargePastTheQueue(t *testing.T) {
	cls := class.Class{Name: "ordered", TTL: time.Minute, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(cls), PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/durable/barge"
	c := raw(devenvtest.Client(t, env, "other"))
	s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	// A waiter's key, as a waiter on another arbiter would have queued it.
	waitKey := lockkey.WaitKey(key, s.SessionId)
	queued, err := env.Etcd.Put(ctx, waitKey, fmt.Sprintf(`{"identity":"x","until":%q}`,
		time.Now().Add(time.Minute).UTC().Format(time.RFC3339Nano)), clientv3.WithLease(clientv3.LeaseID(s.SessionId)))
	if err != nil {
		t.Fatal(err)
	}
	barger := raw(devenvtest.Client(t, env, "alice"))
	bs, err := barger.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	_, err = barger.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: bs.SessionId, Class: cls.Name})
	wantReason(t, err, lockv1.ErrorReason_CONTENDED)
	// The queued waiter is granted, and its queue key goes with the grant:
	// one Txn writes the hold and deletes the key, and the token is that
	// Txn's revision in the current epoch.
	st, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn()).Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.SessionId, Class: cls.Name, Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	tok := token.Token(got.Token.Value)
	if tok.Epoch() != st.GetEpoch() {
		t.Fatalf("granted %v in epoch %d", tok, st.GetEpoch())
	}
	hold, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(hold.Kvs) != 1 || hold.Kvs[0].Lease != s.SessionId {
		t.Fatalf("the hold is not the waiter's: %v (err %v)", hold.Kvs, err)
	}
	grantRev := hold.Kvs[0].ModRevision
	if hold.Kvs[0].CreateRevision != grantRev || tok.Revision() != grantRev {
		t.Fatalf("token %v, hold created at %d and written at %d: the token is not the grant Txn's revision",
			tok, hold.Kvs[0].CreateRevision, grantRev)
	}
	// The queue key was there until the revision before the grant's, and
	// is gone at the grant's own revision.
	at := func(rev int64) int64 {
		t.Helper()
		r, err := env.Etcd.Get(ctx, waitKey, clientv3.WithRev(rev), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count
	}
	if grantRev <= queued.Header.Revision {
		t.Fatalf("granted at revision %d, before the queue key was put at %d", grantRev, queued.Header.Revision)
	}
	if before, after := at(grantRev-1), at(grantRev); before != 1 || after != 0 {
		t.Fatalf("queue key present %d time(s) at revision %d and %d at the grant's revision %d: want deleted by the grant Txn itself",
			before, grantRev-1, after, grantRev)
	}
}
