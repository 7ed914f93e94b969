package lockclient

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/internal/testhook"
	"github.com/lockplane/lockplane/services/client/protocol"
	"github.com/lockplane/lockplane/services/client/reason"
)

// FenceMargin is subtracted from the TTL to get the local deadline: it
// covers clock-rate differences between this host and the etcd leader.
const FenceMargin = time.Second

// Session is a class's handle on its lease: the Client's one etcd lease
// for the class's TTL (ADR-10), renewed in the background and shared with
// every other class of that TTL. All holds on the lease, of whichever
// class, live and die with it; the handle adds its class to each Lock and
// Release, since a key's class picks its cluster.
type Session struct {
	lease *lease
	class string
}

// lease is one etcd lease and the holds on it: the state the Sessions of
// one TTL share.
type lease struct {
	api lockv1.LockServiceClient
	id  int64
	// instance is what the session record stores, as OpenSession echoed
	// it (the Client's; empty from an arbiter without instances), sent
	// with every Acquire: the grant checks it against the record.
	instance string
	ttl      time.Duration
	stop     context.CancelFunc
	done     chan struct{}
	// life ends when the lease does (closed or fenced): background
	// cleanups stop with it, its end ending every hold.
	life context.Context
	// owner is the Client that opened the lease; nil in unit tests.
	owner *Client

	mu       sync.Mutex
	deadline time.Time // monotonic: last confirmed send + ttl - margin
	canStart bool
	fenced   bool
	fence    *time.Timer
	// holds has each key's state from its first Lock until the service
	// has answered for its end (lock.go). Keys are namespaced and each
	// belongs to one class, so keying by key alone is enough.
	holds map[string]*holdState
}

// openSession opens a session of class on a lease of its own.
func openSession(ctx context.Context, api lockv1.LockServiceClient, class, instance string) (*Session, error) {
	resp, sent, err := requestLease(ctx, api, class, instance)
	if err != nil {
		return nil, err
	}
	return &Session{lease: startLease(api, resp, sent, nil), class: resp.GetClass()}, nil
}

// requestLease asks the service for a lease of class's TTL; sent is when
// the request left.
func requestLease(ctx context.Context, api lockv1.LockServiceClient, class, instance string) (*lockv1.OpenSessionResponse, time.Time, error) {
	sent := time.Now()
	resp, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: class, Instance: instance})
	return resp, sent, err
}

// startLease starts renewing the lease OpenSession answered with resp, of
// owner (nil in unit tests), which it tells when it ends.
func startLease(api lockv1.LockServiceClient, resp *lockv1.OpenSessionResponse, sent time.Time, owner *Client) *lease {
	kctx, stop := context.WithCancel(context.Background())
	l := &lease{
		api: api, id: resp.GetSessionId(), instance: resp.GetInstance(), ttl: resp.GetTtl().AsDuration(), owner: owner,
		stop: stop, done: make(chan struct{}), life: kctx, canStart: true,
		holds: map[string]*holdState{},
	}
	// The lease was granted after sent, so it cannot expire before
	// sent + ttl.
	l.deadline = sent.Add(l.ttl - FenceMargin)
	l.fence = time.AfterFunc(time.Until(l.deadline), l.fenceNow)
	go l.keepAlive(kctx)
	return l
}

// ID is the session's ID: its lease's, the same for every class of its TTL.
func (s *Session) ID() int64 { return s.lease.id }

// TTL is the lease TTL, fixed by the session's class.
func (s *Session) TTL() time.Duration { return s.lease.ttl }

// Instance is the instance ID the session was opened with (its Client's);
// a raw Acquire on the session must send it.
func (s *Session) Instance() string { return s.lease.instance }

// Class is the class this handle locks keys of.
func (s *Session) Class() string { return s.class }

// CanStart reports whether the lease's last keepalive succeeded and its
// deadline has not passed: whether a holder may start a new unit of work.
func (s *Session) CanStart() bool { return s.lease.live() }

// RemainingTTL is the time left until the lease's local deadline; zero
// once fenced.
func (s *Session) RemainingTTL() time.Duration { return s.lease.remaining() }

// Close revokes the session's lease and stops renewing it. The lease is
// shared: Close ends the holds of every class of its TTL on this Client,
// not only this class's, and the next Client.Session of any of them opens
// a new lease. Holds' OnFence callbacks are not called: the caller ended
// them.
func (s *Session) Close(ctx context.Context) error { return s.lease.close(ctx) }

func (l *lease) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.canStart && !l.fenced && time.Now().Before(l.deadline)
}

func (l *lease) remaining() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced {
		return 0
	}
	return max(0, time.Until(l.deadline))
}

// holdsClass reports whether l, not ended, holds (or is locking or
// releasing) a key of class.
func (l *lease) holdsClass(class string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, hs := range l.holds {
		if hs.class == class && !l.fenced {
			return true
		}
	}
	return false
}

func (l *lease) isFenced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fenced
}

// RenewalsPerTTL is how many times a lease is renewed per TTL: every
// TTL/RenewalsPerTTL, so two renewals can be lost before it expires
// (protocol.RenewalsPerTTL).
const RenewalsPerTTL = protocol.RenewalsPerTTL

// keepAlive renews every ttl/RenewalsPerTTL. A renewal counts from its send time only
// if its answer arrives within the interval; otherwise the stream is
// dropped, so a late answer can never be credited to a later send.
func (l *lease) keepAlive(ctx context.Context) {
	defer close(l.done)
	interval := l.ttl / RenewalsPerTTL
	var ks *kaStream
	defer func() { ks.close() }()
	for {
		next := time.Now().Add(interval)
		if ks == nil {
			ks = openStream(ctx, l.api)
		}
		ok := ks != nil && l.renewOnce(ctx, ks, interval)
		if !ok {
			ks.close()
			ks = nil
			l.mu.Lock()
			l.canStart = false
			l.mu.Unlock()
			// Retry sooner than the interval, but not in a hot loop.
			next = time.Now().Add(min(interval, 500*time.Millisecond))
		}
		if l.isFenced() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}

func (l *lease) renewOnce(ctx context.Context, ks *kaStream, wait time.Duration) bool {
	sent := time.Now()
	if err := ks.st.Send(&lockv1.KeepAliveRequest{SessionId: l.id}); err != nil {
		return false
	}
	select {
	case r, open := <-ks.resps:
		return open && l.answer(sent, r)
	case <-time.After(wait):
		return false
	case <-ctx.Done():
		return false
	}
}

// kaStream is one KeepAlive stream and the goroutine reading it.
type kaStream struct {
	st     lockv1.LockService_KeepAliveClient
	resps  chan *lockv1.KeepAliveResponse
	cancel context.CancelFunc
}

func openStream(ctx context.Context, api lockv1.LockServiceClient) *kaStream {
	sctx, cancel := context.WithCancel(ctx)
	st, err := api.KeepAlive(sctx)
	if err != nil {
		cancel()
		return nil
	}
	ks := &kaStream{st: st, resps: make(chan *lockv1.KeepAliveResponse, 1), cancel: cancel}
	go func() {
		defer close(ks.resps)
		for {
			r, err := st.Recv()
			if err != nil {
				return
			}
			select {
			case ks.resps <- r:
			case <-sctx.Done():
				return
			}
		}
	}()
	return ks
}

func (ks *kaStream) close() {
	if ks != nil {
		ks.cancel()
	}
}

// answer applies a keepalive response to the send made at sent.
func (l *lease) answer(sent time.Time, r *lockv1.KeepAliveResponse) bool {
	if r.GetError() == lockv1.ErrorReason_SESSION_EXPIRED || r.GetError() == lockv1.ErrorReason_SESSION_NOT_OWNED {
		l.fenceNow()
		return false
	}
	l.endHolds(r.GetEnded())
	if r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED || r.GetTtl() == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fenced {
		return false
	}
	d := sent.Add(r.GetTtl().AsDuration() - FenceMargin)
	if d.After(l.deadline) {
		l.deadline = d
		l.fence.Reset(time.Until(d))
	}
	l.canStart = true
	return true
}

// fenceNow ends the lease locally: every hold's OnFence runs once, and
// nothing on this lease may start again.
func (l *lease) fenceNow() {
	l.mu.Lock()
	if l.fenced {
		l.mu.Unlock()
		return
	}
	l.fenced, l.canStart = true, false
	l.fence.Stop()
	var hs []*holdState
	for _, h := range l.holds {
		hs = append(hs, h)
	}
	l.mu.Unlock()
	l.stop()
	l.retire()
	// Callbacks run on their own goroutine: one that closes the session or
	// the client must not wait on the renewal loop that fenced it.
	go func() {
		for _, h := range hs {
			h.fenceOnce()
		}
		testhook.Fenced(l.id)
	}()
}

// endHolds ends the holds the service reports ended under the lease (two
// operators force-released them): each one's CanStart turns false at once
// and its OnFence runs once; the lease and its other holds live on. A
// report names the grant by key and revision, so a key acquired again
// since is not ended by an old report (reports repeat for a day).
func (l *lease) endHolds(ended []*lockv1.EndedHold) {
	if len(ended) == 0 {
		return
	}
	var hit []*holdState
	l.mu.Lock()
	for _, e := range ended {
		hs, ok := l.holds[e.GetKey()]
		if !ok {
			continue
		}
		select {
		case <-hs.ready: // the token is set before ready closes
		default:
			continue // still acquiring: not the grant reported
		}
		if hs.failed || hs.token.Revision() != e.GetRevision() {
			continue
		}
		hit = append(hit, hs)
	}
	l.mu.Unlock()
	for _, hs := range hit {
		if run := hs.fenceMark(); run != nil {
			// The grant's end is answered for: the key is free for a new
			// Lock, which must not join this grant.
			l.forget(hs)
			go run()
		}
	}
}

// retire tells the owning Client the lease has ended.
func (l *lease) retire() {
	if l.owner != nil {
		l.owner.retire(l)
	}
}

// heldByRetired reports whether err is the service's LEAKED naming a lease
// of the owning Client that has ended but may not have expired at etcd.
func (l *lease) heldByRetired(err error) bool {
	r, meta := reason.Info(err)
	if r != lockv1.ErrorReason_LEAKED || l.owner == nil {
		return false
	}
	id, perr := strconv.ParseInt(meta["holder_session"], 10, 64)
	return perr == nil && l.owner.retiredLease(id)
}

// heldUnheard reports whether err is the service's LEAKED naming this very
// lease: it holds the key under an earlier Acquire whose answer never
// arrived (the service never hands one Acquire's hold to another).
func (l *lease) heldUnheard(err error) bool {
	r, meta := reason.Info(err)
	return r == lockv1.ErrorReason_LEAKED && meta["holder_session"] == strconv.FormatInt(l.id, 10)
}

// maxUnheard bounds how many such holds one Acquire ends before giving
// up: each is an earlier call of this lease still finishing at the
// service, and there are few.
const maxUnheard = 3

// close revokes the lease, releasing every hold on it, and stops renewing.
func (l *lease) close(ctx context.Context) error {
	ended := l.end(false)
	l.retire()
	<-l.done
	if !ended {
		return nil
	}
	_, err := l.api.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: l.id})
	return err
}

// end marks l ended, its holds released without their OnFence callbacks,
// and stops renewing it; it does nothing if l has ended already, or if
// idle is set and l holds anything. It reports whether it ended l. Under
// l.mu, as a Lock adds its key's state: either the Lock finds l ended, or
// an idle l is not ended under it.
func (l *lease) end(idle bool) bool {
	l.mu.Lock()
	if l.fenced || idle && len(l.holds) > 0 {
		l.mu.Unlock()
		return false
	}
	l.fenced, l.canStart = true, false
	l.fence.Stop()
	for _, h := range l.holds {
		h.release()
	}
	l.holds = map[string]*holdState{}
	l.mu.Unlock()
	l.stop()
	return true
}

// ErrFenced is returned by calls on a session that has passed its deadline.
var ErrFenced = errors.New("lockclient: the session is fenced; open a new one")

// ErrGrantEnded is returned by Release when the grant had already ended
// (expired or ended by an operator) before the release arrived.
var ErrGrantEnded = errors.New("lockclient: the grant had already ended")
