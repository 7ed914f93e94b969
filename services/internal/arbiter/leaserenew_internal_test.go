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
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	r := newLeaseRenewer(func() pb.LeaseClient { return lease }, 2*time.Second)
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
// stuck without quorum does. With blockSend they also stop reading: Send
// blocks, as gRPC's does once etcd's flow-control window is full.
type silentLease struct {
	pb.LeaseClient
	opened    atomic.Int64
	blockSend bool
}

func (s *silentLease) LeaseKeepAlive(ctx context.Context, _ ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	s.opened.Add(1)
	return &silentStream{ctx: ctx, block: s.blockSend}, nil
}

type silentStream struct {
	pb.Lease_LeaseKeepAliveClient
	ctx   context.Context
	block bool
}

func (s *silentStream) Send(*pb.LeaseKeepAliveRequest) error {
	if s.block {
		<-s.ctx.Done()
	}
	return s.ctx.Err()
}

func (s *silentStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	<-s.ctx.Done()
	return nil, s.ctx.Err()
}

func (s *silentStream) CloseSend() error { return nil }

// A renewal etcd never answers fails at its own deadline. A caller's
// deadline alone does not end the shared stream (the renewals of others
// on it go on waiting); once its oldest renewal has waited the stall
// threshold, the stream ends, every renewal on it fails Unavailable, and
// the next renewal opens a stream afresh. That holds whether etcd reads
// the requests or has stopped reading (Send blocks): no renewal waits
// past its deadline on another's Send.
func TestAnUnansweredRenewalEndsItsStreamOnlyOnceStalled(t *testing.T) {
	for _, blockSend := range []bool{false, true} {
		name := "reading"
		if blockSend {
			name = "not-reading"
		}
		t.Run(name, func(t *testing.T) {
			lease := &silentLease{blockSend: blockSend}
			const stall = 300 * time.Millisecond
			r := newLeaseRenewer(func() pb.LeaseClient { return lease }, stall)
			slot := &r.slots[0]
			first := time.Now()
			long, cancelLong := context.WithTimeout(context.Background(), time.Minute)
			defer cancelLong()
			behind, st, err := slot.send(long, 2)
			if err != nil {
				t.Fatal(err)
			}
			// A caller with a short deadline returns at it, and its
			// stream, not yet stalled, stays up for the renewal behind.
			short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			r.next.Store(renewStreams - 1) // the next renew picks slots[0]
			if _, err := r.renew(short, 1); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("an unanswered renewal: %v, want DeadlineExceeded", err)
			}
			if waited := time.Since(first); waited >= stall {
				t.Skipf("the machine took %v to get here, past the stall threshold: the check below would not be meaningful", waited)
			}
			select {
			case <-behind.done:
				// The goroutine may have been descheduled past the
				// threshold since the check above.
				if waited := time.Since(first); waited >= stall {
					t.Skipf("the machine took %v to get here, past the stall threshold: the check would not be meaningful", waited)
				}
				t.Fatalf("one caller's deadline ended the renewal of another: %v", behind.err)
			default:
			}
			// Past the stall threshold the stream ends, though nobody
			// else asks: every renewal on it fails Unavailable, to be sent
			// again, and the slot opens another for the next.
			<-behind.done
			if stalled := time.Since(first); stalled < stall {
				t.Fatalf("the stream ended after %v, before the stall threshold %v", stalled, stall)
			}
			if status.Code(behind.err) != codes.Unavailable || !behind.ended {
				t.Fatalf("a renewal on the stalled stream: %v (ended %v), want Unavailable, to be sent again", behind.err, behind.ended)
			}
			slot.mu.Lock()
			open := slot.cur == st
			slot.mu.Unlock()
			if open {
				t.Fatal("the stalled stream still takes requests")
			}
			if _, _, err := slot.send(long, 4); err != nil {
				t.Fatal(err)
			}
			if got := lease.opened.Load(); got != 2 {
				t.Fatalf("%d streams opened, want 2: the stuck one, then a fresh one", got)
			}
			if n := r.pending.Load(); n != 1 {
				t.Fatalf("%d renewals counted pending, want 1 (the last)", n)
			}
		})
	}
}

// slowOpen's streams take until release is closed to open, as over a
// connection still being made; asked is closed at the first open.
type slowOpen struct {
	silentLease
	release, asked chan struct{}
	once           sync.Once
}

func (s *slowOpen) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	s.once.Do(func() { close(s.asked) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return s.silentLease.LeaseKeepAlive(ctx, opts...)
}

// While a stream is being opened for a renewal with a long deadline, the
// renewals with short ones waiting on that open return at their own
// deadlines, not the opener's, and one open serves them all.
func TestRenewalsWaitingOnAnOpenKeepTheirOwnDeadlines(t *testing.T) {
	lease := &slowOpen{release: make(chan struct{}), asked: make(chan struct{})}
	r := newLeaseRenewer(func() pb.LeaseClient { return lease }, time.Minute)
	slot := &r.slots[0]
	const opener = 3 * time.Second
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), opener)
		defer cancel()
		slot.send(ctx, 1)
	}()
	<-lease.asked
	var wg sync.WaitGroup
	for i := range 15 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			start := time.Now()
			if _, _, err := slot.send(ctx, clientv3.LeaseID(i+2)); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("a renewal waiting on an open: %v, want DeadlineExceeded", err)
			}
			// Well inside the opener's deadline: they did not wait on it.
			if took := time.Since(start); took >= opener {
				t.Errorf("a renewal with a 50ms deadline returned after %v, with the opener", took)
			}
		})
	}
	wg.Wait()
	close(lease.release)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := slot.send(ctx, 99); err != nil {
		t.Fatal(err)
	}
	if got := lease.opened.Load(); got != 1 {
		t.Fatalf("%d streams opened in one slot, want 1", got)
	}
}

// A renewer refuses renewals past maxPendingRenewals, counting those on
// retired streams too, and every renewal answered or failed is uncounted.
func TestPendingRenewalsAreBoundedAcrossRetiredStreams(t *testing.T) {
	lease := &silentLease{}
	r := newLeaseRenewer(func() pb.LeaseClient { return lease }, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slot := &r.slots[0]
	var streams []*renewStream
	for i := range maxPendingRenewals {
		if i%(maxPendingRenewals/4) == 0 && i > 0 {
			// Age the stream: the next send retires it and opens another.
			slot.mu.Lock()
			slot.cur.opened = slot.cur.opened.Add(-2 * maxStreamAge)
			slot.mu.Unlock()
		}
		_, st, err := slot.send(ctx, clientv3.LeaseID(i+1))
		if err != nil {
			t.Fatalf("renewal %d: %v", i, err)
		}
		if len(streams) == 0 || streams[len(streams)-1] != st {
			streams = append(streams, st)
		}
	}
	if len(streams) != 4 {
		t.Fatalf("%d streams, want 4", len(streams))
	}
	if _, _, err := slot.send(ctx, 1); status.Code(err) != codes.Unavailable {
		t.Fatalf("renewal past the bound: %v, want Unavailable", err)
	}
	for _, st := range streams {
		slot.end(st, errors.New("test: ended"))
	}
	if n := r.pending.Load(); n != 0 {
		t.Fatalf("%d renewals still counted after every stream ended", n)
	}
	if _, _, err := slot.send(ctx, 1); err != nil {
		t.Fatalf("a renewal after the others failed: %v", err)
	}
}

// failFirst's first stream ends with an expired auth token once it has
// been sent a request, which is then pending on it; the streams after it
// are etcd's.
type failFirst struct {
	countingLease
}

func (f *failFirst) LeaseKeepAlive(ctx context.Context, opts ...grpc.CallOption) (pb.Lease_LeaseKeepAliveClient, error) {
	if f.opened.Add(1) == 1 {
		return &expiredStream{sent: make(chan struct{})}, nil
	}
	return f.LeaseClient.LeaseKeepAlive(ctx, opts...)
}

type expiredStream struct {
	pb.Lease_LeaseKeepAliveClient
	once sync.Once
	sent chan struct{}
}

func (s *expiredStream) Send(*pb.LeaseKeepAliveRequest) error {
	s.once.Do(func() { close(s.sent) })
	return nil
}

func (s *expiredStream) Recv() (*pb.LeaseKeepAliveResponse, error) {
	<-s.sent
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
	r := newLeaseRenewer(func() pb.LeaseClient { return lease }, 2*time.Second)
	r.next.Store(renewStreams - 1)
	if resp, err := r.renew(ctx, l.ID); err != nil || resp.TTL != 10 {
		t.Fatalf("a renewal whose stream ended under it: %+v, %v; want it renewed on a fresh stream", resp, err)
	}
	if got := lease.opened.Load(); got != 2 {
		t.Fatalf("%d streams opened, want 2", got)
	}

	// Age the fresh stream (in slot 0 or 1).
	var slot *renewSlot
	var old *renewStream
	for i := range 2 {
		slot = &r.slots[i]
		slot.mu.Lock()
		old = slot.cur
		if old != nil {
			old.opened = old.opened.Add(-2 * maxStreamAge)
		}
		slot.mu.Unlock()
		if old != nil {
			r.next.Store(uint32(i + renewStreams - 1)) // the next renew picks it
			break
		}
	}
	if old == nil {
		t.Fatal("no slot holds the fresh stream")
	}
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
	r := newLeaseRenewer(func() pb.LeaseClient { return pb.NewLeaseClient(cli.ActiveConnection()) }, 2*time.Second)
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
