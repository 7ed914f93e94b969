package lockclient

import (
	"context"
	"sync"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// quietTable refuses the first grants EPOCH_CHANGED with retry_after, as
// the arbiter does during an epoch advance's quiet period, then grants.
type quietTable struct {
	*grantTable
	mu      sync.Mutex
	refuse  int
	wait    time.Duration
	refused []time.Time // when each refusal was answered
	granted time.Time
}

func (q *quietTable) Acquire(ctx context.Context, in *lockv1.AcquireRequest, o ...grpc.CallOption) (*lockv1.AcquireResponse, error) {
	q.mu.Lock()
	if len(q.refused) < q.refuse {
		q.refused = append(q.refused, time.Now())
		q.mu.Unlock()
		return nil, reason.New(codes.Unavailable, lockv1.ErrorReason_EPOCH_CHANGED,
			"the cluster's epoch was advanced: grants resume after the quiet period", "retry_after", q.wait.String(), "cluster", "c")
	}
	q.granted = time.Now()
	q.mu.Unlock()
	return q.grantTable.Acquire(ctx, in, o...)
}

// A waiting Lock rides out an epoch advance's quiet period: it retries
// EPOCH_CHANGED, no sooner than the refusal's retry_after, and is granted;
// TryLock reports the refusal with its retry_after.
func TestALockWaitsOutTheQuietPeriod(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := &quietTable{grantTable: &grantTable{held: map[string]uint64{}}, refuse: 1, wait: 300 * time.Millisecond}
	s, err := openSession(ctx, api, "c", "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.lease.end(false) // the table has no CloseSession

	_, err = s.TryLock(ctx, "ns/k", func(*Hold) {})
	if r, meta := reason.Info(err); r != lockv1.ErrorReason_EPOCH_CHANGED || meta["retry_after"] != api.wait.String() {
		t.Fatalf("TryLock during the quiet period: %v, want EPOCH_CHANGED with retry_after %s", err, api.wait)
	}

	api.mu.Lock()
	api.refuse = 2 // one more refusal, for the waiting Lock
	api.mu.Unlock()
	h, err := s.Lock(ctx, "ns/k", func(*Hold) {})
	if err != nil {
		t.Fatalf("a waiting Lock during the quiet period: %v, want it granted after retry_after", err)
	}
	defer h.Release(ctx)
	api.mu.Lock()
	defer api.mu.Unlock()
	if early := api.wait - api.granted.Sub(api.refused[1]); early > 0 {
		t.Fatalf("the Lock asked again %s before the refusal's retry_after of %s", early, api.wait)
	}
}
