package arbiter

import (
	"context"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// release ends the hold that token t names for session, in one Txn. If this
// arbiter has a waiter at the head of the key's queue, that Txn also grants
// the key to it (ADR-14 handoff): the releasing hold, the epoch and the
// waiter's session are compared, and the hold is overwritten with the
// waiter's, on the waiter's lease. The next holder then knows it holds after
// one consensus write, where etcd's Mutex needs a release, a watch event
// and a read. If the waiter's session is gone, the Else branch is the plain
// release. The waiter is claimed under the queue's lock before the Txn: one
// that withdrew is never handed a key, and one whose wait ends while
// claimed awaits this answer and acts on it (wait.go).
func (a *Arbiter) release(ctx context.Context, r request, session int64, t token.Token, st epoch.State) (bool, error) {
	holdKey := lockkey.HoldKey(r.key)
	owned := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(holdKey), "=", t.Revision()),
		clientv3.Compare(clientv3.LeaseValue(holdKey), "=", clientv3.LeaseID(session)),
		epochIs(st),
	}
	w := a.waiters.claim(r.key)
	if w != nil {
		a.claimedHook(r.key, w.session)
	}
	// The Txn runs to its answer even if the releasing caller goes: a
	// claimed waiter is owed a known outcome, not a cancelled one.
	octx, cancel := a.opCtx(context.WithoutCancel(ctx))
	defer cancel()
	if w != nil && (w.req.mapVersion != 0 && w.req.mapVersion != st.MapVersion || a.quietErr(st) != nil) {
		// The key's range is moving: no grant, not even a handoff.
		a.waiters.settle(w, handoffOutcome{})
		w = nil
	}
	if w == nil {
		resp, err := a.commits.commit(octx, r.key, owned, []clientv3.Op{clientv3.OpDelete(holdKey)}, nil)
		if etcdcall.NoSpace(err) {
			// Batched with a grant's Put: the delete alone is served.
			return a.releaseAlone(ctx, r, owned, nil, nil)
		}
		if err != nil {
			return false, a.etcdFailure(ctx, err)
		}
		a.observeHeader(resp.Header)
		return resp.Succeeded, nil
	}
	var out handoffOutcome
	defer func() { a.waiters.settle(w, out) }()
	a.metrics.attempted(w.req.labels)
	resp, err := a.commits.commit(octx, r.key, append(owned,
		clientv3.Compare(clientv3.Value(lockkey.SessionKey(w.session)), "=", w.want)),
		[]clientv3.Op{clientv3.OpPut(holdKey, holdFor(w.req, w.session).Encode(), clientv3.WithLease(clientv3.LeaseID(w.session)))},
		[]clientv3.Op{clientv3.OpTxn(owned, []clientv3.Op{clientv3.OpDelete(holdKey)}, nil)})
	if err != nil {
		// Outcome unknown: the waiter's own attempt finds out, or, if its
		// wait is over, it looks its hold up.
		out.unknown = true
		if !etcdcall.NoSpace(err) {
			return false, a.etcdFailure(ctx, err)
		}
		// etcd takes no Put under its alarm, but a delete: never leave
		// the hold to a client told STORE_FULL, which forgets it.
		return a.releaseAlone(ctx, r, owned, w, &out)
	}
	// A grant committed on a cluster that is not the epoch's is never
	// returned; the waiter's attempt reports the seal.
	sealed := a.observeHeader(resp.Header)
	if !resp.Succeeded {
		return resp.Responses[0].GetResponseTxn().GetSucceeded(), nil
	}
	if tok, err := token.Mint(st.Epoch, resp.Header.Revision); err == nil && !sealed {
		out = handoffOutcome{granted: true, grant: grant{token: tok}}
		a.metrics.handedOff(w.req.labels)
	}
	return true, nil
}
