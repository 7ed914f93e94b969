package arbiter_test

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
)

// A release hands the key to the head waiter in its own Txn. A waiter
// whose wait ends just as that happens must never be answered a refusal
// while the hold is its own, nor a grant its caller can no longer hear:
// it answers with the grant if its caller is still there, else releases
// the grant itself. The arbiter's hooks fix the interleaving, in both
// orders: the wait ends, then the whole release (claim, handoff Txn,
// answer) runs before the waiter withdraws; or the release claims the
// waiter, then the wait ends, then the handoff Txn commits. The waiter
// uses the raw API, so no client-side cleanup can hide what the arbiter
// did.
func TestAWaiterWhoseWaitEndsAsTheKeyIsHandedOverIsNeverLeftHolding(t *testing.T) {
	// A release blocked in the Claimed hook until the wait ends spends
	// ~1.8 s of its call's etcd budget there: give it room to finish.
	env := devenvtest.Start(t, devenv.Options{PollInterval: time.Hour, OpTimeout: 5 * time.Second})
	for _, tc := range []struct {
		name string
		// gone: the caller goes away once queued; otherwise its deadline
		// ends the wait (the arbiter's wait ends 200 ms before it, so the
		// caller is still there to be answered).
		gone bool
		// claimFirst: the release claims the waiter before its wait ends;
		// otherwise the wait ends before the release starts.
		claimFirst bool
	}{
		{"deadline", false, false},
		{"canceled", true, false},
		{"claimed-then-deadline", false, true},
		{"claimed-then-canceled", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			key := "team-a/handoff/ended-" + tc.name
			holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
			h, err := holder.TryLock(ctx, key, noFence)
			if err != nil {
				t.Fatal(err)
			}
			w := raw(devenvtest.Client(t, env, "other"))
			ws, err := w.OpenSession(ctx, &lockv1.OpenSessionRequest{})
			if err != nil {
				t.Fatal(err)
			}
			queued, claimed, ended := make(chan struct{}), make(chan struct{}), make(chan struct{})
			goOn := make(chan struct{}) // lets the blocked side continue
			answered := make(chan error, 1)
			mine := func(k string, s int64) bool { return k == key && s == ws.SessionId }
			env.Arbiter.SetTestHooks(&arbiter.TestHooks{
				Queued: func(k string, s int64) {
					if mine(k, s) {
						close(queued)
					}
				},
				Claimed: func(k string, s int64) {
					if mine(k, s) {
						close(claimed)
						if tc.claimFirst {
							<-goOn
						}
					}
				},
				WaitEnded: func(k string, s int64) {
					if mine(k, s) {
						close(ended)
						if !tc.claimFirst {
							<-goOn
						}
					}
				},
				Answered: func(k string, s int64, err error) {
					if mine(k, s) {
						answered <- err
					}
				},
			})
			t.Cleanup(func() { env.Arbiter.SetTestHooks(nil) })

			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			client := make(chan error, 1)
			go func() {
				_, err := w.Acquire(wctx, &lockv1.AcquireRequest{Key: key, SessionId: ws.SessionId, Wait: true})
				client <- err
			}()
			<-queued
			handoffs := counter(t, env, "lockplane_handoffs_total")
			released := make(chan error, 1)
			endWait := func() {
				if tc.gone {
					cancel()
				}
				<-ended
			}
			if tc.claimFirst {
				go func() { released <- h.Release(ctx) }()
				<-claimed
				endWait()
				close(goOn)
			} else {
				endWait()
				released <- h.Release(ctx)
				close(goOn)
			}
			if err := <-released; err != nil {
				t.Fatal(err)
			}
			if counter(t, env, "lockplane_handoffs_total") != handoffs+1 {
				t.Fatal("the release did not hand the key to the waiter: the test proves nothing")
			}
			serverErr := <-answered
			clientErr := <-client
			resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
			if err != nil {
				t.Fatal(err)
			}
			waiterHolds := len(resp.Kvs) == 1 && resp.Kvs[0].Lease == ws.SessionId
			t.Logf("arbiter answered %v; the caller got %v; hold on the waiter's session: %v", serverErr, clientErr, waiterHolds)
			switch {
			case serverErr != nil && waiterHolds:
				t.Fatalf("the waiter was answered %v, yet the key was handed to its session: a hold nobody knows of, until the session ends", serverErr)
			case serverErr == nil && !waiterHolds:
				t.Fatal("the waiter was answered a grant, but the hold is not its session's")
			case serverErr == nil && tc.gone:
				t.Fatal("a grant was answered to a caller that had gone away: nobody will release it")
			}
		})
	}
}
