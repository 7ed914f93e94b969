package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/token"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Release implements lockv1.LockServiceServer. The delete is conditional on
// the hold still being the grant the token names (created by the token's
// revision, on this session, in this epoch), so a retried or late release
// can never delete a newer holder's hold.
func (a *Arbiter) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	r, err := a.admit(ctx, req.GetKey(), "")
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
	holdKey := lockkey.HoldKey(r.key)
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Txn(octx).If(
		clientv3.Compare(clientv3.CreateRevision(holdKey), "=", t.Revision()),
		clientv3.Compare(clientv3.LeaseValue(holdKey), "=", clientv3.LeaseID(req.GetSessionId())),
		clientv3.Compare(clientv3.ModRevision(lockkey.EpochKey), "=", st.ModRevision),
	).Then(clientv3.OpDelete(holdKey)).Commit()
	if err != nil {
		return nil, a.etcdFailure(ctx, err)
	}
	a.observeHeader(resp.Header)
	if resp.Succeeded {
		a.metrics.released(r.labels)
	}
	return &lockv1.ReleaseResponse{Released: resp.Succeeded}, nil
}
