package arbiter

import (
	"context"
	"errors"
	"fmt"
	"testing"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Each etcd failure is told apart by what it means for the caller: only
// silence or a lost leader is NO_QUORUM. The errors are etcd's own values,
// in the form clientv3 returns them and in their raw gRPC form.
func TestEtcdFailuresMapToTheirOwnReasons(t *testing.T) {
	a, err := New(Config{Etcd: nilEtcd{}, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		err    error
		code   codes.Code
		reason lockv1.ErrorReason
	}{
		{context.DeadlineExceeded, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrNoLeader, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrGRPCNoLeader, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrLeaderChanged, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrTimeout, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrTimeoutDueToLeaderFail, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrStopped, codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{status.Error(codes.Unavailable, "connection refused"), codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{status.Error(codes.DeadlineExceeded, "context deadline exceeded"), codes.Unavailable, lockv1.ErrorReason_NO_QUORUM},
		{rpctypes.ErrPermissionDenied, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrGRPCPermissionDenied, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrAuthFailed, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrInvalidAuthToken, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrUserEmpty, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrAuthOldRevision, codes.Unavailable, lockv1.ErrorReason_STORE_AUTH},
		{rpctypes.ErrRequestTooLarge, codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE},
		{rpctypes.ErrGRPCRequestTooLarge, codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE},
		{rpctypes.ErrTooManyOps, codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE},
		{status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (3000000 vs. 2097152)"), codes.InvalidArgument, lockv1.ErrorReason_REQUEST_TOO_LARGE},
		{rpctypes.ErrCompacted, codes.Aborted, lockv1.ErrorReason_COMPACTED},
		{rpctypes.ErrGRPCCompacted, codes.Aborted, lockv1.ErrorReason_COMPACTED},
		{rpctypes.ErrNoSpace, codes.Unavailable, lockv1.ErrorReason_STORE_FULL},
		{rpctypes.ErrGRPCNoSpace, codes.Unavailable, lockv1.ErrorReason_STORE_FULL},
		{rpctypes.ErrCorrupt, codes.Unavailable, lockv1.ErrorReason_STORE_ERROR},
		{rpctypes.ErrTooManyRequests, codes.Unavailable, lockv1.ErrorReason_STORE_ERROR},
		{errors.New("something else"), codes.Unavailable, lockv1.ErrorReason_STORE_ERROR},
	} {
		got := a.etcdFailure(context.Background(), c.err)
		if reason.Of(got) != c.reason || status.Code(got) != c.code {
			t.Errorf("%v: %s/%s, want %s/%s", c.err, status.Code(got), reason.Of(got), c.code, c.reason)
		}
	}
	// NOSPACE is etcd's refusal of the request it answers, yet an earlier
	// send of that write may have been applied (its answer lost, the retry
	// refused under the alarm it raised): STORE_FULL is no answer to a
	// grant until the hold is looked up (grantFailed; nospace tests).
	for _, c := range []struct {
		err     error
		noSpace bool
	}{
		{rpctypes.ErrNoSpace, true}, {rpctypes.ErrGRPCNoSpace, true}, {fmt.Errorf("wrapped: %w", rpctypes.ErrNoSpace), true},
		{rpctypes.ErrRequestTooLarge, false}, {rpctypes.ErrGRPCNoLeader, false}, {context.DeadlineExceeded, false}, {nil, false},
	} {
		if got := etcdcall.NoSpace(c.err); got != c.noSpace {
			t.Errorf("etcdcall.NoSpace(%v) = %v, want %v", c.err, got, c.noSpace)
		}
	}
	// The caller's own deadline is the caller's answer, whatever etcd said.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := a.etcdFailure(ctx, rpctypes.ErrPermissionDenied); status.Code(got) != codes.Canceled {
		t.Errorf("with the caller gone: %v, want CANCELED", got)
	}
}

// nilEtcd is an Etcd for tests that make no etcd call.
type nilEtcd struct{ Etcd }
