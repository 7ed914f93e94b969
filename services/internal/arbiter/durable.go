package arbiter

import (
	"context"
	"encoding/json"
	"time"

	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Durable fairness (ADR-14): a class's waiters are etcd keys under /q, one
// per waiting session, on that session's lease, and the waiter with the
// lowest create revision is granted next. The order is etcd's, so it holds
// whichever arbiter serves each waiter and across arbiter restarts: a
// retried Acquire finds its key and keeps its place. Each waiter costs two
// consensus writes: its queue key, and its grant, which deletes the key in
// the same Txn. Each waiter watches only the waiter just ahead of it (the
// head watches the hold), so one release still makes one attempt.

// waitRecord is the value of a durable waiter's key. Until lets the waiter
// behind it remove a key whose Acquire has certainly ended, e.g. on an
// arbiter that died, rather than wait for the session to end; a retried
// Acquire that finds its key rewrites it with its own (extendWait).
type waitRecord struct {
	Identity string    `json:"identity"`
	Until    time.Time `json:"until"`
	// Queued is when the session first queued for the key (UTC, by the
	// arbiter that queued it): a retried Acquire finds its record and
	// counts its wait from here. Absent from records written before
	// waits were; they decode with it zero.
	Queued time.Time `json:"queued,omitzero"`
}

// staleGrace allows for clock skew between the arbiter that wrote a wait
// record's Until and the one reading it.
const staleGrace = 5 * time.Second

// queuePlace is where a refused durable attempt left its caller.
type queuePlace struct {
	// ahead is the etcd key to watch for a delete: the waiter just ahead,
	// or the hold when the caller is first.
	ahead string
	// stale is set when the waiter ahead's Acquire has ended; its key is
	// removed instead of waited for.
	stale bool
	// aheadMod is the mod revision of the record read as stale: only
	// that record is removed, not one its Acquire's retry rewrote since.
	aheadMod int64
	// lost is set when the caller's own queue key is gone (an epoch advance
	// deletes every waiter): it must queue again.
	lost bool
}

// acquireDurable is acquire for a class with durable fairness.
func (a *Arbiter) acquireDurable(ctx context.Context, r request, session int64, wait bool) (grant, error) {
	wctx, cancel := a.waitContext(ctx)
	defer cancel()
	mine := int64(0) // create revision of this session's queue key
	var err error
	for {
		g, aerr := a.attemptIn(wctx, r, session, queuedTerms(r.key, session, mine))
		c, isContended := aerr.(*contended)
		if !isContended {
			if aerr != nil && wctx.Err() != nil && outcomeUnknown(aerr) {
				// The wait ended with its grant Txn in flight: look it up
				// rather than answer CONTENDED over a grant.
				g, aerr = a.lookUpUnknown(ctx, r, session, aerr)
			}
			if aerr != nil && mine > 0 {
				a.dequeue(context.WithoutCancel(ctx), r.key, session, mine)
			}
			if aerr != nil {
				aerr = a.waitEnded(ctx, wctx, r, aerr)
			} else if !r.waitingSince.IsZero() {
				g.waited = time.Since(r.waitingSince)
			}
			return g, aerr
		}
		if !wait {
			return grant{}, c.err
		}
		if r.waitingSince.IsZero() {
			// The first refusal starts the wait its grant records.
			r.waitingSince = time.Now()
			defer a.metrics.waitBegan(r.labels)()
		}
		p := placeIn(c.resp, r.key, session, mine)
		if mine == 0 || p.lost {
			var queued time.Time
			if mine, queued, err = a.enqueue(wctx, r, session); err != nil {
				break
			}
			if !queued.IsZero() && (r.queuedAt.IsZero() || queued.Before(r.queuedAt)) {
				r.queuedAt = queued
			}
			if mine > 0 {
				a.queuedHook(r.key, session)
			}
			continue // first in the queue and the key free: take it now
		}
		if p.stale {
			a.removeStale(wctx, p.ahead, p.aheadMod)
			continue
		}
		a.metrics.waited(r.labels)
		if err = a.awaitRelease(wctx, p.ahead, c.rev, nil); err != nil {
			break
		}
	}
	// A wait ended by a drain keeps its place: the caller retries on
	// another arbiter and finds its key.
	if mine > 0 && a.drained.Err() == nil {
		a.dequeue(context.WithoutCancel(ctx), r.key, session, mine)
	}
	return grant{}, a.waitEnded(ctx, wctx, r, err)
}

// queuedTerms makes a grant Txn respect the queue: a caller not queued
// (mine == 0) is granted only if nobody waits; a queued caller only if its
// key is the lowest, which the grant deletes. The reads find the waiter
// just ahead of the caller (or any waiter, for one not queued).
func queuedTerms(key string, session, mine int64) *queueTerms {
	waiters, own := lockkey.WaitersOf(key), lockkey.WaitKey(key, session)
	if mine == 0 {
		return &queueTerms{
			cmps:  []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(waiters), "=", 0).WithPrefix()},
			reads: []clientv3.Op{clientv3.OpGet(waiters, clientv3.WithPrefix(), clientv3.WithLimit(1)), clientv3.OpGet(own)},
		}
	}
	return &queueTerms{
		cmps: []clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(own), "=", mine),
			// Every waiter's create revision is at least mine.
			clientv3.Compare(clientv3.CreateRevision(waiters), ">", mine-1).WithPrefix(),
		},
		then: []clientv3.Op{clientv3.OpDelete(own)},
		reads: []clientv3.Op{
			clientv3.OpGet(waiters, clientv3.WithPrefix(), clientv3.WithMaxCreateRev(mine-1),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(1)),
			clientv3.OpGet(own),
		},
	}
}

// placeIn reads a refused durable attempt's Else branch (hold, session,
// epoch, then queuedTerms' two reads).
func placeIn(resp *clientv3.TxnResponse, key string, session, mine int64) queuePlace {
	p := queuePlace{ahead: lockkey.HoldKey(key)}
	if resp == nil || len(resp.Responses) < 5 {
		return p
	}
	own := resp.Responses[4].GetResponseRange().Kvs
	p.lost = mine > 0 && (len(own) == 0 || own[0].CreateRevision != mine)
	ahead := resp.Responses[3].GetResponseRange().Kvs
	if mine == 0 || len(ahead) == 0 {
		return p
	}
	p.ahead, p.aheadMod = string(ahead[0].Key), ahead[0].ModRevision
	var w waitRecord
	if json.Unmarshal(ahead[0].Value, &w) == nil && !w.Until.IsZero() && time.Now().After(w.Until.Add(staleGrace)) {
		p.stale = true
	}
	return p
}

// enqueue puts session's queue key, or finds it already there (a retried
// Acquire keeps its place), and returns its create revision and when the
// session first queued (zero if its record does not say).
func (a *Arbiter) enqueue(ctx context.Context, r request, session int64) (int64, time.Time, error) {
	own := lockkey.WaitKey(r.key, session)
	until, _ := ctx.Deadline()
	// A key queued again (an epoch advance deleted the queue) keeps the
	// first time this call knows of.
	queued := time.Now().UTC()
	if !r.queuedAt.IsZero() && r.queuedAt.Before(queued) {
		queued = r.queuedAt
	}
	rec, _ := json.Marshal(waitRecord{Identity: r.caller.String(), Until: until.UTC(), Queued: queued})
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Txn(octx).If(
		clientv3.Compare(clientv3.CreateRevision(own), "=", 0),
		clientv3.Compare(clientv3.Value(lockkey.SessionKey(session)), "=", sessionFor(r.caller, r.class.TTL, r.instance).Encode()),
	).Then(
		clientv3.OpPut(own, string(rec), clientv3.WithLease(clientv3.LeaseID(session))),
	).Else(clientv3.OpGet(own)).Commit()
	if err != nil {
		// NOSPACE may follow an applied enqueue: its key is removed first.
		return 0, time.Time{}, a.enqueueFailed(ctx, own, rec, err)
	}
	a.observeHeader(resp.Header)
	if resp.Succeeded {
		return resp.Header.Revision, queued, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		// Only an arbiter writes the record (the session's caller cannot),
		// so its time is the first queueing's; an old or unreadable one
		// gives none, and the wait counts from this call.
		var w waitRecord
		_ = json.Unmarshal(kvs[0].Value, &w)
		a.extendWait(ctx, own, kvs[0].ModRevision, w, r, until)
		return kvs[0].CreateRevision, w.Queued, nil
	}
	// The session is not the caller's or is gone: the next attempt says
	// which, and queues nothing.
	return 0, time.Time{}, nil
}

// extendWait gives a retried Acquire's queue key (read at mod revision
// mod, with record w) the retry's deadline, until, if later than the
// record's: the waiter behind removes a key whose Until has passed
// (placeIn), and with the first call's Until it would remove the live
// retry's, which would lose its place. The write keeps the key's create
// revision, its place, and its lease; a record changed since the read is
// left alone (the next attempt finds the key gone and queues again).
//
// It is best effort: a failed write leaves the first deadline, and the
// retry waits on with its place (an error here would end the Acquire with
// its key still queued). Should the waiter behind remove the key as stale
// once that deadline passes, the retry queues again (placeIn's lost); if
// its wait ends without a grant, it dequeues its key as any waiter does.
func (a *Arbiter) extendWait(ctx context.Context, own string, mod int64, w waitRecord, r request, until time.Time) {
	if !until.After(w.Until) {
		return
	}
	w.Until = until.UTC()
	if w.Identity == "" {
		w.Identity = r.caller.String()
	}
	rec, _ := json.Marshal(w)
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Txn(octx).If(clientv3.Compare(clientv3.ModRevision(own), "=", mod)).
		Then(clientv3.OpPut(own, string(rec), clientv3.WithIgnoreLease())).Commit()
	if err != nil {
		a.log.Warn("could not extend a retried durable waiter's deadline; it waits on with its first one",
			"namespace", r.labels.namespace, "class", r.class.Name, "err", err)
		return
	}
	a.observeHeader(resp.Header)
}

// dequeue removes a waiter that stops waiting without a grant, so that it
// does not hold up the waiters behind it.
func (a *Arbiter) dequeue(ctx context.Context, key string, session, mine int64) {
	a.dequeueStale(ctx, lockkey.WaitKey(key, session), mine)
}

// dequeueStale deletes a queue key if it is still the one created at rev.
func (a *Arbiter) dequeueStale(ctx context.Context, waitKey string, rev int64) {
	a.dequeueIf(ctx, waitKey, clientv3.Compare(clientv3.CreateRevision(waitKey), "=", rev))
}

// removeStale deletes the queue key of a waiter ahead whose Acquire has
// ended, if its record is still the one read at mod revision mod: a
// retry of that Acquire rewrites it with its own deadline (extendWait).
func (a *Arbiter) removeStale(ctx context.Context, waitKey string, mod int64) {
	a.dequeueIf(ctx, waitKey, clientv3.Compare(clientv3.ModRevision(waitKey), "=", mod))
}

// dequeueIf deletes a queue key if cmp holds. A failure is not an answer
// to anyone: the key stays until its session ends or it is found stale.
func (a *Arbiter) dequeueIf(ctx context.Context, waitKey string, cmp clientv3.Cmp) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	a.etcd.Txn(octx).If(cmp).Then(clientv3.OpDelete(waitKey)).Commit()
}
