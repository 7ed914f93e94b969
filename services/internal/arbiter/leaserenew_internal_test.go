package arbiter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/internal/etcdembed"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// countingLease counts the LeaseKeepAlive streams opened through it.
type countingLease struct {
	pb.LeaseClient
	opened atomic.Int64
}

func (c *countingLease) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	c.opened.Add(1)
	return c.LeaseClient.LeaseKeepAlive(ctx, opts...)
}

// On a real etcd, many renewals at once of leases with different TTLs:
// each is answered with its own lease's ID and TTL, a lease gone is
// reported gone, and they share a few streams rather than open one each.
func TestEachLeaseRenewalIsAnsweredForItsOwnLease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	short, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	long, err := cli.Grant(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := cli.Grant(ctx, 30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	lease := &countingLease{LeaseClient: pb.NewLeaseClient(cli.ActiveConnection())}
	r := newLeaseRenewer(func() pb.LeaseClient { return lease })
	want := map[clientv3.LeaseID]int64{short.ID: 10, long.ID: 20}
	ids := []clientv3.LeaseID{short.ID, long.ID, gone.ID}
	const n = 600
	var wg sync.WaitGroup
	var mu sync.Mutex
	wrong := 0
	for i := range n {
		wg.Go(func() {
			id := ids[i%len(ids)]
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := r.renew(rctx, id)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case id == gone.ID:
				if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
					wrong++
					t.Errorf("renewing a revoked lease: %v, %+v; want ErrLeaseNotFound", err, resp)
				}
			case err != nil:
				wrong++
				t.Errorf("renewing %x: %v", id, err)
			case resp.ID != id || resp.TTL != want[id] || resp.ResponseHeader == nil:
				wrong++
				t.Errorf("renewing %x (TTL %d) was answered for %x, TTL %d", id, want[id], resp.ID, resp.TTL)
			}
		})
	}
	wg.Wait()
	if wrong > 0 {
		t.Fatalf("%d of %d renewals answered wrongly", wrong, n)
	}
	if got := lease.opened.Load(); got > renewStreams {
		t.Fatalf("%d renewals opened %d streams, want at most %d", n, got, renewStreams)
	}
	t.Logf("%d renewals on %d streams", n, lease.opened.Load())
}

// silentLease's streams accept requests and never answer, as a member
// stuck without quorum does.
type silentLease struct {
	pb.LeaseClient
	opened atomic.Int64
}

func (s *silentLease) LeaseKeepAlive(ctx context.Context, _ ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	s.opened.Add(1)
	return &silentStream{ctx: ctx}, nil
}

type silentStream struct {
	pb.Lease_LeaseKeepAliveClient
	ctx context.Context
}

func (s *silentStream) Send(*pb.LeaseKeepAliveRequest) error { return s.ctx.Err() }
func (s *silentStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

// A renewal etcd never answers fails at its deadline, ends its stream (so
// the renewals behind it fail too rather than wait on it), and the next
// renewal opens a stream afresh.
func TestAnUnansweredRenewalEndsItsStream(t *testing.T) {
	lease := &silentLease{}
	r := newLeaseRenewer(func() pb.LeaseClient { return lease })
	slot := &r.slots[0]
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	behind, _, err := slot.send(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	r.next.Store(renewStreams - 1) // the next renew picks slots[0]
	if _, err := r.renew(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an unanswered renewal: %v, want DeadlineExceeded", err)
	}
	select {
	case <-behind.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a renewal behind the unanswered one still waits on the stream")
	}
	slot.mu.Lock()
	open := slot.cur != nil
	slot.mu.Unlock()
	if open {
		t.Fatal("after the deadline the stuck stream still takes requests")
	}
	if _, _, err := slot.send(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if got := lease.opened.Load(); got != 2 {
		t.Fatalf("%d streams opened, want 2: the stuck one, then a fresh one", got)
	}
}

// failFirst's first stream ends with an expired auth token as soon as it
// is read; the streams after it are etcd's.
type failFirst struct {
	countingLease
}

func (f *failFirst) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	if f.opened.Add(1) == 1 {
		return &expiredStream{}, nil
	}
	return f.LeaseClient.LeaseKeepAlive(ctx, opts...)
}

type expiredStream struct{ pb.Lease_LeaseKeepAliveClient }

func (expiredStream) Send(*pb.LeaseKeepAliveRequest) error { return nil }
func (expiredStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	return nil, rpctypes.ErrGRPCInvalidAuthToken
}

// A stream that ends under a renewal (its auth token expired, its member
// lost the leader) does not fail the renewal: it is sent again on a fresh
// stream. And a stream past maxStreamAge takes no new renewals, so none
// outlives the token it was opened with.
func TestRenewalStreamsAreReplacedNotFailed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	l, err := cli.Grant(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	lease := &failFirst{countingLease{LeaseClient: pb.NewLeaseClient(cli.ActiveConnection())}}
	r := newLeaseRenewer(func() pb.LeaseClient { return lease })
	r.next.Store(renewStreams - 1)
	if resp, err := r.renew(ctx, l.ID); err != nil || resp.TTL != 10 {
		t.Fatalf("a renewal whose stream ended under it: %+v, %v; want it renewed on a fresh stream", resp, err)
	}
	if got := lease.opened.Load(); got != 2 {
		t.Fatalf("%d streams opened, want 2", got)
	}

	// The fresh stream is in slot 1; age it.
	slot := &r.slots[1]
	slot.mu.Lock()
	old := slot.cur
	old.opened = old.opened.Add(-2 * maxStreamAge)
	slot.mu.Unlock()
	r.next.Store(0) // the next renew picks slots[1]
	if _, err := r.renew(ctx, l.ID); err != nil {
		t.Fatal(err)
	}
	slot.mu.Lock()
	replaced := slot.cur != old
	slot.mu.Unlock()
	if !replaced || lease.opened.Load() != 3 {
		t.Fatalf("a stream past maxStreamAge still took a renewal (%d streams opened)", lease.opened.Load())
	}
}

// Renewing one lease many times at once, as a busy arbiter does: a
// stream of its own per renewal (clientv3's KeepAliveOnce, what the
// arbiter did before) against one message on a shared stream (the
// renewer). Compare the two in one run: go test -run '^$' -bench
// LeaseRenewal ./services/internal/arbiter/
func BenchmarkLeaseRenewal(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, cli := startOne(b, ctx, etcdembed.Config{})
	lease, err := cli.Grant(ctx, 60)
	if err != nil {
		b.Fatal(err)
	}
	r := newLeaseRenewer(func() pb.LeaseClient { return pb.NewLeaseClient(cli.ActiveConnection()) })
	for _, c := range []struct {
		name  string
		renew func(context.Context) error
	}{
		{"keepalive-once", func(ctx context.Context) error { _, err := cli.KeepAliveOnce(ctx, lease.ID); return err }},
		{"shared-stream", func(ctx context.Context) error { _, err := r.renew(ctx, lease.ID); return err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(16)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					err := c.renew(rctx)
					cancel()
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
