package arbiter

import (
	"context"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/grpc"
)

// budgetKey marks a call whose etcd requests share one deadline, so the
// call answers within OpTimeout of its start however many requests it
// makes. A value, not a context deadline: etcdFailure still tells the
// caller's own deadline (its answer) from the arbiter's (NO_QUORUM).
type budgetKey struct{}

// withBudget gives every etcd request made under ctx the deadline until.
func withBudget(ctx context.Context, until time.Time) context.Context {
	return context.WithValue(ctx, budgetKey{}, until)
}

// UnaryInterceptor gives each unary call but a waiting Acquire one
// deadline, OpTimeout from its arrival, for all its etcd requests: the
// bound the README states. Serve the arbiter with it
// (grpc.ChainUnaryInterceptor). A waiting Acquire's requests keep a
// deadline each: its wait may outlast any one of them.
func (a *Arbiter) UnaryInterceptor() grpc.UnaryServerInterceptor { return budgeted(a.cfg.OpTimeout) }

// UnaryInterceptor is the Arbiter's, with the OpTimeout every cluster of a
// Router has.
func (ro *Router) UnaryInterceptor() grpc.UnaryServerInterceptor { return budgeted(ro.cfg.OpTimeout) }

// budgeted gives each unary call but a waiting Acquire the budget opTimeout.
func budgeted(opTimeout time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if acq, ok := req.(*lockv1.AcquireRequest); !ok || !acq.GetWait() {
			ctx = withBudget(ctx, time.Now().Add(opTimeout))
		}
		return handler(ctx, req)
	}
}
