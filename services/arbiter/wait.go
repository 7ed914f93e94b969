package arbiter

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wait queues session for r's key behind this arbiter's earlier waiters and
// returns its grant: handed over by a release on this arbiter, or won by
// its own attempt once it is the head and sees the key released. rev is
// the revision of its refused attempt, 0 if it made none. It ends with
// ctx's error when the wait is over.
func (a *Arbiter) wait(ctx context.Context, r request, session int64, rev int64) (grant, error) {
	w := &waiter{session: session, want: sessionFor(r.caller, r.class.TTL).encode(), req: r}
	a.waiters.join(r.key, w, rev)
	a.metrics.waited(r.labels)
	a.queuedHook(r.key, session)
	g, err := a.takeTurns(ctx, r, w)
	for err != nil && !a.waiters.leave(r.key, w, 0) {
		// A releaser claimed w as the wait ended: its answer decides,
		// within its own etcd timeout.
		if o := <-w.outcome; o.granted {
			g, err = o.grant, nil
		}
	}
	if err == nil {
		a.waiters.leave(r.key, w, g.token.Revision())
	}
	return g, err
}

// takeTurns waits until w is the head, then until a handoff or a grant
// attempt of its own succeeds.
func (a *Arbiter) takeTurns(ctx context.Context, r request, w *waiter) (grant, error) {
	from, err := a.waiters.await(ctx, w)
	if err != nil {
		return grant{}, err
	}
	holdKey := lockkey.HoldKey(r.key)
	for {
		if from > 0 {
			o, handed, err := a.awaitRelease(ctx, holdKey, from, w.outcome)
			if err != nil {
				return grant{}, err
			}
			if handed && o.granted {
				return o.grant, nil
			}
		}
		if !a.waiters.begin(w) {
			// Claimed between the wake-up and the attempt.
			if o := <-w.outcome; o.granted {
				return o.grant, nil
			}
		}
		g, err := a.attempt(ctx, r, w.session)
		c, isContended := err.(*contended)
		if !isContended {
			return g, err
		}
		a.metrics.waited(r.labels)
		from = c.rev
		a.waiters.watch(w)
		a.watchingHook(r.key, w.session, from)
	}
}

// awaitRelease returns when a grant attempt is worth making again: the
// hold was deleted after fromRev, the watch was lost (compaction,
// reconnect, leader loss), or the jittered poll interval passed. It never
// says the key is free; only the next grant Txn can (ADR-15). It also
// returns (handed true) a releaser's handoff outcome, and ctx's error when
// the wait is over.
func (a *Arbiter) awaitRelease(ctx context.Context, holdKey string, fromRev int64, outcome <-chan handoffOutcome) (o handoffOutcome, handed bool, err error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// From the refusing Txn's revision on: no delete between that check and
	// this watch can be missed.
	events := a.etcd.Watch(wctx, holdKey, clientv3.WithRev(fromRev+1), clientv3.WithFilterPut())
	poll := time.NewTimer(jitter(a.cfg.PollInterval))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return o, false, ctx.Err()
		case o := <-outcome:
			return o, true, nil
		case <-poll.C:
			return o, false, nil
		case wr, ok := <-events:
			if !ok || wr.Canceled || wr.Err() != nil {
				// A compacted start revision cancels the watch: attempt
				// at once, and watch again from that attempt's revision.
				return o, false, nil
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return o, false, nil
				}
			}
		}
	}
}

// jitter spreads d over [0.5d, 1.5d) so waiters do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
