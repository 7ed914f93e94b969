package arbiter

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is what the arbiter needs of one etcd cluster. *clientv3.Client
// satisfies it; nothing else in the arbiter touches the network to etcd.
type Etcd interface {
	clientv3.KV
	clientv3.Lease
	clientv3.Watcher
	clientv3.Cluster
	Status(ctx context.Context, endpoint string) (*clientv3.StatusResponse, error)
	Endpoints() []string
}

// etcdCalls bounds the etcd calls of an Arbiter or a Router (opCtx) and
// maps their failures (etcdFailure), so that every call fails closed
// within OpTimeout.
type etcdCalls struct {
	timeout time.Duration
	logger  *slog.Logger
}

// opCtx bounds one etcd call. WithRequireLeader makes a member without a
// leader refuse at once instead of queueing the call until it has one.
func (c etcdCalls) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(clientv3.WithRequireLeader(ctx), c.opDeadline(ctx))
}

// opDeadline is when an etcd call sent now must be answered: OpTimeout from
// now, or sooner when the call's etcd requests share one deadline (budget).
func (c etcdCalls) opDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(c.timeout)
	if b, ok := ctx.Value(budgetKey{}).(time.Time); ok && b.Before(d) {
		return b
	}
	return d
}
