package arbiter

import (
	"context"
	"errors"
	"fmt"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/reason"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// refusal builds an API error; see package reason.
func refusal(code codes.Code, r lockv1.ErrorReason, msg string, meta ...string) error {
	return reason.New(code, r, msg, meta...)
}

func invalidArgument(field, rule string) error {
	return refusal(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
		fmt.Sprintf("%s: %s", field, rule), "field", field)
}

// etcdFailure maps an etcd call's failure. When the caller's own context
// ended, that is the answer; otherwise the cluster did not confirm the call
// within the arbiter's bound, which is treated as quorum loss: fail closed.
func (a *Arbiter) etcdFailure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Canceled && !errors.Is(err, context.Canceled) {
		return refusal(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM, "etcd connection closed")
	}
	a.log.Warn("etcd call failed; failing closed", "err", err)
	return refusal(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM,
		fmt.Sprintf("no etcd quorum confirmed the request within %s; its outcome is unknown", a.cfg.OpTimeout))
}
