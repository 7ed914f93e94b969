// Package reason is the error convention of the Lockplane APIs: a gRPC
// status whose google.rpc.ErrorInfo has domain Domain and one of
// lockv1.ErrorReason's names as its reason. Servers build errors with New;
// clients branch on Of, never on message text.
package reason

import (
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Domain is the google.rpc.ErrorInfo domain of every Lockplane error.
const Domain = "lock.lockplane.io"

// New builds a status error carrying reason r and metadata given as
// key, value pairs. Messages may name keys and fields, never tokens.
func New(code codes.Code, r lockv1.ErrorReason, msg string, meta ...string) error {
	info := &errdetails.ErrorInfo{Domain: Domain, Reason: r.String()}
	if len(meta) > 0 {
		info.Metadata = map[string]string{}
		for i := 0; i+1 < len(meta); i += 2 {
			info.Metadata[meta[i]] = meta[i+1]
		}
	}
	st, err := status.New(code, msg).WithDetails(info)
	if err != nil {
		return status.Error(code, msg)
	}
	return st.Err()
}

// Of is the Lockplane reason of err, or ERROR_REASON_UNSPECIFIED.
func Of(err error) lockv1.ErrorReason {
	r, _ := Info(err)
	return r
}

// Info is the reason of err and its metadata.
func Info(err error) (lockv1.ErrorReason, map[string]string) {
	st, ok := status.FromError(err)
	if !ok {
		return lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == Domain {
			return lockv1.ErrorReason(lockv1.ErrorReason_value[info.Reason]), info.Metadata
		}
	}
	return lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, nil
}
