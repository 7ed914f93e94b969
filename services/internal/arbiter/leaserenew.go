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

// maxPendingRenewals bounds the renewals waiting on one stream: past it
// a renewal is refused (the cluster is not answering) rather than queued.
const maxPendingRenewals = 4096

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
// own request, or fails; it never borrows another request's answer.
type leaseRenewer struct {
	slots [renewStreams]renewSlot
	next  atomic.Uint32
}

// renewSlot holds one stream that takes new requests, opened when first
// needed and again after it ends or ages out.
type renewSlot struct {
	open func(context.Context) (pb.Lease_LeaseKeepAliveClient, error)

	mu  sync.Mutex // guards cur and every stream's pending
	cur *renewStream
}

// renewStream is one LeaseKeepAlive stream. etcd answers a stream's
// requests in the order it receives them, so each response answers the
// oldest pending request.
type renewStream struct {
	stream  pb.Lease_LeaseKeepAliveClient
	cancel  context.CancelFunc
	opened  time.Time
	pending []*renewal // sent, not yet answered, oldest first
}

// renewal is one request and, once done is closed, its outcome.
type renewal struct {
	id   clientv3.LeaseID
	done chan struct{}
	resp *clientv3.LeaseKeepAliveResponse
	err  error
	// ended says err is the stream's end, not an answer to this request:
	// the renewal may be sent again on another stream.
	ended bool
}

// newLeaseRenewer renews over streams opened on lease(), asked for when a
// stream is first needed, not before. Each stream requires a
// leader (clientv3.WithRequireLeader): a member that loses its leader ends
// the stream, and its pending renewals fail rather than wait.
func newLeaseRenewer(lease func() pb.LeaseClient) *leaseRenewer {
	r := &leaseRenewer{}
	for i := range r.slots {
		r.slots[i].open = func(ctx context.Context) (pb.Lease_LeaseKeepAliveClient, error) {
			// Waiting for a connection as clientv3's own calls do; the
			// opening caller's deadline bounds the wait.
			return lease().LeaseKeepAlive(clientv3.WithRequireLeader(ctx), grpc.WaitForReady(true))
		}
	}
	return r
}

// renew renews lease id once, within ctx (which must carry a deadline).
// A lease etcd no longer has fails with rpctypes.ErrLeaseNotFound. A
// renewal whose stream ended under it (a token expired, a member lost its
// leader) is sent once more on a fresh stream: renewing twice is harmless.
func (r *leaseRenewer) renew(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	for try := 0; ; try++ {
		slot := &r.slots[r.next.Add(1)%renewStreams]
		req, st, err := slot.send(ctx, id)
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
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// Unanswered within a whole op deadline: the stream is
				// stuck (a member without quorum blocks a renewal), so end
				// it; the next renewal opens another.
				slot.fail(st, req, ctx.Err())
			}
			return nil, ctx.Err()
		}
	}
}

// send sends one renewal request on the slot's stream, opening one if
// none takes requests; opening is bounded by ctx, the stream then lives on.
func (slot *renewSlot) send(ctx context.Context, id clientv3.LeaseID) (*renewal, *renewStream, error) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if st := slot.cur; st != nil && time.Since(st.opened) > maxStreamAge {
		// Retired: it answers what it has been sent, then ends.
		slot.cur = nil
		if err := st.stream.CloseSend(); err != nil {
			slot.endLocked(st, err)
		}
	}
	if slot.cur != nil && len(slot.cur.pending) >= maxPendingRenewals {
		return nil, nil, status.Error(codes.Unavailable, "etcd has not answered the lease renewals already sent")
	}
	if slot.cur == nil {
		sctx, cancel := context.WithCancel(context.Background())
		stop := context.AfterFunc(ctx, cancel)
		stream, err := slot.open(sctx)
		if !stop() {
			cancel()
			return nil, nil, ctx.Err()
		}
		if err != nil {
			cancel()
			return nil, nil, err
		}
		slot.cur = &renewStream{stream: stream, cancel: cancel, opened: time.Now()}
		go slot.receive(slot.cur)
	}
	st := slot.cur
	req := &renewal{id: id, done: make(chan struct{})}
	st.pending = append(st.pending, req)
	if err := st.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)}); err != nil {
		slot.endLocked(st, err)
	}
	return req, st, nil
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
			req.finish(nil, rpctypes.ErrLeaseNotFound, false)
			continue
		}
		req.finish(&clientv3.LeaseKeepAliveResponse{ResponseHeader: resp.GetHeader(), ID: clientv3.LeaseID(resp.ID), TTL: resp.TTL}, nil, false)
	}
}

// fail ends st, if req is still pending on it, failing every renewal
// pending on it with err.
func (slot *renewSlot) fail(st *renewStream, req *renewal, err error) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	for _, p := range st.pending {
		if p == req {
			slot.endLocked(st, err)
			return
		}
	}
}

// endLocked ends st (once) and fails every renewal pending on it with err
// (io.EOF when the stream closed without one). Called with slot.mu held.
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
		p.finish(nil, err, true)
	}
	st.pending = nil
}

func (r *renewal) finish(resp *clientv3.LeaseKeepAliveResponse, err error, ended bool) {
	r.resp, r.err, r.ended = resp, err, ended
	close(r.done)
}
