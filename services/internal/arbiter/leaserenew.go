package arbiter

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// renewStreams is how many LeaseKeepAlive streams a cluster's renewals
// share. etcd serves a stream's requests one at a time, and a follower
// forwards each to the leader, so a few streams let renewals overlap.
const renewStreams = 8

// maxPendingRenewals bounds the renewals one renewer has sent or queued
// and not had answered, on every stream, retired ones included: past it a
// renewal is refused (the cluster is not answering) rather than queued.
const maxPendingRenewals = 4 * 4096

// maxStreamAge is how long a renewal stream takes new requests. etcd
// checks each renewal against the auth token the stream was opened with,
// which expires (etcdauth renews tokens at a third of their 10-minute
// TTL), so streams are replaced well before their token could.
const maxStreamAge = time.Minute

// leaseRenewer renews a lease once each time it is asked, as
// clientv3.Lease.KeepAliveOnce does, but as one message on a long-lived
// LeaseKeepAlive stream rather than a stream of its own per renewal: a
// renewal then costs etcd and the arbiter a message, not a stream's setup
// and teardown. A renewal is answered only from etcd's response to its
// own request, or fails; it never borrows another request's answer. A
// renewal returns by its ctx's deadline whatever etcd does: no lock is
// held across network I/O.
type leaseRenewer struct {
	slots [renewStreams]renewSlot
	next  atomic.Uint32
	// pending counts renewals queued or sent and not yet answered.
	pending atomic.Int64
}

// renewSlot holds one stream that takes new requests, opened when first
// needed and again after it ends or ages out.
type renewSlot struct {
	r    *leaseRenewer
	open func(context.Context) (pb.Lease_LeaseKeepAliveClient, error)
	// stall is how long a stream's oldest renewal may go unanswered
	// before the stream is ended: etcd answers in order, so nothing
	// behind it would be answered either.
	stall time.Duration

	mu      sync.Mutex // guards cur, opening and every stream's pending
	cur     *renewStream
	opening *streamOpen // the open in flight, if any
}

// streamOpen is one stream open; done is closed when err is set.
type streamOpen struct {
	done chan struct{}
	err  error
}

// renewStream is one LeaseKeepAlive stream. etcd answers a stream's
// requests in the order it receives them, so each response answers the
// oldest pending request. Its writer sends unsent in the order pending
// lists it, and only the writer sends.
type renewStream struct {
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc // nil once ended
	opened  time.Time
	wake    chan struct{} // the writer has work: unsent, or retired
	unsent  []*renewal    // queued for the writer
	retired bool          // takes no new renewals; half-closed once sent
	pending []*renewal    // queued or sent, not yet answered, oldest first
}

// renewal is one request and, once done is closed, its outcome.
type renewal struct {
	id     clientv3.LeaseID
	queued time.Time
	done   chan struct{}
	resp   *clientv3.LeaseKeepAliveResponse
	err    error
	// ended says err is the stream's end, not an answer to this request:
	// the renewal may be sent again on another stream.
	ended bool
}

// minStall is the least stall a renewer takes: below it, etcd answering
// at its usual pace would look stuck.
const minStall = 100 * time.Millisecond

// openTimeout bounds a stream open; a waiting caller stops at its own
// deadline regardless.
const openTimeout = 10 * time.Second

// newLeaseRenewer renews over streams opened on lease(), asked for when a
// stream is first needed, not before. Each stream requires a
// leader (clientv3.WithRequireLeader): a member that loses its leader ends
// the stream, and its pending renewals fail rather than wait. A stream
// whose oldest renewal has waited stall unanswered is ended too.
func newLeaseRenewer(lease func() pb.LeaseClient, stall time.Duration) *leaseRenewer {
	stall = max(stall, minStall)
	r := &leaseRenewer{}
	for i := range r.slots {
		r.slots[i].r = r
		r.slots[i].stall = stall
		r.slots[i].open = func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
			return lease().LeaseKeepAlive(clientv3.WithRequireLeader(ctx), grpc.WaitForReady(true))
		}
	}
	return r
}

// renew renews lease id once, within ctx, which must carry a deadline. A
// lease etcd no longer has fails with rpctypes.ErrLeaseNotFound. A
// renewal whose stream ended under it (a token expired, a member lost its
// leader) is sent once more on a fresh stream: renewing twice is harmless.
func (r *leaseRenewer) renew(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	if _, ok := ctx.Deadline(); !ok {
		return nil, errors.New("lease renewal: a request without a deadline")
	}
	for try := 0; ; try++ {
		slot := &r.slots[r.next.Add(1)%renewStreams]
		req, _, err := slot.send(ctx, id)
		if err != nil {
			return nil, err
		}
		select {
		case <-req.done:
			if req.ended && try == 0 && ctx.Err() == nil {
				continue
			}
			return req.resp, req.err
		case <-ctx.Done():
			// The renewal stays pending on its stream, which ends only
			// once it has stalled (watch), never for one caller's deadline.
			return nil, ctx.Err()
		}
	}
}

// send queues one renewal request on the slot's stream, opening one if
// none takes requests. It waits at most until ctx ends.
func (slot *renewSlot) send(ctx context.Context, id clientv3.LeaseID) (*renewal, *renewStream, error) {
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		slot.mu.Lock()
		now := time.Now()
		if st := slot.cur; st != nil {
			slot.endIfStalledLocked(st, now)
		}
		if st := slot.cur; st != nil && now.Sub(st.opened) > maxStreamAge {
			// Retired: its writer sends what is queued, then half-closes;
			// etcd answers what it was sent, then ends the stream.
			slot.cur = nil
			st.retired = true
			st.kick()
		}
		if st := slot.cur; st != nil {
			if slot.r.pending.Add(1) > maxPendingRenewals {
				slot.r.pending.Add(-1)
				slot.mu.Unlock()
				return nil, nil, status.Error(codes.Unavailable, "etcd has not answered the lease renewals already sent")
			}
			req := &renewal{id: id, queued: now, done: make(chan struct{})}
			st.pending = append(st.pending, req)
			st.unsent = append(st.unsent, req)
			st.kick()
			slot.mu.Unlock()
			return req, st, nil
		}
		o := slot.opening
		if o == nil {
			o = &streamOpen{done: make(chan struct{})}
			slot.opening = o
			go slot.openStream(o)
		}
		slot.mu.Unlock()
		select {
		case <-o.done:
			if o.err != nil {
				return nil, nil, o.err
			}
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// openStream opens a stream for the slot, bounded by openTimeout and by
// no caller's deadline, so that one caller giving up does not fail the
// others waiting on the same open.
func (slot *renewSlot) openStream(o *streamOpen) {
	sctx, cancel := context.WithCancel(context.Background())
	timer := time.AfterFunc(openTimeout, cancel)
	stream, err := slot.open(sctx)
	if !timer.Stop() && err == nil {
		err = context.DeadlineExceeded
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	slot.opening = nil
	if err != nil {
		cancel()
		o.err = status.Error(codes.Unavailable, "opening a lease renewal stream: "+err.Error())
		close(o.done)
		return
	}
	st := &renewStream{stream: stream, cancel: cancel, opened: time.Now(), wake: make(chan struct{}, 1)}
	slot.cur = st
	close(o.done)
	go slot.write(sctx, st)
	go slot.receive(st)
	go slot.watch(sctx, st)
}

// watch ends st once its oldest renewal has waited stall unanswered,
// whether or not anyone still waits on it: a stuck stream, retired or
// not, is never left holding renewals, goroutines and a gRPC stream.
func (slot *renewSlot) watch(ctx context.Context, st *renewStream) {
	t := time.NewTicker(slot.stall / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			slot.endIfStalled(st, now)
		}
	}
}

// write sends st's queued renewals in order until the stream ends or,
// retired, has sent them all. It alone blocks when etcd stops reading.
func (slot *renewSlot) write(ctx context.Context, st *renewStream) {
	for {
		select {
		case <-st.wake:
		case <-ctx.Done():
			return
		}
		for {
			slot.mu.Lock()
			batch, retired := st.unsent, st.retired
			st.unsent = nil
			slot.mu.Unlock()
			if len(batch) == 0 {
				if retired {
					if err := st.stream.CloseSend(); err != nil {
						slot.end(st, err)
					}
					return
				}
				break
			}
			for _, req := range batch {
				if err := st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(req.id)}); err != nil {
					slot.end(st, err)
					return
				}
			}
		}
	}
}

// kick wakes st's writer, if it is not awake already.
func (st *renewStream) kick() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// receive answers st's pending renewals from its responses, in order,
// until it ends.
func (slot *renewSlot) receive(st *renewStream) {
	for {
		resp, err := st.stream.Recv()
		slot.mu.Lock()
		if st.cancel == nil {
			// Ended already; its requests were failed with it.
			slot.mu.Unlock()
			return
		}
		switch {
		case errors.Is(err, io.EOF) && len(st.pending) == 0:
			// A retired stream, done.
		case err != nil:
		case len(st.pending) == 0:
			err = status.Error(codes.Internal, "etcd answered a lease renewal never sent")
		case st.pending[0].id != clientv3.LeaseID(resp.ID):
			// Not the answer to the oldest request: etcd's order is not
			// what this relies on, so trust nothing more from the stream.
			err = status.Error(codes.Internal, "etcd answered a lease renewal out of order")
		}
		if err != nil || resp == nil {
			slot.endLocked(st, err)
			slot.mu.Unlock()
			return
		}
		req := st.pending[0]
		st.pending[0] = nil
		st.pending = st.pending[1:]
		slot.mu.Unlock()
		if resp.TTL <= 0 {
			slot.r.finish(req, nil, rpctypes.ErrLeaseNotFound, false)
			continue
		}
		slot.r.finish(req, &clientv3.LeaseKeepAliveResponse{ResponseHeader: resp.GetHeader(), ID: clientv3.LeaseID(resp.ID), TTL: resp.TTL}, nil, false)
	}
}

// endIfStalled ends st if its oldest pending renewal has waited the
// slot's stall.
func (slot *renewSlot) endIfStalled(st *renewStream, now time.Time) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	slot.endIfStalledLocked(st, now)
}

func (slot *renewSlot) endIfStalledLocked(st *renewStream, now time.Time) {
	if len(st.pending) > 0 && now.Sub(st.pending[0].queued) >= slot.stall {
		slot.endLocked(st, status.Error(codes.Unavailable, "etcd stopped answering lease renewals on this stream"))
	}
}

func (slot *renewSlot) end(st *renewStream, err error) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	slot.endLocked(st, err)
}

// endLocked ends st (once) and fails every renewal pending on it with err
// (io.EOF when the stream closed without one). Called with slot.mu held;
// it does no I/O (cancelling the stream's context unblocks its writer and
// reader).
func (slot *renewSlot) endLocked(st *renewStream, err error) {
	if st.cancel == nil {
		return
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = status.Error(codes.Unavailable, "etcd closed the lease renewal stream")
	}
	st.cancel()
	st.cancel = nil
	if slot.cur == st {
		slot.cur = nil
	}
	for _, p := range st.pending {
		slot.r.finish(p, nil, err, true)
	}
	st.pending, st.unsent = nil, nil
}

// finish answers req, once.
func (r *leaseRenewer) finish(req *renewal, resp *clientv3.LeaseKeepAliveResponse, err error, ended bool) {
	req.resp, req.err, req.ended = resp, err, ended
	r.pending.Add(-1)
	close(req.done)
}
