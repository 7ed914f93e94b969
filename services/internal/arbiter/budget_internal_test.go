package arbiter

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/grpc"
)

// A unary call's etcd requests share one deadline, OpTimeout from its
// arrival, so a call making several answers within the same bound as one
// making one; a waiting Acquire's requests keep one OpTimeout each.
func TestAUnaryCallsEtcdRequestsShareOneDeadline(t *testing.T) {
	a, err := New(Config{Etcd: nilEtcd{}, OpTimeout: time.Hour, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	// late is how long after the call began its second request's deadline
	// falls past OpTimeout.
	late := func(req any) (d time.Duration) {
		a.UnaryInterceptor()(context.Background(), req, &grpc.UnaryServerInfo{}, func(ctx context.Context, _ any) (any, error) {
			entered := time.Now()
			// A first request that took some of the call's time (a stand-in
			// for a request, not a synchronisation)...
			time.Sleep(10 * time.Millisecond)
			// ...leaves the next only what remains.
			octx, cancel := a.opCtx(ctx)
			defer cancel()
			dl, _ := octx.Deadline()
			d = dl.Sub(entered) - time.Hour
			return nil, nil
		})
		return d
	}
	if d := late(&lockv1.InspectRequest{}); d > 0 {
		t.Fatalf("a second etcd request of a call got its own OpTimeout: its deadline is %s past the call's", d)
	}
	if d := late(&lockv1.AcquireRequest{Wait: true}); d < 10*time.Millisecond {
		t.Fatalf("a waiting Acquire's request was held to the call's start (%s past it)", d)
	}
	start := time.Now()
	// Without the interceptor (a call served otherwise), each request has
	// its own OpTimeout: the bound then is per request.
	octx, cancel := a.opCtx(context.Background())
	defer cancel()
	if d, ok := octx.Deadline(); !ok || d.Before(start.Add(time.Hour)) {
		t.Fatalf("a request outside any call has deadline %v, want OpTimeout from now", d)
	}
}
