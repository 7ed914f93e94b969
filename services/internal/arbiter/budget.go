package arbiter

import (
	"context"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"google.golang.org/grpc"
)

// UnaryInterceptor gives each unary call but a waiting Acquire one
// deadline, OpTimeout from its arrival, for all its etcd requests: the
// bound the README states. Serve the arbiter with it
// (grpc.ChainUnaryInterceptor). A waiting Acquire's requests keep a
// deadline each: its wait may outlast any one of them.
// Each call is first counted against its identity's rate (Config.CallRate).
// Call it once per server: each call makes a limiter of its own.
// Before either, a call from the trusted proxy (Config.TrustedProxy) is
// made the forwarded caller's.
func (a *Arbiter) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return caller.Trusting(a.cfg.TrustedProxy, a.cfg.IsOperator).Unary(
		limited(newCallLimit(a.cfg.CallRate, a.cfg.CallBurst, a.metrics, a.cfg.Cluster), budgeted(a.cfg.OpTimeout)))
}

// StreamInterceptor makes a keepalive stream from the trusted proxy the
// forwarded caller's.
func (a *Arbiter) StreamInterceptor() grpc.StreamServerInterceptor {
	return caller.Trusting(a.cfg.TrustedProxy, a.cfg.IsOperator).Stream()
}

// UnaryInterceptor is the Arbiter's, with the OpTimeout every cluster of a
// Router has.
func (ro *Router) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return caller.Trusting(ro.cfg.TrustedProxy, ro.cfg.IsOperator).Unary(
		limited(newCallLimit(ro.cfg.CallRate, ro.cfg.CallBurst, ro.metrics, ro.cfg.Cluster), budgeted(ro.cfg.OpTimeout)))
}

// StreamInterceptor is the Arbiter's.
func (ro *Router) StreamInterceptor() grpc.StreamServerInterceptor {
	return caller.Trusting(ro.cfg.TrustedProxy, ro.cfg.IsOperator).Stream()
}

// budgeted gives each unary call but a waiting Acquire the budget opTimeout.
func budgeted(opTimeout time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if acq, ok := req.(*lockv1.AcquireRequest); !ok || !acq.GetWait() {
			ctx = etcdcall.WithBudget(ctx, time.Now().Add(opTimeout))
		}
		return handler(ctx, req)
	}
}
