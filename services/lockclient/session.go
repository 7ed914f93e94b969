package lockclient

import (
	"context"
	"errors"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
)

// FenceMargin is subtracted from the TTL to get the local deadline: it
// covers clock-rate differences between this host and the etcd leader.
const FenceMargin = time.Second

// Session is one etcd lease, renewed in the background. All its holds live
// and die with it.
type Session struct {
	api   lockv1.LockServiceClient
	id    int64
	class string
	// instance is the owning Client's, sent with every Acquire: the grant
	// checks it against the session record.
	instance string
	ttl      time.Duration
	stop     context.CancelFunc
	done     chan struct{}
	// life ends when the session does (closed or fenced): background
	// cleanups stop with it, its lease ending every hold.
	life context.Context
	// owner is the Client that opened the session; nil in unit tests.
	owner *Client

	mu       sync.Mutex
	deadline time.Time // monotonic: last confirmed send + ttl - margin
	canStart bool
	fenced   bool
	fence    *time.Timer
	// holds has each key's state from its first Lock until the service
	// has answered for its end (lock.go).
	holds map[string]*holdState
}

func openSession(ctx context.Context, api lockv1.LockServiceClient, class, instance string) (*Session, error) {
	sent := time.Now()
	resp, err := api.OpenSession(ctx, &lockv1.OpenSessionRequest{Class: class, Instance: instance})
	if err != nil {
		return nil, err
	}
	kctx, stop := context.WithCancel(context.Background())
	s := &Session{
		api: api, id: resp.GetSessionId(), class: resp.GetClass(), instance: instance, ttl: resp.GetTtl().AsDuration(),
		stop: stop, done: make(chan struct{}), life: kctx, canStart: true,
		holds: map[string]*holdState{},
	}
	// The lease was granted after sent, so it cannot expire before
	// sent + ttl.
	s.deadline = sent.Add(s.ttl - FenceMargin)
	s.fence = time.AfterFunc(time.Until(s.deadline), s.fenceNow)
	go s.keepAlive(kctx)
	return s, nil
}

// ID is the session's ID (its etcd lease ID).
func (s *Session) ID() int64 { return s.id }

// TTL is the lease TTL fixed by the session's class.
func (s *Session) TTL() time.Duration { return s.ttl }

// Instance is the instance ID the session was opened with (its Client's);
// a raw Acquire on the session must send it.
func (s *Session) Instance() string { return s.instance }

// Class is the session's lock class.
func (s *Session) Class() string { return s.class }

// CanStart reports whether the session's last keepalive succeeded and its
// deadline has not passed: whether a holder may start a new unit of work.
func (s *Session) CanStart() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.canStart && !s.fenced && time.Now().Before(s.deadline)
}

// RemainingTTL is the time left until the local deadline; zero once fenced.
func (s *Session) RemainingTTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenced {
		return 0
	}
	return max(0, time.Until(s.deadline))
}

func (s *Session) isFenced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fenced
}

// keepAlive renews every ttl/3. A renewal counts from its send time only
// if its answer arrives within the interval; otherwise the stream is
// dropped, so a late answer can never be credited to a later send.
func (s *Session) keepAlive(ctx context.Context) {
	defer close(s.done)
	interval := s.ttl / 3
	var ks *kaStream
	defer func() { ks.close() }()
	for {
		next := time.Now().Add(interval)
		if ks == nil {
			ks = openStream(ctx, s.api)
		}
		ok := ks != nil && s.renewOnce(ctx, ks, interval)
		if !ok {
			ks.close()
			ks = nil
			s.mu.Lock()
			s.canStart = false
			s.mu.Unlock()
			// Retry sooner than the interval, but not in a hot loop.
			next = time.Now().Add(min(interval, 500*time.Millisecond))
		}
		if s.isFenced() {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
	}
}

func (s *Session) renewOnce(ctx context.Context, ks *kaStream, wait time.Duration) bool {
	sent := time.Now()
	if err := ks.st.Send(&lockv1.KeepAliveRequest{SessionId: s.id}); err != nil {
		return false
	}
	select {
	case r, open := <-ks.resps:
		return open && s.answer(sent, r)
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
func (s *Session) answer(sent time.Time, r *lockv1.KeepAliveResponse) bool {
	if r.GetError() == lockv1.ErrorReason_SESSION_EXPIRED || r.GetError() == lockv1.ErrorReason_SESSION_NOT_OWNED {
		s.fenceNow()
		return false
	}
	if r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED || r.GetTtl() == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenced {
		return false
	}
	d := sent.Add(r.GetTtl().AsDuration() - FenceMargin)
	if d.After(s.deadline) {
		s.deadline = d
		s.fence.Reset(time.Until(d))
	}
	s.canStart = true
	return true
}

// fenceNow ends the session locally: every hold's OnFence runs once, and
// nothing on this session may start again.
func (s *Session) fenceNow() {
	s.mu.Lock()
	if s.fenced {
		s.mu.Unlock()
		return
	}
	s.fenced, s.canStart = true, false
	s.fence.Stop()
	var hs []*holdState
	for _, h := range s.holds {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	s.stop()
	// Callbacks run on their own goroutine: one that closes the session or
	// the client must not wait on the renewal loop that fenced it.
	go func() {
		for _, h := range hs {
			h.fenceOnce()
		}
	}()
}

// Close revokes the session's lease, releasing every hold on it, and stops
// renewing. Holds' OnFence callbacks are not called: the caller ended them.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	already := s.fenced
	s.fenced, s.canStart = true, false
	s.fence.Stop()
	for _, h := range s.holds {
		h.release()
	}
	s.holds = map[string]*holdState{}
	s.mu.Unlock()
	s.stop()
	<-s.done
	if already {
		return nil
	}
	_, err := s.api.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: s.id})
	return err
}

// ErrFenced is returned by calls on a session that has passed its deadline.
var ErrFenced = errors.New("lockclient: the session is fenced; open a new one")

// ErrGrantEnded is returned by Release when the grant had already ended
// (expired or ended by an operator) before the release arrived.
var ErrGrantEnded = errors.New("lockclient: the grant had already ended")
