package lockclient

import (
	"context"
	"errors"
	"testing"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Which failed calls may have taken effect, and so need a cleanup.
func TestOutcomeUnknown(t *testing.T) {
	refused := func(c codes.Code, r lockv1.ErrorReason) error { return reason.New(c, r, "test") }
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"no quorum", refused(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM), true},
		{"store error", refused(codes.Unavailable, lockv1.ErrorReason_STORE_ERROR), true},
		{"deadline, no answer", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), true},
		{"canceled", status.Error(codes.Canceled, "context canceled"), true},
		{"transport", status.Error(codes.Unavailable, "connection refused"), true},
		{"context error", context.DeadlineExceeded, true},
		{"other error", errors.New("x"), true},
		{"contended", refused(codes.Aborted, lockv1.ErrorReason_CONTENDED), false},
		{"contended at the deadline", refused(codes.DeadlineExceeded, lockv1.ErrorReason_CONTENDED), false},
		{"permission denied", refused(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED), false},
		{"invalid key", refused(codes.InvalidArgument, lockv1.ErrorReason_INVALID_KEY), false},
		{"invalid argument", refused(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT), false},
		{"quota", refused(codes.ResourceExhausted, lockv1.ErrorReason_QUOTA_EXCEEDED), false},
		{"wrong region", refused(codes.FailedPrecondition, lockv1.ErrorReason_WRONG_REGION), false},
		{"sealed", refused(codes.FailedPrecondition, lockv1.ErrorReason_SEALED), false},
		{"moving", refused(codes.Unavailable, lockv1.ErrorReason_MOVING), false},
		{"draining", refused(codes.Unavailable, lockv1.ErrorReason_DRAINING), false},
		{"session expired", refused(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED), false},
		{"leaked", refused(codes.FailedPrecondition, lockv1.ErrorReason_LEAKED), false},
		{"nil", nil, false},
	} {
		if got := outcomeUnknown(tc.err); got != tc.unknown {
			t.Errorf("%s: outcomeUnknown = %v, want %v", tc.name, got, tc.unknown)
		}
	}
}
