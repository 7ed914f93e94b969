package arbiter

import (
	"context"
	"fmt"
	"strconv"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// limitedCalls are the lock.v1 calls the rate counts: those that start
// something. A Release or CloseSession refused would leave a hold or a
// session behind (a client that is told no forgets neither at once), so
// ending things is never limited; nor are the Admin API's calls
// (operators, two-person) or a keepalive stream's renewals (one stream a
// session, bounded by the session quota). ValidateToken has a rate of its
// own, per namespace.
var limitedCalls = map[string]bool{
	lockv1.LockService_Acquire_FullMethodName:     true,
	lockv1.LockService_OpenSession_FullMethodName: true,
	lockv1.LockService_Inspect_FullMethodName:     true,
}

// callLimit is each identity's rate of lock.v1 calls at this arbiter. Its
// map is bounded (quota.Rates): identities past its cap share one
// limiter.
type callLimit struct {
	rates     *quota.Rates
	perSecond float64
	burst     int
	// refused counts a refusal (lockplane_refusals_rate_limited_total,
	// by cluster only: the call is refused before its key is read).
	refused func()
}

// newCallLimit is nil, no limit, when perSecond is zero.
func newCallLimit(perSecond float64, burst int, m *metrics, cluster string) *callLimit {
	if perSecond == 0 {
		return nil
	}
	return &callLimit{rates: quota.NewRates(perSecond, burst), perSecond: perSecond, burst: burst,
		refused: func() { m.refused(labels{cluster: cluster}, lockv1.ErrorReason_RATE_LIMITED) }}
}

// allow refuses a call over its identity's rate with RESOURCE_EXHAUSTED,
// RATE_LIMITED, naming the limit (metadata "limit": calls a second,
// "burst").
func (l *callLimit) allow(ctx context.Context, method string) error {
	if l == nil || !limitedCalls[method] {
		return nil
	}
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil // the call itself refuses an unauthenticated caller
	}
	if l.rates.Allow(caller.String()) {
		return nil
	}
	l.refused()
	rate := strconv.FormatFloat(l.perSecond, 'g', -1, 64)
	return refuse.With(codes.ResourceExhausted, lockv1.ErrorReason_RATE_LIMITED,
		fmt.Sprintf("identity %s is over its rate at this arbiter: %s calls a second, bursts of %d (--call-rate, --call-burst)", caller, rate, l.burst),
		"limit", rate, "burst", strconv.Itoa(l.burst))
}

// limited runs next for the calls l allows.
func limited(l *callLimit, next grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	if l == nil {
		return next
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := l.allow(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return next(ctx, req, info, handler)
	}
}
