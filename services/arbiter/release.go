package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/token"
)

// Release implements lockv1.LockServiceServer. It ends the hold only if it
// is still the grant the token names (last written at the token's
// revision, on this session, in this epoch), so a retried or late release
// can never end a newer holder's hold. When a waiter of this arbiter is at
// the head of the key's queue, the same Txn grants it the key.
func (a *Arbiter) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	r, err := a.admit(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if req.GetToken() == 0 {
		return nil, invalidArgument("token", "is required: the token of the grant to release")
	}
	t := token.Token(req.GetToken())
	st, err := a.epochFor(ctx)
	if err != nil {
		return nil, err
	}
	if t.Epoch() != st.Epoch {
		// Every hold of an earlier epoch was deleted by the advance.
		return &lockv1.ReleaseResponse{Released: false}, nil
	}
	released, err := a.release(ctx, r, req.GetSessionId(), t, st)
	if err != nil {
		return nil, err
	}
	if released {
		a.metrics.released(r.labels)
	}
	return &lockv1.ReleaseResponse{Released: released}, nil
}
