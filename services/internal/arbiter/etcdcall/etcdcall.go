// Package etcdcall is how the arbiter's packages call etcd: the Etcd
// client interface, a bound on every call (Bound.Ctx, within OpTimeout or
// the call's shared budget) and what a failed call means to the caller
// (Bound.Failure). Every call fails closed within its bound.
package etcdcall

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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
	// ActiveConnection is the client's connection, for the lease
	// renewal streams the arbiter runs itself (clientv3 has no call
	// that renews once on a long-lived stream).
	ActiveConnection() *grpc.ClientConn
}

// Bound bounds the etcd calls of an Arbiter, a Router or the Admin API
// (Ctx) and maps their failures (Failure), so that every call fails
// closed within Timeout.
type Bound struct {
	Timeout time.Duration
	Logger  *slog.Logger
}

// Ctx bounds one etcd call. WithRequireLeader makes a member without a
// leader refuse at once instead of queueing the call until it has one.
func (b Bound) Ctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithDeadline(clientv3.WithRequireLeader(ctx), b.Deadline(ctx))
}

// Deadline is when an etcd call sent now must be answered: Timeout from
// now, or sooner when the call's etcd requests share one deadline
// (WithBudget).
func (b Bound) Deadline(ctx context.Context) time.Time {
	d := time.Now().Add(b.Timeout)
	if until, ok := ctx.Value(budgetKey{}).(time.Time); ok && until.Before(d) {
		return until
	}
	return d
}

// budgetKey marks a call whose etcd requests share one deadline, so the
// call answers within OpTimeout of its start however many requests it
// makes. A value, not a context deadline: Failure still tells the
// caller's own deadline (its answer) from the arbiter's (NO_QUORUM).
type budgetKey struct{}

// WithBudget gives every etcd request made under ctx the deadline until.
func WithBudget(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, budgetKey{}, until)
}
