package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
)

// Release implements lockv1.LockServiceServer. It ends the hold only if it
// is still the grant the token names (last written at the token's
// revision, on this session, in this epoch), so a retried or late release
// can never end a newer holder's hold. When a waiter of this arbiter is at
// the head of the key's queue, the same Txn grants it the key. With
// any_token it ends whatever hold the caller's session has on the key
// (releaseAny).
func (a *Arbiter) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	r, err := a.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	return a.releaseAdmitted(ctx, r, req)
}

// releaseAdmitted serves a Release admitted as r (see admitter).
func (a *Arbiter) releaseAdmitted(ctx context.Context, r request, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := releaseArgs(req); err != nil {
		return nil, err
	}
	var released bool
	var err error
	// Whoever the session is: a session ID, an epoch and (by guessing) a
	// token are all learnable, so only the session's owner may end a hold.
	if err := a.requireOwner(ctx, r.caller, req.GetSessionId()); err != nil {
		if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
			// Its holds ended with it: nothing to release, unless the
			// cluster is sealed, which the caller is told.
			if _, err := a.epochFor(ctx); err != nil {
				return nil, err
			}
			return &lockv1.ReleaseResponse{}, nil
		}
		return nil, err
	}
	if req.GetAnyToken() {
		released, err = a.releaseAny(ctx, r, req.GetSessionId())
	} else {
		released, err = a.releaseHold(ctx, r, req.GetSessionId(), token.Token(req.GetToken()))
	}
	if err != nil {
		return nil, err
	}
	if released {
		a.metrics.released(r.labels)
	}
	return &lockv1.ReleaseResponse{Released: released}, nil
}

// releaseHold ends the hold t names for session, if it is still that
// grant in the current epoch.
func (a *Arbiter) releaseHold(ctx context.Context, r request, session int64, t token.Token) (bool, error) {
	st, err := a.epochFor(ctx)
	if err != nil {
		return false, err
	}
	if t.Epoch() != st.Epoch {
		// Every hold of an earlier epoch was deleted by the advance.
		return false, nil
	}
	released, err := a.release(ctx, r, session, t, st)
	if err != nil || released {
		return released, err
	}
	// The Txn compares the epoch record, which a shard map stamp rewrites
	// without changing the epoch: with a cached record that lags, read it
	// again and retry once.
	if err := a.reloadEpoch(ctx); err != nil {
		return false, err
	}
	cur, err := a.epochFor(ctx)
	if err != nil || cur.ModRevision == st.ModRevision || cur.Epoch != t.Epoch() {
		return false, err
	}
	return a.release(ctx, r, session, t, cur)
}
