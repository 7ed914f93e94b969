package arbiter

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// lockServicePrefix is the full method prefix of lock.v1's calls; the
// Admin API's are not rate-limited (operators, two-person).
var lockServicePrefix = "/" + lockv1.LockService_ServiceDesc.ServiceName + "/"

// callLimit is each identity's rate of lock.v1 calls at this arbiter. Its
// map is bounded (quota.Rates): identities past its cap share one
// limiter.
type callLimit struct {
	rates     *quota.Rates
	perSecond float64
	burst     int
}

// newCallLimit is nil, no limit, when perSecond is zero.
func newCallLimit(perSecond float64, burst int) *callLimit {
	if perSecond == 0 {
		return nil
	}
	return &callLimit{rates: quota.NewRates(perSecond, burst), perSecond: perSecond, burst: burst}
}

// allow refuses a call over its identity's rate with RESOURCE_EXHAUSTED,
// RATE_LIMITED, naming the limit (metadata "limit": calls a second,
// "burst").
func (l *callLimit) allow(ctx context.Context, method string) error {
	if l == nil || !strings.HasPrefix(method, lockServicePrefix) {
		return nil
	}
	caller, err := identity.Caller(ctx)
	if err != nil {
		return nil // the call itself refuses an unauthenticated caller
	}
	if l.rates.Allow(caller.String()) {
		return nil
	}
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
