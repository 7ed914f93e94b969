package arbiter_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
)

// A grant to a request that waited records how long it waited in the hold
// record it writes, so in the grant's own Txn (no second write): a
// handoff, a waiter's own grant after the holder's session closed, and a
// durable waiter's grant. A grant that did not wait records nothing.
func TestAGrantRecordsHowLongItsRequestWaited(t *testing.T) {
	durable := class.Class{Name: "queued", TTL: 3 * time.Second, Tier: class.TierCoord, Fairness: class.FairnessDurable}
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, durable)})
	ctx := ctxT(t, time.Minute)
	queued := queuedOn(t, env)
	// holdOf reads the hold as the grant wrote it.
	holdOf := func(key string) (waited int64, lease int64) {
		t.Helper()
		resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("hold of %s: %v, %v", key, resp, err)
		}
		var rec struct {
			WaitedMs *int64 `json:"waited_ms"`
		}
		if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
			t.Fatal(err)
		}
		if rec.WaitedMs == nil {
			return 0, resp.Kvs[0].Lease
		}
		if *rec.WaitedMs == 0 {
			t.Fatalf("hold %s records a wait of 0: a grant that did not wait records none", resp.Kvs[0].Value)
		}
		return *rec.WaitedMs, resp.Kvs[0].Lease
	}
	release := func(ctx context.Context, h *lockclient.Hold, _ *lockclient.Session) error { return h.Release(ctx) }
	closeSession := func(ctx context.Context, _ *lockclient.Hold, s *lockclient.Session) error { return s.Close(ctx) }
	for _, tc := range []struct {
		name, class string
		end         func(context.Context, *lockclient.Hold, *lockclient.Session) error
	}{
		{"handoff", devenvtest.Fast.Name, release},
		{"after-close", devenvtest.Fast.Name, closeSession},
		{"durable", durable.Name, release},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "team-a/waited/" + tc.name
			a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), tc.class)
			h, err := a.Lock(ctx, key, noFence)
			if err != nil {
				t.Fatal(err)
			}
			if w, _ := holdOf(key); w != 0 {
				t.Fatalf("a grant of a free key records a wait of %d ms", w)
			}
			b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), tc.class)
			start := time.Now()
			got := make(chan error, 1)
			go func() {
				_, err := b.Lock(ctx, key, noFence)
				got <- err
			}()
			awaitQueued(t, ctx, queued, key)
			if err := tc.end(ctx, h, a); err != nil {
				t.Fatal(err)
			}
			if err := <-got; err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			w, lease := holdOf(key)
			if lease != b.ID() || w < 1 || w > took.Milliseconds()+1 {
				t.Fatalf("the waiter's hold (lease %d, want %d) records a wait of %d ms; it waited at most %s", lease, b.ID(), w, took)
			}
			t.Logf("%s: waited %d ms (the waiter's Lock took %s)", tc.name, w, took.Round(time.Millisecond))
		})
	}
}
