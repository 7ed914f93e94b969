package arbiter

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// grant is a successful attempt.
type grant struct {
	token token.Token
	// waited is how long this call waited for the key before the grant
	// (zero: it did not), which its service time leaves out.
	waited time.Duration
}

// contended is an attempt refused because another session holds the key;
// rev is the revision of the refusing Txn, from which a waiter watches.
type contended struct {
	rev int64
	err error
	// resp is the refusing Txn's response, whose Else branch a durable
	// waiter reads its place in the queue from.
	resp *clientv3.TxnResponse
}

func (c *contended) Error() string { return c.err.Error() }

// Acquire implements lockv1.LockServiceServer.
func (a *Arbiter) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	r, err := a.admit(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	return a.acquireAdmitted(ctx, r, req)
}

// acquireAdmitted serves an Acquire admitted as r (see admitter).
func (a *Arbiter) acquireAdmitted(ctx context.Context, r request, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	start := time.Now()
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := validInstance(req.GetInstance()); err != nil {
		return nil, err
	}
	r.instance = req.GetInstance()
	r.grant = newGrantName()
	a.metrics.admitted(r.labels)
	if err := a.withinQuota(ctx, r.caller, quota.Holds); err != nil {
		a.metrics.refused(r.labels, lockv1.ErrorReason_QUOTA_EXCEEDED)
		return nil, err
	}
	g, err := a.acquire(ctx, r, req.GetSessionId(), req.GetWait())
	if err == nil && ctx.Err() != nil {
		// Granted as the caller went away, e.g. handed the key as its wait
		// ended: no answer can reach it, so end the grant here rather than
		// leave it held until the session ends.
		a.releaseUnheard(ctx, r, req.GetSessionId(), g)
		err = status.FromContextError(ctx.Err()).Err()
	}
	a.answeredHook(r.key, req.GetSessionId(), err)
	if err != nil {
		a.metrics.refused(r.labels, reason.Of(err))
		return nil, err
	}
	a.metrics.granted(r.labels, time.Since(start), g.waited)
	return &lockv1.AcquireResponse{
		Key:       r.key,
		Token:     &lockv1.Token{Value: uint64(g.token), Epoch: g.token.Epoch(), Revision: g.token.Revision()},
		SessionId: req.GetSessionId(),
		Class:     r.class.Name,
	}, nil
}

// releaseUnheard ends a grant whose caller has gone, with the arbiter's
// own etcd deadlines (the caller's context has ended). The client's
// cleanup may have run before this grant committed and found nothing, so
// a failed release is tried again in the background, with backoff, until
// it is answered or the session could no longer be alive (its class's
// TTL past the last try); either way the hold does not outlive both.
func (a *Arbiter) releaseUnheard(ctx context.Context, r request, session int64, g grant) {
	ctx = context.WithoutCancel(ctx)
	if _, err := a.releaseHold(ctx, r, session, g.token); err == nil {
		return
	}
	go func() {
		deadline := time.Now().Add(2 * r.class.TTL)
		for backoff := 200 * time.Millisecond; time.Now().Before(deadline); backoff = min(2*backoff, 5*time.Second) {
			select {
			case <-time.After(backoff):
			case <-a.drained.Done():
				return
			}
			_, err := a.releaseHold(ctx, r, session, g.token)
			if err == nil {
				return
			}
			if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
				return
			}
		}
		a.log.Warn("could not release a grant whose caller had gone; it ends with the session",
			"namespace", r.labels.namespace, "class", r.class.Name)
	}()
}

// outcomeUnknown reports whether a failed grant Txn may still commit:
// etcd did not confirm it in time, or the wait's context ended while it
// was in flight.
func outcomeUnknown(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_NO_QUORUM, lockv1.ErrorReason_STORE_ERROR:
		return true
	case lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		switch status.Code(err) {
		case codes.DeadlineExceeded, codes.Canceled, codes.Unavailable:
			return true
		}
	}
	return false
}

// acquire attempts until granted, refused for a reason other than
// contention, or (when waiting) the wait ends.
func (a *Arbiter) acquire(ctx context.Context, r request, session int64, wait bool) (grant, error) {
	if r.class.Durable() {
		return a.acquireDurable(ctx, r, session, wait)
	}
	if !wait {
		g, err := a.attempt(ctx, r, session)
		if c, ok := err.(*contended); ok {
			return grant{}, c.err
		}
		return g, err
	}
	wctx, cancel := a.waitContext(ctx)
	defer cancel()
	rev := int64(0)
	if a.waiters.depth(r.key) == 0 {
		g, err := a.attempt(wctx, r, session)
		c, isContended := err.(*contended)
		if !isContended {
			return g, err
		}
		rev = c.rev
	} else {
		// Others are queued: no barging past them, unless this session
		// already holds the key (a retried Acquire whose answer was lost);
		// nor queueing behind this process's own hold (LEAKED, at once).
		if g, held, err := a.ownHold(wctx, r, session); held || err != nil {
			return g, err
		}
	}
	// The wait starts here; its grant (a handoff, which carries r, or its
	// own attempt) records how long it lasted.
	r.waitingSince = time.Now()
	g, err := a.wait(wctx, r, session, rev)
	if err != nil {
		return grant{}, a.waitEnded(ctx, wctx, r, err)
	}
	g.waited = time.Since(r.waitingSince)
	return g, nil
}

// waitContext ends a wait at the arbiter's MaxWait, or a little before the
// caller's deadline so that the CONTENDED answer reaches it rather than its
// own timeout.
func (a *Arbiter) waitContext(ctx context.Context) (context.Context, context.CancelFunc) {
	until := time.Now().Add(a.cfg.MaxWait)
	if d, ok := ctx.Deadline(); ok && d.Before(until) {
		until = d.Add(-min(200*time.Millisecond, time.Until(d)/10))
	}
	wctx, cancel := context.WithDeadline(ctx, until)
	stop := context.AfterFunc(a.drained, cancel)
	return wctx, func() { stop(); cancel() }
}

// waitEnded is the answer to a wait that ended in err without a grant.
func (a *Arbiter) waitEnded(ctx, wctx context.Context, r request, err error) error {
	// Each context read once: a wait's timer firing between two reads
	// would turn a live NO_QUORUM into CONTENDED.
	callerErr, waitErr := ctx.Err(), wctx.Err()
	switch {
	case waitErr != nil && outcomeUnknown(err) && reason.Of(err) != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		// A grant that may have committed could not be looked up: say
		// so, never CONTENDED, so that the caller cleans up.
		return err
	case a.drained.Err() != nil && callerErr == nil:
		return refuse.With(codes.Unavailable, lockv1.ErrorReason_DRAINING,
			"this arbiter is shutting down; retry the Acquire on another")
	case errors.Is(callerErr, context.Canceled) && !errors.Is(waitErr, context.DeadlineExceeded):
		// Cancelled before the wait ran out. One that ran out first is
		// CONTENDED, whoever cancelled since: a caller whose deadline
		// passed as the answer was on its way cancels the stream.
		return status.FromContextError(callerErr).Err()
	case waitErr == nil:
		return err
	}
	return refuse.With(codes.DeadlineExceeded, lockv1.ErrorReason_CONTENDED,
		fmt.Sprintf("key %s was still held when the wait ended", r.key))
}

// servingMap is epochFor for a grant: it also refuses with MOVING when the
// cluster does not serve the shard map version the key was homed under
// (the map is changing). The grant Txn compares the epoch record, which
// carries the version, so the check holds at commit.
func (a *Arbiter) servingMap(ctx context.Context, r request) (epoch.State, error) {
	st, err := a.grantEpoch(ctx)
	if err != nil || r.mapVersion == 0 || st.MapVersion == r.mapVersion {
		return st, err
	}
	if st.MapVersion < r.mapVersion {
		// The cache may lag the stamp: read the record again.
		if err := a.reloadEpoch(ctx); err != nil {
			return epoch.State{}, err
		}
		if st, err = a.grantEpoch(ctx); err != nil || st.MapVersion == r.mapVersion {
			return st, err
		}
	}
	return epoch.State{}, refuse.With(codes.Unavailable, lockv1.ErrorReason_MOVING,
		fmt.Sprintf("the shard map is changing (version %d here, %d routed); retry shortly", st.MapVersion, r.mapVersion),
		"map_version", strconv.FormatInt(st.MapVersion, 10))
}

// ownHold reports whether session already holds r's key in the current
// epoch under r's own grant (grantOf), and that grant if so; a hold of the
// session's under another Acquire's grant is LEAKED (leakedOwn). It
// writes nothing.
func (a *Arbiter) ownHold(ctx context.Context, r request, session int64) (grant, bool, error) {
	st, err := a.epochFor(ctx)
	if err != nil {
		return grant{}, false, err
	}
	holdKey := lockkey.HoldKey(r.key)
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Txn(octx).If(
		clientv3.Compare(clientv3.LeaseValue(holdKey), "=", clientv3.LeaseID(session)),
		epochIs(st),
	).Then(clientv3.OpGet(holdKey)).Else(clientv3.OpGet(holdKey)).Commit()
	if err != nil {
		return grant{}, false, a.etcdFailure(ctx, err)
	}
	if a.observeHeader(resp.Header) {
		return grant{}, false, a.sealedErr(st)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	switch {
	case len(kvs) == 0:
		return grant{}, false, nil
	case !resp.Succeeded && heldBySameProcess(kvs[0].Value, r):
		return grant{}, false, a.leaked(r, kvs[0].Value, kvs[0].Lease)
	case !resp.Succeeded:
		return grant{}, false, nil
	case !grantOf(kvs[0].Value, r):
		return grant{}, false, a.leakedOwn(r, kvs[0].Value, kvs[0].Lease)
	}
	t, err := token.Mint(st.Epoch, kvs[0].ModRevision)
	if err != nil {
		return grant{}, false, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
	}
	return grant{token: t}, true, nil
}

// attempt is one grant: exactly one etcd Txn, or one sub-Txn of a group
// commit (groupcommit.go). Its Else branch reads back
// the hold, the session and the epoch, so a refusal is classified without a
// second round trip.
func (a *Arbiter) attempt(ctx context.Context, r request, session int64) (grant, error) {
	return a.attemptIn(ctx, r, session, nil)
}

// queueTerms are what a durable queue adds to a grant Txn: compares that
// put the caller first in the queue, writes that take it out, and reads
// that find its place when refused.
type queueTerms struct {
	cmps  []clientv3.Cmp
	then  []clientv3.Op
	reads []clientv3.Op
}

// attemptIn is attempt with a durable queue's terms (nil: none).
func (a *Arbiter) attemptIn(ctx context.Context, r request, session int64, q *queueTerms) (grant, error) {
	if q == nil {
		q = &queueTerms{}
	}
	// An epoch change observed in the Else branch is retried once with the
	// new record; two in a row is not worth chasing.
	for try := 0; ; try++ {
		st, err := a.servingMap(ctx, r)
		if err != nil {
			return grant{}, err
		}
		holdKey, sessKey := lockkey.HoldKey(r.key), lockkey.SessionKey(session)
		want := sessionFor(r.caller, r.class.TTL, r.instance).Encode()
		hold := holdFor(r, session).Encode()
		// Bounded by the op deadline but not ended by the caller's: a wait
		// that ends with the Txn in flight learns whether it committed
		// rather than answer CONTENDED over a grant etcd applies later.
		octx, cancel := a.opCtx(context.WithoutCancel(ctx))
		a.metrics.attempted(r.labels)
		resp, err := a.commits.commit(octx, r.key, append([]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(holdKey), "=", 0),
			epochIs(st),
			clientv3.Compare(clientv3.Value(sessKey), "=", want),
		}, q.cmps...), append([]clientv3.Op{
			clientv3.OpPut(holdKey, hold, clientv3.WithLease(clientv3.LeaseID(session))),
		}, q.then...), append([]clientv3.Op{
			clientv3.OpGet(holdKey), clientv3.OpGet(sessKey), clientv3.OpGet(lockkey.EpochKey),
		}, q.reads...))
		cancel()
		if err != nil {
			// NOSPACE may follow an applied grant: looked up first.
			return a.grantFailed(ctx, r, session, err)
		}
		// A grant committed on a cluster that is not the epoch's is never
		// returned: its token could repeat one issued before a restore.
		if a.observeHeader(resp.Header) {
			return grant{}, a.sealedErr(st)
		}
		if resp.Succeeded {
			t, err := token.Mint(st.Epoch, resp.Header.Revision)
			if err != nil {
				return grant{}, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
			}
			return grant{token: t}, nil
		}
		g, err, retry := a.classify(r, session, st, resp, want)
		c, isContended := err.(*contended)
		if isContended {
			c.resp = resp
		}
		// A durable queue's refusal with the key free is its answer, not a
		// race worth a second Txn.
		if !retry || try > 0 || (isContended && len(q.cmps) > 0) {
			return g, err
		}
	}
}

// classify explains a failed grant Txn from its Else reads.
func (a *Arbiter) classify(r request, session int64, st epoch.State, resp *clientv3.TxnResponse, want string) (g grant, err error, retry bool) {
	holdKVs := resp.Responses[0].GetResponseRange().Kvs
	sessKVs := resp.Responses[1].GetResponseRange().Kvs
	epochKVs := resp.Responses[2].GetResponseRange().Kvs

	if epochKVs == nil || string(epochKVs[0].Value) != string(st.Raw) {
		a.cacheRecord(epochKVs, at(resp.Header))
		if a.epochs.sealed() {
			// The record is gone (deleted, or the cluster rebuilt empty).
			return grant{}, a.sealedErr(st), false
		}
		return grant{}, refuse.With(codes.Unavailable, lockv1.ErrorReason_EPOCH_CHANGED, "the epoch changed during the grant; retry"), true
	}
	if len(sessKVs) == 0 {
		return grant{}, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED,
			"the session has expired or was closed; open a new one"), false
	}
	if got := string(sessKVs[0].Value); got != want {
		rec, _ := decodeSession(sessKVs[0].Value)
		if rec.Identity != r.caller.String() {
			return grant{}, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_SESSION_NOT_OWNED,
				"the session belongs to another identity"), false
		}
		if rec.Instance != r.instance {
			return grant{}, refuse.With(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
				fmt.Sprintf("instance: the session was opened with instance %q, the request names %q; send the session's", rec.Instance, r.instance),
				"field", "instance"), false
		}
		return grant{}, refuse.With(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
			fmt.Sprintf("class: class %s has TTL %s but the session has TTL %ds; use a session of the class's TTL",
				r.class.Name, r.class.TTL, rec.TTLSeconds), "field", "class"), false
	}
	if len(holdKVs) == 0 {
		// Released between the compare and the read: nothing to classify.
		return grant{}, &contended{rev: resp.Header.Revision, err: refuse.With(codes.Aborted, lockv1.ErrorReason_CONTENDED,
			fmt.Sprintf("key %s changed during the grant", r.key))}, true
	}
	kv := holdKVs[0]
	switch {
	case kv.Lease == session && grantOf(kv.Value, r):
		// This call's own grant, not yet heard of: a handoff to it, or its
		// own earlier attempt. The grant is the last write of the hold:
		// holds are written only by grants.
		t, err := token.Mint(st.Epoch, kv.ModRevision)
		if err != nil {
			return grant{}, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error()), false
		}
		return grant{token: t}, nil, false
	case kv.Lease == session:
		// Another Acquire of this session holds it (grantOf): never given
		// to this one, which may be a call whose caller has gone.
		return grant{}, a.leakedOwn(r, kv.Value, kv.Lease), false
	case heldBySameProcess(kv.Value, r):
		// The caller's own process holds the key under another session:
		// waiting would wait on itself. A hold it lost track of (ADR-13).
		return grant{}, a.leaked(r, kv.Value, kv.Lease), false
	default:
		// Another process, of this identity or not: replicas of one
		// deployment share a SPIFFE ID, and queue like anyone else.
		return grant{}, &contended{rev: resp.Header.Revision, err: refuse.With(codes.Aborted, lockv1.ErrorReason_CONTENDED,
			fmt.Sprintf("key %s is held by another session", r.key))}, false
	}
}

// leakedOwn is the answer to an Acquire whose own session holds the key
// under another Acquire's grant: one whose answer never reached the
// caller (its deadline passed while the grant committed, or the caller
// did not clean up after an unknown outcome). The caller, which makes one
// Acquire per key per session at a time, ends it by Release with
// any_token (the client library does so) and acquires again.
func (a *Arbiter) leakedOwn(r request, hold []byte, lease int64) error {
	holder := sessionOfHold(a.shardOf, hold, lease)
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_LEAKED,
		fmt.Sprintf("key %s is held by this session (%d) under an earlier Acquire whose answer never arrived; end it by Release with any_token, then acquire again", r.key, holder),
		"holder_session", strconv.FormatInt(holder, 10))
}

// leaked is the answer to a process asking for a key it holds under
// another session: waiting would wait on itself (ADR-13). It names that
// session only when the hold it read says which (leakedHolder).
func (a *Arbiter) leaked(r request, hold []byte, lease int64) error {
	holder := leakedHolder(a.shardOf, r, hold, lease)
	if holder == 0 {
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_LEAKED,
			fmt.Sprintf("key %s is held by this process (instance %s) under another of its sessions; release it there or close that session", r.key, r.instance))
	}
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_LEAKED,
		fmt.Sprintf("key %s is held by this process (instance %s) under its session %d; release it there or close that session", r.key, r.instance, holder),
		"holder_session", strconv.FormatInt(holder, 10))
}
