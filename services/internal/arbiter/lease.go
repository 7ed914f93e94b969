package arbiter

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// revoke ends a session's lease on this cluster, and every hold and queue
// key on it in one committed entry. A lease already gone is no error.
func (a *Arbiter) revoke(ctx context.Context, lease int64) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	if _, err := a.etcd.Revoke(octx, clientv3.LeaseID(lease)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return a.etcdFailure(ctx, err)
	}
	return nil
}
