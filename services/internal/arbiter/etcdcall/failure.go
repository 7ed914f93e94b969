package etcdcall

import (
	"context"
	"errors"
	"fmt"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Failure maps an etcd call's failure. When the caller's own context
// ended, that is the answer; otherwise etcdReason says what etcd's answer
// (or its silence within the arbiter's bound) means. Every one fails closed.
func (b Bound) Failure(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	code, r, msg := etcdReason(err)
	if r == lockv1.ErrorReason_NO_QUORUM {
		msg = fmt.Sprintf("%s within %s; its outcome is unknown", msg, b.Timeout)
	}
	b.Logger.Warn("etcd call failed; failing closed", "reason", r.String(), "err", err)
	return refuse.With(code, r, msg)
}

// etcdReason classifies an etcd client error. Only silence, a lost leader
// or an unreachable cluster is NO_QUORUM; etcd refusing the arbiter's
// credentials, the request's size, a compacted revision or a full disk are
// not, and retrying through another arbiter would not help either.
func etcdReason(err error) (codes.Code, lockv1.ErrorReason, string) {
	quorum := func(what string) (codes.Code, lockv1.ErrorReason, string) {
		return codes.Unavailable, lockv1.ErrorReason_NO_QUORUM, what
	}
	// clientv3 returns etcd's own refusals as rpctypes.EtcdError values;
	// Error also converts one still in its gRPC form.
	switch e := rpctypes.Error(err); {
	case errors.Is(e, context.DeadlineExceeded):
		return quorum("no etcd quorum confirmed the request")
	case errors.Is(e, context.Canceled):
		return quorum("the etcd call was cut off")
	case errors.Is(e, rpctypes.ErrNoLeader), errors.Is(e, rpctypes.ErrNotLeader), errors.Is(e, rpctypes.ErrLeaderChanged),
		errors.Is(e, rpctypes.ErrTimeout), errors.Is(e, rpctypes.ErrTimeoutDueToLeaderFail),
		errors.Is(e, rpctypes.ErrTimeoutDueToConnectionLost), errors.Is(e, rpctypes.ErrTimeoutWaitAppliedIndex),
		errors.Is(e, rpctypes.ErrStopped), errors.Is(e, rpctypes.ErrUnhealthy), errors.Is(e, rpctypes.ErrNotCapable):
		return quorum("etcd has no leader or lost it (" + etcdDesc(e) + ")")
	case errors.Is(e, rpctypes.ErrPermissionDenied), errors.Is(e, rpctypes.ErrAuthFailed), errors.Is(e, rpctypes.ErrInvalidAuthToken),
		errors.Is(e, rpctypes.ErrUserEmpty), errors.Is(e, rpctypes.ErrUserNotFound), errors.Is(e, rpctypes.ErrRoleNotGranted),
		errors.Is(e, rpctypes.ErrPermissionNotGranted), errors.Is(e, rpctypes.ErrAuthOldRevision), errors.Is(e, rpctypes.ErrAuthNotEnabled):
		return codes.Unavailable, lockv1.ErrorReason_STORE_AUTH,
			"etcd refused the arbiter's credentials or role (" + etcdDesc(e) + "); an operator must fix the arbiter's etcd user"
	case errors.Is(e, rpctypes.ErrRequestTooLarge), errors.Is(e, rpctypes.ErrTooManyOps):
		return codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE,
			"etcd refused the request as too large (" + etcdDesc(e) + "); the same request cannot succeed"
	case errors.Is(e, rpctypes.ErrCompacted):
		return codes.Aborted, lockv1.ErrorReason_COMPACTED, "a revision the arbiter read from was compacted; retry"
	case errors.Is(e, rpctypes.ErrNoSpace):
		return codes.Unavailable, lockv1.ErrorReason_STORE_FULL,
			"etcd is out of space (NOSPACE alarm) and takes no writes until an operator compacts, defragments and disarms it"
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return codes.Unavailable, lockv1.ErrorReason_STORE_ERROR, "etcd failed the request (" + ee.Error() + "); its outcome is unknown"
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.DeadlineExceeded:
			return quorum("no etcd quorum confirmed the request")
		case codes.Unavailable, codes.Canceled:
			// No member reachable, or the connection closed under the call.
			return quorum("no etcd member answered")
		case codes.ResourceExhausted:
			// gRPC's own message size limit, before etcd saw the request.
			return codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE,
				"the request exceeds the etcd connection's message size limit; the same request cannot succeed"
		}
	}
	return codes.Unavailable, lockv1.ErrorReason_STORE_ERROR, "etcd failed the request (" + err.Error() + "); its outcome is unknown"
}

// NoSpace reports whether err is etcd's NOSPACE refusal. It is definite
// for the request etcd refused, yet a write answered so may have been
// applied: the client's retry of a request whose answer was lost meets
// the alarm that the first send's own write raised. A caller whose write
// must not be left behind unknown looks it up: etcd's capped applier
// (etcd 3.6, server/etcdserver/apply) refuses only a Put, a Txn with a
// Put in either branch and a lease grant, so reads and deletes are served
// under the alarm.
func NoSpace(err error) bool {
	return errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace)
}

// NoSpaceUnknown is the answer to a write refused with NOSPACE whose
// effect could not be looked up (lookupErr): STORE_ERROR, an outcome
// unknown, so that the client ends whatever the write may have left
// (Release with any_token, a delete, which etcd serves under the alarm),
// never STORE_FULL, after which it would not.
func (b Bound) NoSpaceUnknown(lookupErr error) error {
	b.Logger.Warn("a write refused with NOSPACE may have been applied, and the lookup failed; its outcome is unknown", "err", lookupErr)
	return refuse.With(codes.Unavailable, lockv1.ErrorReason_STORE_ERROR,
		"etcd is out of space (NOSPACE alarm), and whether an earlier send of this write was applied could not be looked up; "+
			"its outcome is unknown: end any hold it may have left on the key (Release with any_token)")
}

// etcdDesc is etcd's own description of one of its errors.
func etcdDesc(err error) string {
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Error()
	}
	return err.Error()
}
