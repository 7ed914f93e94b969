package arbiter

import (
	"context"
	"sync"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/token"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
)

// ValidateToken implements lockv1.LockServiceServer: one linearizable read
// of the hold key, compared with the token. Not atomic with any write the
// caller makes afterwards; see the proto.
func (a *Arbiter) ValidateToken(ctx context.Context, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	r, err := a.admit(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	if req.GetToken() == 0 {
		return nil, invalidArgument("token", "is required: the token the writer presented")
	}
	if !a.validations.allow(r.labels.namespace) {
		a.metrics.refused(r.labels, lockv1.ErrorReason_RATE_LIMITED)
		return nil, refusal(codes.ResourceExhausted, lockv1.ErrorReason_RATE_LIMITED,
			"namespace is over its ValidateToken rate; use a conditional write at the resource instead", "namespace", r.labels.namespace)
	}
	a.metrics.validated(r.labels)
	st, err := a.epochFor(ctx)
	if err != nil {
		return nil, err
	}
	t := token.Token(req.GetToken())
	resp, err := a.readHold(ctx, r.key)
	if err != nil {
		return nil, err
	}
	out := &lockv1.ValidateTokenResponse{ReadRevision: resp.Header.Revision}
	switch {
	case t.Epoch() < st.Epoch:
		out.State = lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH
	case t.Epoch() > st.Epoch:
		out.State = lockv1.TokenState_TOKEN_STATE_NOT_ISSUED
	case len(resp.Kvs) == 0:
		out.State = lockv1.TokenState_TOKEN_STATE_ENDED
	case resp.Kvs[0].ModRevision == t.Revision():
		out.State, out.Valid = lockv1.TokenState_TOKEN_STATE_CURRENT, true
	case resp.Kvs[0].ModRevision > t.Revision():
		out.State = lockv1.TokenState_TOKEN_STATE_SUPERSEDED
	default:
		// Held without a break since before the token's revision.
		out.State = lockv1.TokenState_TOKEN_STATE_NOT_ISSUED
	}
	return out, nil
}

// limiters rate-limits a call per namespace.
type limiters struct {
	mu    sync.Mutex
	rate  rate.Limit
	burst int
	by    map[string]*rate.Limiter
}

func newLimiters(perSecond float64, burst int) *limiters {
	return &limiters{rate: rate.Limit(perSecond), burst: burst, by: map[string]*rate.Limiter{}}
}

func (l *limiters) allow(namespace string) bool {
	l.mu.Lock()
	lim, ok := l.by[namespace]
	if !ok {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.by[namespace] = lim
	}
	l.mu.Unlock()
	return lim.Allow()
}
