// Package refuse builds the lock and Admin APIs' refusals.
//
// Each is a gRPC status carrying an ErrorReason (see package reason): the lock
// core (services/internal/arbiter) and the Admin API
// (services/internal/arbiter/admin) refuse in the same words.
package refuse

import (
	"fmt"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"google.golang.org/grpc/codes"
)

// With builds an API error; see package reason.
func With(code codes.Code, r lockv1.ErrorReason, msg string, meta ...string) error {
	return reason.New(code, r, msg, meta...)
}

// InvalidArgument refuses a request's field that breaks rule.
func InvalidArgument(field, rule string) error {
	return With(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
		fmt.Sprintf("%s: %s", field, rule), "field", field)
}
