package arbiter

import (
	"sync/atomic"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthState reports the lock service NOT_SERVING while sealed or
// before the epoch is known.
// It is told the seal state on every etcd response, so it only touches the
// health server when that state changes.
type healthState struct {
	srv  *health.Server
	last atomic.Int32
}

func newHealthState() *healthState {
	h := &healthState{srv: health.NewServer()}
	h.last.Store(-1)
	h.unavailable()
	return h
}

func (h *healthState) set(sealed bool) {
	st := healthpb.HealthCheckResponse_SERVING
	if sealed {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	if h.last.Swap(int32(st)) != int32(st) {
		h.srv.SetServingStatus("", st)
		h.srv.SetServingStatus(lockv1.LockService_ServiceDesc.ServiceName, st)
	}
}

func (h *healthState) unavailable() {
	h.last.Store(-1)
	h.srv.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.srv.SetServingStatus(lockv1.LockService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
}
