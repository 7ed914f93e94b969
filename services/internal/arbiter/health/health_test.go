package health

import (
	"context"
	"testing"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// EpochKnown tells a sealed arbiter (its epoch read) from one that has
// read nothing, which the lock service's NOT_SERVING alone does not: a DR
// stack's readiness passes the first and must refuse the second.
func TestEpochKnownTellsSealedFromUnread(t *testing.T) {
	h := New()
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		r, err := h.srv.Check(context.Background(), &healthpb.HealthCheckRequest{Service: EpochKnown})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	for _, step := range []struct {
		do   func()
		want healthpb.HealthCheckResponse_ServingStatus
		what string
	}{
		{func() {}, healthpb.HealthCheckResponse_NOT_SERVING, "before the epoch is read"},
		{func() { h.Set(true) }, healthpb.HealthCheckResponse_SERVING, "sealed"},
		{func() { h.Unavailable() }, healthpb.HealthCheckResponse_NOT_SERVING, "unavailable again"},
		{func() { h.Set(false) }, healthpb.HealthCheckResponse_SERVING, "serving"},
	} {
		step.do()
		if got := status(); got != step.want {
			t.Errorf("%s: %s is %s, want %s", step.what, EpochKnown, got, step.want)
		}
	}
}
