package lockclient

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"
)

// grantTable is a lock service in memory: each key's current grant. Only
// for this unit test of the client's own bookkeeping; the service itself
// is tested against etcd.
type grantTable struct {
	lockv1.LockServiceClient
	mu   sync.Mutex
	held map[string]uint64
	next uint64
}

func (g *grantTable) OpenSession(context.Context, *lockv1.OpenSessionRequest, ...grpc.CallOption) (*lockv1.OpenSessionResponse, error) {
	return &lockv1.OpenSessionResponse{SessionId: 7, Ttl: durationpb.New(time.Minute)}, nil
}

func (g *grantTable) KeepAlive(context.Context, ...grpc.CallOption) (grpc.BidiStreamingClient[lockv1.KeepAliveRequest, lockv1.KeepAliveResponse], error) {
	return &echoKeepAlive{reqs: make(chan *lockv1.KeepAliveRequest, 1)}, nil
}

func (g *grantTable) Acquire(_ context.Context, in *lockv1.AcquireRequest, _ ...grpc.CallOption) (*lockv1.AcquireResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.next++
	g.held[in.Key] = g.next
	return &lockv1.AcquireResponse{Token: &lockv1.Token{Value: g.next}}, nil
}

func (g *grantTable) Release(_ context.Context, in *lockv1.ReleaseRequest, _ ...grpc.CallOption) (*lockv1.ReleaseResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held[in.Key] == in.Token {
		delete(g.held, in.Key)
		return &lockv1.ReleaseResponse{Released: true}, nil
	}
	return &lockv1.ReleaseResponse{}, nil
}

func (g *grantTable) current(key string) (uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t, ok := g.held[key]
	return t, ok
}

// echoKeepAlive renews every session for a minute.
type echoKeepAlive struct {
	grpc.ClientStream
	reqs chan *lockv1.KeepAliveRequest
}

func (e *echoKeepAlive) Send(r *lockv1.KeepAliveRequest) error { e.reqs <- r; return nil }
func (e *echoKeepAlive) Recv() (*lockv1.KeepAliveResponse, error) {
	r := <-e.reqs
	return &lockv1.KeepAliveResponse{SessionId: r.SessionId, Ttl: durationpb.New(time.Minute)}, nil
}

// Nested Locks and the outermost Release race on one key of one session:
// a Hold that can start must always be the service's current grant, and no
// interleaving may end a key's state twice.
func TestNestedLocksRacingTheLastReleaseNeverShareAnEndedGrant(t *testing.T) {
	api := &grantTable{held: map[string]uint64{}}
	s, err := openSession(context.Background(), api, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := 0; i < 3000 && bad.Load() == 0; i++ {
				h, err := s.Lock(context.Background(), "k", func(*Hold) {})
				if err != nil {
					t.Error(err)
					return
				}
				if tok, held := api.current("k"); h.CanStart() && (!held || tok != uint64(h.Token())) {
					bad.Add(1)
					t.Errorf("a Hold of token %d can start while the service's grant is %d (held %v)", h.Token(), tok, held)
				}
				h.Release(context.Background())
			}
		})
	}
	wg.Wait()
}

// A Lock whose Acquire is answered after the lease's local deadline fails
// with ErrFenced, and fences the lease, though its timer has not fired.
func TestALockGrantedPastTheDeadlineFences(t *testing.T) {
	s, err := openSession(context.Background(), &grantTable{held: map[string]uint64{}}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	s.lease.mu.Lock()
	s.lease.deadline = time.Now().Add(-time.Millisecond)
	s.lease.mu.Unlock()
	if h, err := s.Lock(context.Background(), "k", func(*Hold) {}); h != nil || !errors.Is(err, ErrFenced) {
		t.Fatalf("Lock granted past the deadline: hold %v, err %v; want ErrFenced", h != nil, err)
	}
	if !s.lease.isFenced() {
		t.Fatal("the lease past its deadline did not fence")
	}
}
