package arbiter

import (
	"context"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// releaseArgs checks a ReleaseRequest's token against any_token: a token
// names one grant; any_token, with token 0, any hold of the session.
func releaseArgs(req *lockv1.ReleaseRequest) error {
	switch {
	case req.GetAnyToken() && req.GetToken() != 0:
		return refuse.InvalidArgument("token", "must be 0 with any_token, which ends whatever hold the session has on the key")
	case !req.GetAnyToken() && req.GetToken() == 0:
		return refuse.InvalidArgument("token", "is required: the token of the grant to release (or any_token)")
	}
	return nil
}

// releaseAny ends whatever hold session has on r's key, and for a durable
// class the session's queue key for it (ReleaseRequest.any_token): how a
// client cleans up after an Acquire whose outcome it never learned, and so
// whose token it does not know.
//
// It is safe without a token because the client serialises Lock and
// Release per key per session: while it cleans up, no other Hold of this
// session on this key can exist, and re-entrancy is counted in the client
// (ADR-13), so the session's hold on the key, if any, is the one in doubt.
// A session ID is no secret (Inspect reports it), so the session record is
// read and must be the caller's; the Txn compares it unchanged, the hold's
// lease, and that the hold (and the queue key) was written no later than
// that read: a cleanup that lands late, after the client retried it and
// was granted the key again, cannot end the newer grant. No handoff: the
// head waiter's watch sees the delete.
func (a *Arbiter) releaseAny(ctx context.Context, r request, session int64) (bool, error) {
	sessKey, holdKey := lockkey.SessionKey(session), lockkey.HoldKey(r.key)
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	get, err := a.etcd.Get(octx, sessKey)
	if err != nil {
		return false, a.etcdFailure(ctx, err)
	}
	a.observeHeader(get.Header)
	if len(get.Kvs) == 0 {
		return false, nil // the session ended, and its holds and queue keys with its lease
	}
	if rec, err := decodeSession(get.Kvs[0].Value); err != nil || rec.Identity != r.caller.String() {
		return false, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_SESSION_NOT_OWNED, "the session belongs to another identity")
	}
	a.anyTokenReadHook(r.key, session)
	upTo := get.Header.Revision + 1
	ops := []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{
		clientv3.Compare(clientv3.LeaseValue(holdKey), "=", clientv3.LeaseID(session)),
		clientv3.Compare(clientv3.ModRevision(holdKey), "<", upTo),
	}, []clientv3.Op{clientv3.OpDelete(holdKey)}, nil)}
	if r.class.Durable() {
		waitKey := lockkey.WaitKey(r.key, session)
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(waitKey), ">", 0),
			clientv3.Compare(clientv3.CreateRevision(waitKey), "<", upTo),
		}, []clientv3.Op{clientv3.OpDelete(waitKey)}, nil))
	}
	resp, err := a.etcd.Txn(octx).
		If(clientv3.Compare(clientv3.Value(sessKey), "=", string(get.Kvs[0].Value))).
		Then(ops...).Commit()
	if err != nil {
		return false, a.etcdFailure(ctx, err)
	}
	a.observeHeader(resp.Header)
	// Else: the session ended since the read, and its hold with it.
	return resp.Succeeded && resp.Responses[0].GetResponseTxn().GetSucceeded(), nil
}
