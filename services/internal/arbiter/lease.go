package arbiter

import (
	"context"
	"errors"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// revoke ends a session's lease on this cluster, and every hold and queue
// key on it in one committed entry. A lease already gone is no error.
func (a *Arbiter) revoke(ctx context.Context, lease int64) error {
	return a.revokeAs(ctx, a.etcd, lease)
}

// revokeAs is revoke through the client of one etcd user: a force-release
// revokes a session as the Admin API's user (etcdauth.AdminSessions).
func (a *Arbiter) revokeAs(ctx context.Context, cli clientv3.Lease, lease int64) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	if _, err := cli.Revoke(octx, clientv3.LeaseID(lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return a.etcdFailure(ctx, err)
	}
	return nil
}

// closeLease ends a session's lease on this cluster as a close: it first
// puts the closing mark on the lease, so the revoke that follows deletes
// it with the holds and the log says the session was closed, not expired
// (services/audit). If the mark fails for any reason but a lease
// already gone, nothing is revoked and the caller may retry; a mark with
// no revoke after it still ends as a close when the lease expires.
func (a *Arbiter) closeLease(ctx context.Context, lease int64) error {
	octx, cancel := a.opCtx(ctx)
	_, err := a.etcd.Put(octx, lockkey.ClosingKey(lease), "", clientv3.WithLease(clientv3.LeaseID(lease)))
	cancel()
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	if err != nil {
		return a.etcdFailure(ctx, err)
	}
	return a.revoke(ctx, lease)
}

// renewLease renews lease once and returns the TTL etcd granted, refused
// as every renewal is: a lease gone, or revoked by a force-release, is its
// session's end, and a sealed cluster renews nothing. checked runs after
// the force-release check, before anything is renewed: a session's
// renewal checks its owner there. failed reports an error of etcd's (no
// quorum, a store error), as against a refusal.
func (a *Arbiter) renewLease(ctx context.Context, lease int64, checked func() error) (ttl int64, failed bool, err error) {
	// A force-release that revoked the session deleted its record, so an
	// owner check would not see it, and the lease revoke that followed may
	// have failed: refused, and the lease revoked again.
	if id := a.forced.revokedBy(lease); id != "" {
		a.discardLease(clientv3.LeaseID(lease))
		return 0, false, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED, "the session was revoked by force-release request "+id)
	}
	if checked != nil {
		if err := checked(); err != nil {
			return 0, false, err
		}
	}
	// A restored cluster's leases are as suspect as its holds: renewing them
	// would keep alive grants the epoch advance is about to delete.
	if a.epochs.sealed() {
		st, _ := a.epochs.get()
		return 0, false, a.sealedErr(st)
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	ka, err := a.renewer.renew(octx, clientv3.LeaseID(lease))
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		return 0, false, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED, "the session has expired")
	case err != nil:
		return 0, true, a.etcdFailure(ctx, err)
	}
	if a.observeHeader(ka.ResponseHeader) {
		st, _ := a.epochs.get()
		return 0, false, a.sealedErr(st)
	}
	return ka.TTL, false, nil
}
