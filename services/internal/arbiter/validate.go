package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// ValidateToken implements lockv1.LockServiceServer: one linearizable read
// of the hold key and the epoch record, compared with the token. Not atomic with any write the
// caller makes afterwards; see the proto.
func (a *Arbiter) ValidateToken(ctx context.Context, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	r, err := a.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	return a.validateAdmitted(ctx, r, req)
}

// validateAdmitted serves a ValidateToken admitted as r (see admitter).
func (a *Arbiter) validateAdmitted(ctx context.Context, r request, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	if req.GetToken() == 0 {
		return nil, refuse.InvalidArgument("token", "is required: the token the writer presented")
	}
	if ns := lockkey.Namespace(r.key); !a.validations.Allow(ns) {
		a.metrics.refused(r.labels, lockv1.ErrorReason_RATE_LIMITED)
		return nil, refuse.With(codes.ResourceExhausted, lockv1.ErrorReason_RATE_LIMITED,
			"namespace is over its ValidateToken rate; use a conditional write at the resource instead", "namespace", ns)
	}
	a.metrics.validated(r.labels)
	return a.validate(ctx, r, token.Token(req.GetToken()))
}

// validate reads the hold and the epoch record in one Txn, at one
// revision, and answers from that read only: a cached epoch may lag an
// advance, and a token of the old epoch could then match the new hold.
// While the key is held, only the holder's own identity hears more than
// valid or not (heldBy).
func (a *Arbiter) validate(ctx context.Context, r request, t token.Token) (*lockv1.ValidateTokenResponse, error) {
	key := r.key
	// The answer, seal included, comes from this one read, not the cache.
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Txn(octx).Then(clientv3.OpGet(lockkey.HoldKey(key)), clientv3.OpGet(lockkey.EpochKey)).Commit()
	if err != nil {
		return nil, a.etcdFailure(ctx, err)
	}
	holds, recs := resp.Responses[0].GetResponseRange().Kvs, resp.Responses[1].GetResponseRange().Kvs
	st, found := a.cacheRecord(recs, at(resp.Header))
	if sealed := a.observeHeader(resp.Header); sealed || !found || st.Sealed(resp.Header.ClusterId) {
		return nil, a.sealedErr(st)
	}
	out := &lockv1.ValidateTokenResponse{ReadRevision: resp.Header.Revision}
	switch {
	case t.Epoch() < st.Epoch:
		out.State = lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH
	case t.Epoch() > st.Epoch:
		out.State = lockv1.TokenState_TOKEN_STATE_NOT_ISSUED
	case len(holds) == 0:
		out.State = lockv1.TokenState_TOKEN_STATE_ENDED
	case holds[0].ModRevision == t.Revision():
		out.State, out.Valid = lockv1.TokenState_TOKEN_STATE_CURRENT, true
	case holds[0].ModRevision > t.Revision():
		out.State = lockv1.TokenState_TOKEN_STATE_SUPERSEDED
	default:
		// Held without a break since before the token's revision.
		out.State = lockv1.TokenState_TOKEN_STATE_NOT_ISSUED
	}
	if len(holds) > 0 && !heldBy(holds[0].Value, r) {
		// SUPERSEDED against NOT_ISSUED, and the revision, would let
		// anyone find the holder's token by bisection. A free key has no
		// token to find.
		out.ReadRevision = 0
		if !out.Valid {
			out.State = lockv1.TokenState_TOKEN_STATE_NOT_CURRENT
		}
	}
	return out, nil
}

// heldBy reports whether a hold is the caller's identity's.
func heldBy(hold []byte, r request) bool {
	h, err := decodeHold(hold)
	return err == nil && h.Identity == r.caller.String()
}
