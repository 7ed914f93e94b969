package arbiter

import (
	"context"
	"github.com/lockplane/lockplane/services/etcdauth"
	"math/rand/v2"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// wait queues session for r's key behind this arbiter's earlier waiters and
// returns its grant: handed over by a release on this arbiter, or won by
// its own attempt once it is the head and sees the key released. rev is
// the revision of its refused attempt, 0 if it made none. It ends with
// ctx's error when the wait is over.
//
// No window between a wait's end and a handoff: a releaser claims the
// head under the queue's lock before its Txn, and a waiter whose wait
// ends withdraws under that lock (withdraw). Either it withdrew first, and
// no release can hand it the key; or it was claimed first, and it awaits
// the releaser's answer (bounded by the releaser's etcd timeout) and acts
// on it: a grant is returned, which Acquire releases itself if the
// caller has gone; a handoff of unknown outcome is looked up.
func (a *Arbiter) wait(ctx context.Context, r request, session int64, rev int64) (grant, error) {
	w := &waiter{session: session, want: sessionFor(r.caller, r.class.TTL, r.instance).Encode(), req: r}
	a.waiters.join(r.key, w, rev)
	defer a.metrics.waitBegan(r.labels)()
	a.metrics.waited(r.labels)
	a.queuedHook(r.key, session)
	g, unsure, err := a.takeTurns(ctx, r, w)
	if err != nil {
		a.waitEndedHook(r.key, session)
		return a.withdraw(ctx, r, w, unsure, err)
	}
	a.waiters.leave(r.key, w, g.token.Revision())
	return g, nil
}

// withdraw ends a wait that ended in err without a grant of its own.
// unsure says its last grant Txn's outcome is unknown.
func (a *Arbiter) withdraw(ctx context.Context, r request, w *waiter, unsure bool, err error) (grant, error) {
	for {
		o, taken, ok := a.waiters.withdraw(r.key, w)
		if !ok {
			<-w.answer // claimed: the releaser answers within its etcd timeout
			continue
		}
		if !taken {
			break
		}
		if o.granted {
			a.waiters.leave(r.key, w, o.grant.token.Revision())
			return o.grant, nil
		}
		a.waiters.leave(r.key, w, 0)
		if o.unknown {
			// A handoff whose Txn's outcome is unknown: unless the read
			// below finds it, the caller must hear "unknown", not CONTENDED.
			unsure, err = true, refuse.With(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM,
				"the wait ended while a handoff to this session had an unknown outcome; end any hold it may have (Release with any_token)")
		}
		break
	}
	if !unsure || ctx.Err() == nil {
		// A live wait's own unknown outcome (NO_QUORUM) is its answer:
		// the caller knows to retry or clean up.
		return grant{}, err
	}
	return a.lookUpUnknown(ctx, r, w.session, err)
}

// lookUpUnknown finds out, once a wait is over, whether a grant Txn whose
// outcome it never learned (its own attempt, or a handoff to it)
// committed: a read of the session's own hold, with its own deadline since
// the wait's has passed. A hold found is this call's grant only if it
// names this call (grantOf): the caller may have given up, cleaned up and
// been granted the key by a later Acquire, whose hold must not be taken
// for this one's (Acquire releases a grant whose caller has gone). A
// failed read answers NO_QUORUM, so the caller knows the outcome is still
// unknown.
func (a *Arbiter) lookUpUnknown(ctx context.Context, r request, session int64, waitErr error) (grant, error) {
	g, held, err := a.ownHold(context.WithoutCancel(ctx), r, session)
	switch {
	case reason.Of(err) == lockv1.ErrorReason_LEAKED:
		// Another Acquire's hold: this call's outcome is still unknown.
		return grant{}, stillUnknown(waitErr)
	case err != nil:
		return grant{}, err
	case held:
		return g, nil
	}
	return grant{}, stillUnknown(waitErr)
}

// stillUnknown is the answer of a wait whose last grant Txn's outcome the
// lookup could not settle (it may commit yet): NO_QUORUM, so that the
// caller ends any hold it may have, never the CONTENDED a bare deadline
// error would become (waitEnded). A refusal that already says so stands.
func stillUnknown(waitErr error) error {
	if reason.Of(waitErr) != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return waitErr
	}
	return refuse.With(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM,
		"the wait ended while its last grant attempt's outcome was unknown; end any hold it may have (Release with any_token)")
}

// takeTurns waits until w is the head, then until a handoff or a grant
// attempt of its own succeeds. unsure reports that the grant Txn of its
// last attempt failed with an unknown outcome.
func (a *Arbiter) takeTurns(ctx context.Context, r request, w *waiter) (g grant, unsure bool, err error) {
	from, err := a.waiters.await(ctx, w)
	if err != nil {
		return grant{}, false, err
	}
	holdKey := lockkey.HoldKey(r.key)
	for {
		if from > 0 {
			if err := a.awaitRelease(ctx, holdKey, from, w.answer); err != nil {
				return grant{}, false, err
			}
		}
		// A releaser's answer comes before an attempt of its own.
		for !a.waiters.begin(w) {
			if o, ok := a.waiters.take(w); ok {
				if o.granted {
					return o.grant, false, nil
				}
				// Refused or unknown: the attempt below finds a handoff
				// that committed, as its own hold.
				break
			}
			<-w.answer // claimed: the releaser answers within its etcd timeout
		}
		g, err := a.attempt(ctx, r, w.session)
		c, isContended := err.(*contended)
		if !isContended {
			return g, err != nil && outcomeUnknown(err), err
		}
		a.metrics.waited(r.labels)
		from = c.rev
		a.waiters.watch(w)
		a.watchingHook(r.key, w.session, from)
	}
}

// awaitRelease returns when a grant attempt is worth making again: the
// hold was deleted after fromRev, the watch was lost (compaction,
// reconnect, leader loss), the jittered poll interval passed, or a
// releaser answered (answer). It never says the key is free; only the next
// grant Txn can (ADR-15). It returns ctx's error when the wait is over.
func (a *Arbiter) awaitRelease(ctx context.Context, holdKey string, fromRev int64, answer <-chan struct{}) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	// From the refusing Txn's revision on: no delete between that check and
	// this watch can be missed.
	events := a.etcd.Watch(etcdauth.WatchContext(wctx), holdKey, clientv3.WithRev(fromRev+1), clientv3.WithFilterPut())
	poll := time.NewTimer(jitter(a.cfg.PollInterval))
	defer poll.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-answer:
			return nil
		case <-poll.C:
			return nil
		case wr, ok := <-events:
			if ctx.Err() != nil {
				// The watch closed because the wait is over: no attempt.
				return ctx.Err()
			}
			if !ok || wr.CompactRevision != 0 {
				// A compacted start revision cancels the watch: attempt
				// at once, and watch again from that attempt's revision.
				return nil
			}
			if wr.Canceled || wr.Err() != nil {
				// Refused (etcd took the stream's auth token as expired,
				// say): attempt at the poll, not at once, so a refusal
				// that repeats is not a loop of grant Txns.
				events = nil
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return nil
				}
			}
		}
	}
}

// jitter spreads d over [0.5d, 1.5d) so waiters do not poll in step.
func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}
