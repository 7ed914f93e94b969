package arbiter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
)

// heldFor is how long the tests keep a key held after its waiter queued:
// the wait a grant records is at least this.
const heldFor = 300 * time.Millisecond

// hold is a hold key as the last grant wrote it.
type hold struct {
	waitedMs, lease, version int64
}

// holdOf reads key's hold record. A record that says it waited 0 ms is a
// failure: a grant that did not wait records none.
func holdOf(t *testing.T, ctx context.Context, env *devenv.Env, key string) hold {
	t.Helper()
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("hold of %s: %v, %v", key, resp, err)
	}
	kv := resp.Kvs[0]
	var rec struct {
		WaitedMs *int64 `json:"waited_ms"`
	}
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		t.Fatal(err)
	}
	h := hold{lease: kv.Lease, version: kv.Version}
	if rec.WaitedMs != nil {
		if *rec.WaitedMs == 0 {
			t.Fatalf("hold %s records a wait of 0: a grant that did not wait records none", kv.Value)
		}
		h.waitedMs = *rec.WaitedMs
	}
	return h
}

// A grant to a request that waited records how long it waited in the hold
// record it writes, so in the grant's own Txn (no second write: the key's
// version is 1 after a grant, 2 after a handoff, which overwrites the
// releasing hold in one Txn): a handoff, a waiter's own grant after the
// holder's session closed, and a durable waiter's grant. The key stays
// held heldFor after the waiter queued, so the wait is at least that. A
// grant that did not wait records nothing.
func TestAGrantRecordsHowLongItsRequestWaited(t *testing.T) {
	durable := class.Class{Name: "queued", TTL: 3 * time.Second, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, durable)})
	ctx := ctxT(t, time.Minute)
	queued := queuedOn(t, env)
	release := func(ctx context.Context, h *lockclient.Hold, _ *lockclient.Session) error { return h.Release(ctx) }
	closeSession := func(ctx context.Context, _ *lockclient.Hold, s *lockclient.Session) error { return s.Close(ctx) }
	for _, tc := range []struct {
		name, class string
		end         func(context.Context, *lockclient.Hold, *lockclient.Session) error
		version     int64 // of the hold key after the waiter's grant
	}{
		{"handoff", devenvtest.Fast.Name, release, 2},
		{"after-close", devenvtest.Fast.Name, closeSession, 1},
		{"durable", durable.Name, release, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "team-a/waited/" + tc.name
			a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), tc.class)
			h, err := a.Lock(ctx, key, noFence)
			if err != nil {
				t.Fatal(err)
			}
			if got := holdOf(t, ctx, env, key); got.waitedMs != 0 || got.version != 1 {
				t.Fatalf("a grant of a free key: %+v; want no wait, version 1", got)
			}
			b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), tc.class)
			start := time.Now()
			got := make(chan error, 1)
			go func() {
				_, err := b.Lock(ctx, key, noFence)
				got <- err
			}()
			awaitQueued(t, ctx, queued, key)
			time.Sleep(heldFor) // the holder holds on: a timer by nature
			if err := tc.end(ctx, h, a); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			w := holdOf(t, ctx, env, key)
			if w.lease != b.ID() || w.version != tc.version {
				t.Fatalf("the waiter's hold: lease %d version %d; want lease %d, version %d (one write)", w.lease, w.version, b.ID(), tc.version)
			}
			if w.waitedMs < heldFor.Milliseconds() || w.waitedMs > took.Milliseconds()+1 {
				t.Fatalf("the waiter's hold records a wait of %d ms; the key was held %s after it queued, and its Lock took %s", w.waitedMs, heldFor, took)
			}
			t.Logf("%s: waited %d ms (the waiter's Lock took %s)", tc.name, w.waitedMs, took.Round(time.Millisecond))
		})
	}
}

// A durable waiter's Acquire that is retried (here: its arbiter drained
// and restarted, as a client retries on DRAINING) keeps its place in the
// queue, and its wait: the grant records the wait from when the session
// first queued, not from the retry.
func TestADurableWaitCountsFromItsFirstQueueing(t *testing.T) {
	// A long TTL: the raw sessions are not renewed.
	cls := class.Class{Name: "queued", TTL: time.Minute, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(cls), PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/waited/retried"
	holder, waiter := raw(devenvtest.Client(t, env, "demo")), raw(devenvtest.Client(t, env, "other"))
	open := func(c lockv1.LockServiceClient) int64 {
		s, err := c.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: cls.Name})
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionId
	}
	hs, ws := open(holder), open(waiter)
	held, err := holder.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: hs, Class: cls.Name})
	if err != nil {
		t.Fatal(err)
	}
	acquire := func() chan error {
		queued := queuedOn(t, env) // the arbiter running now
		got := make(chan error, 1)
		go func() {
			_, err := waiter.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: ws, Class: cls.Name, Wait: true})
			got <- err
		}()
		awaitQueued(t, ctx, queued, key)
		return got
	}
	first := acquire()
	queuedAt := time.Now()
	time.Sleep(heldFor) // the holder holds on: a timer by nature
	env.StopArbiter()
	if err := <-first; err == nil {
		t.Fatal("the waiter was granted while the holder held the key")
	}
	if err := env.StartArbiter(); err != nil {
		t.Fatal(err)
	}
	again := acquire()
	atLeast := time.Since(queuedAt)
	if _, err := holder.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: hs, Token: held.Token.Value}); err != nil {
		t.Fatal(err)
	}
	if err := <-again; err != nil {
		t.Fatal(err)
	}
	w := holdOf(t, ctx, env, key)
	if w.lease != ws || w.version != 1 {
		t.Fatalf("the waiter's hold: lease %d version %d; want lease %d, version 1", w.lease, w.version, ws)
	}
	if w.waitedMs < atLeast.Milliseconds() {
		t.Fatalf("the retried waiter's hold records a wait of %d ms; it had queued %s before the release", w.waitedMs, atLeast.Round(time.Millisecond))
	}
	t.Logf("waited %d ms, queued %s before the release", w.waitedMs, atLeast.Round(time.Millisecond))
}
