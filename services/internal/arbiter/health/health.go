// Package health is the arbiter's gRPC health service: the lock service
// is NOT_SERVING while its cluster is sealed or before its epoch is known.
// The lock core tells it the seal state (Set, Unavailable); it touches the
// gRPC health server only when that state changes.
package health

import (
	"sync/atomic"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/grpc"
	grpchealth "google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// State reports the lock service NOT_SERVING while sealed or before the
// epoch is known. It is told the seal state on every etcd response, so it
// only touches the health server when that state changes.
type State struct {
	srv  *grpchealth.Server
	last atomic.Int32
}

// New is a State that reports NOT_SERVING until told otherwise.
func New() *State {
	h := &State{srv: grpchealth.NewServer()}
	h.last.Store(-1)
	h.Unavailable()
	return h
}

// Register adds the health service to s.
func (h *State) Register(s grpc.ServiceRegistrar) { healthpb.RegisterHealthServer(s, h.srv) }

// EpochKnown is the health service name that is SERVING once the arbiter
// has read its cluster's epoch record, sealed or not: what tells a sealed
// arbiter (a restored cluster waiting for its advance) from one that
// cannot read etcd, which the lock service's NOT_SERVING does not.
const EpochKnown = "lockplane.epoch"

// Set reports SERVING, or NOT_SERVING when sealed.
func (h *State) Set(sealed bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if sealed {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if h.last.Swap(int32(st)) != int32(st) {
		h.srv.SetServingStatus("", st)
		h.srv.SetServingStatus(lockv1.LockService_ServiceDesc.ServiceName, st)
		h.srv.SetServingStatus(EpochKnown, healthpb.HealthCheckResponse_SERVING)
	}
}

// Unavailable reports NOT_SERVING until the next Set: the epoch is not
// known.
func (h *State) Unavailable() {
	h.last.Store(-1)
	h.srv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.srv.SetServingStatus(lockv1.LockService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	h.srv.SetServingStatus(EpochKnown, healthpb.HealthCheckResponse_NOT_SERVING)
}
