package arbiter

import (
	"context"
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

// opCtx bounds one etcd call. WithRequireLeader makes a member without a
// leader refuse at once instead of queueing the call until it has one.
func (a *Arbiter) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(clientv3.WithRequireLeader(ctx), a.opDeadline(ctx))
}

// opDeadline is when an etcd call sent now must be answered: OpTimeout from
// now, or sooner when the call's etcd requests share one deadline (budget).
func (a *Arbiter) opDeadline(ctx context.Context) time.Time {
	d := time.Now().Add(a.cfg.OpTimeout)
	if b, ok := ctx.Value(budgetKey{}).(time.Time); ok && b.Before(d) {
		return b
	}
	return d
}
