package arbiter

import (
	"context"

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
	return context.WithTimeout(clientv3.WithRequireLeader(ctx), a.cfg.OpTimeout)
}
