package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Writes under etcd's NOSPACE alarm. etcd refuses every Put (and every
// Txn with one) but serves reads and deletes, and a NOSPACE answer may
// follow a write that was applied (etcdcall.NoSpace). So a grant refused
// with NOSPACE is looked up before the refusal stands, and a release
// whose Txn carried a Put (a handoff, or a batch with a grant) ends the
// hold with a delete alone: no answer leaves a hold the client forgot.

// grantFailed is the answer to a grant Txn that failed with err. A
// NOSPACE refusal is answered STORE_FULL only once a read finds no grant
// of this call's (grantOf): one found, its own Txn's or a handoff's, is
// answered as the grant it is; a read that fails leaves the outcome
// unknown (STORE_ERROR), which the client cleans up after.
//
// Answering the grant found rather than deleting it takes only a read,
// which etcd serves under its alarm, and no second write whose own
// outcome could be unknown; the grant is as valid as one answered at
// once, its token the hold's last write in the current epoch. The caller
// can still release it: a delete.
func (a *Arbiter) grantFailed(ctx context.Context, r request, session int64, err error) (grant, error) {
	failure := a.etcdFailure(ctx, err)
	if !etcdcall.NoSpace(err) || reason.Of(failure) != lockv1.ErrorReason_STORE_FULL {
		return grant{}, failure
	}
	// The read has its own deadline: a wait that ended meanwhile still
	// needs to know.
	g, held, lerr := a.ownHold(context.WithoutCancel(ctx), r, session)
	switch reason.Of(lerr) {
	case lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		if lerr != nil {
			return grant{}, a.bound.NoSpaceUnknown(lerr)
		}
		if held {
			return g, nil
		}
		return grant{}, failure
	case lockv1.ErrorReason_LEAKED:
		// Another hold, of this session or process: none of this call's.
		return grant{}, failure
	case lockv1.ErrorReason_SEALED:
		// As for a grant that committed on a sealed cluster (attemptIn).
		return grant{}, lerr
	}
	return grant{}, a.bound.NoSpaceUnknown(lerr)
}

// enqueueFailed is the answer to a durable enqueue Txn, which puts
// record rec at queue key own, that failed with err. A NOSPACE refusal
// may follow an applied enqueue, whose key would then wait ahead of every
// later waiter until its deadline passes, for a client that was told
// STORE_FULL and gave up. So the key is deleted if it holds rec, this
// call's record (a delete, which etcd serves under its alarm), before the
// refusal stands; if that delete fails, the outcome is unknown
// (STORE_ERROR), and the client's Release with any_token deletes the
// session's queue key.
func (a *Arbiter) enqueueFailed(ctx context.Context, own string, rec []byte, err error) error {
	failure := a.etcdFailure(ctx, err)
	if !etcdcall.NoSpace(err) {
		return failure
	}
	// Its own deadline: a wait that ended meanwhile leaves no key either.
	dctx := context.WithoutCancel(ctx)
	octx, cancel := a.opCtx(dctx)
	defer cancel()
	resp, derr := a.etcd.Txn(octx).If(clientv3.Compare(clientv3.Value(own), "=", string(rec))).
		Then(clientv3.OpDelete(own)).Commit()
	if derr != nil {
		return a.bound.NoSpaceUnknown(a.etcdFailure(dctx, derr))
	}
	a.observeHeader(resp.Header)
	return failure
}

// releaseAlone ends the hold that owned describes with a Txn that only
// deletes, sent on its own (not in a group commit, where a grant's Put
// would get it refused too): how a release goes on after its Txn was
// refused with NOSPACE. It reports whether the release happened: this
// Txn ended the hold, or, for a refused handoff to w, the hold is now w's,
// written over the releaser's (a write over a key keeps its create
// revision; a grant of w's own creates the key), so that handoff was
// applied after all; the waiter's own attempt then finds its grant. A
// handoff that certainly did not happen is settled so in out, and the
// waiter attempts for the key; a failed Txn leaves the outcome unknown
// (STORE_ERROR).
func (a *Arbiter) releaseAlone(ctx context.Context, r request, owned []clientv3.Cmp, w *waiter, out *handoffOutcome) (bool, error) {
	holdKey := lockkey.HoldKey(r.key)
	octx, cancel := a.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	resp, err := a.etcd.Txn(octx).If(owned...).Then(clientv3.OpDelete(holdKey)).Else(clientv3.OpGet(holdKey)).Commit()
	if err != nil {
		return false, a.bound.NoSpaceUnknown(a.etcdFailure(context.WithoutCancel(ctx), err))
	}
	a.observeHeader(resp.Header)
	if resp.Succeeded {
		if out != nil {
			*out = handoffOutcome{}
		}
		return true, nil
	}
	if w == nil {
		return false, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	return len(kvs) > 0 && kvs[0].Lease == w.session && grantOf(kvs[0].Value, w.req) &&
		kvs[0].ModRevision > kvs[0].CreateRevision, nil
}
