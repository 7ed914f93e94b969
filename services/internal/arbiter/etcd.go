package arbiter

import (
	"context"
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
)

// Etcd is what the arbiter needs of one etcd cluster (etcdcall.Etcd).
// *clientv3.Client satisfies it.
type Etcd = etcdcall.Etcd

// etcdCalls bounds the etcd calls of an Arbiter or a Router (opCtx) and
// maps their failures (etcdFailure), so that every call fails closed
// within OpTimeout; see etcdcall.Bound.
type etcdCalls struct{ bound etcdcall.Bound }

func newEtcdCalls(cfg Config) etcdCalls {
	return etcdCalls{bound: etcdcall.Bound{Timeout: cfg.OpTimeout, Logger: cfg.Logger}}
}

// opCtx bounds one etcd call (etcdcall.Bound.Ctx).
func (c etcdCalls) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return c.bound.Ctx(ctx)
}

// opDeadline is when an etcd call sent now must be answered
// (etcdcall.Bound.Deadline).
func (c etcdCalls) opDeadline(ctx context.Context) time.Time { return c.bound.Deadline(ctx) }

// etcdFailure maps an etcd call's failure (etcdcall.Bound.Failure).
func (c etcdCalls) etcdFailure(ctx context.Context, err error) error {
	return c.bound.Failure(ctx, err)
}
