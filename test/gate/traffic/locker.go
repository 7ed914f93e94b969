package traffic

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/unsafelocker"
)

// Locker is what the workload takes its locks from: the real service, or a
// deliberately unsafe locker that the gate must catch.
type Locker interface {
	// Lock waits for key until ctx ends. A nil Grant with ErrNoSession
	// means no session could be opened: the service is down.
	Lock(ctx context.Context, key string) (Grant, error)
	// Current is the session the last Lock used (0 before any).
	Current() int64
	// Holder is the session holding key now (0: free), as the service
	// reports it, and since when it holds (zero if unknown).
	Holder(ctx context.Context, key string) (int64, time.Time, error)
	// Close ends the locker; true when the current session was live and
	// the service confirmed its close, so no hold of it may remain.
	Close(ctx context.Context) bool
}

// Grant is one held key.
type Grant interface {
	Token() token.Token
	// Session names the lease the grant hangs on, in the history.
	Session() int64
	// CanStart reports whether new work may start under the grant.
	CanStart() bool
	Release(ctx context.Context) error
}

// ErrNoSession means the locker could not open a session.
var ErrNoSession = errors.New("traffic: no session")

// The lockers a client can run.
const (
	LockerLockplane  = "lockplane"
	LockerWatchGrant = "watch-grant"
)

func newLocker(cfg Config) (Locker, error) {
	switch cfg.Locker {
	case "", LockerLockplane:
		p, err := profile.Load(cfg.Profile)
		if err != nil {
			return nil, err
		}
		c, err := lockclient.DialProfile(p, cfg.Identity)
		if err != nil {
			return nil, err
		}
		return &lockplane{c: c, class: cfg.Class}, nil
	case LockerWatchGrant:
		w, err := unsafelocker.DialWatchGrant(cfg.Etcd, cfg.TTL)
		if err != nil {
			return nil, err
		}
		return watchGrant{w}, nil
	}
	return nil, fmt.Errorf("traffic: locker %q: must be %q or %q", cfg.Locker, LockerLockplane, LockerWatchGrant)
}

// lockplane locks through the arbiter with the Go client library.
type lockplane struct {
	c     *lockclient.Client
	class string
	cur   *lockclient.Session
	// onFence, if set, hears each grant's OnFence.
	onFence func(key string, session int64, tok token.Token)
	// deaf: holds are not told they ended (Config.Deaf).
	deaf bool
}

func (l *lockplane) Lock(ctx context.Context, key string) (Grant, error) {
	s, err := l.c.Session(ctx, l.class)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSession, err)
	}
	l.cur = s
	id, onFence := s.ID(), l.onFence
	h, err := s.Lock(ctx, key, func(h *lockclient.Hold) {
		if onFence != nil {
			onFence(h.Key(), id, h.Token())
		}
	})
	if err != nil {
		return nil, &sessionError{session: s.ID(), err: err}
	}
	if l.deaf {
		return &deafHold{hold{h: h, session: id}, s}, nil
	}
	return &hold{h: h, session: id}, nil
}

func (l *lockplane) Current() int64 {
	if l.cur == nil {
		return 0
	}
	return l.cur.ID()
}

func (l *lockplane) Holder(ctx context.Context, key string) (int64, time.Time, error) {
	r, err := l.c.Inspect(ctx, key, l.class)
	if err != nil || !r.GetHeld() {
		return 0, time.Time{}, err
	}
	var since time.Time
	if s := r.GetHolder().GetSince(); s != nil {
		since = s.AsTime()
	}
	return r.GetHolder().GetSessionId(), since, nil
}

// Close closes the current session first, on its own: a session more
// than half a second from its deadline cannot be fenced during the call,
// so a nil answer means the service closed it (a fenced session's Close
// returns nil without asking the service).
func (l *lockplane) Close(ctx context.Context) bool {
	ok := false
	if l.cur != nil {
		live := l.cur.RemainingTTL() > 500*time.Millisecond
		ok = l.cur.Close(ctx) == nil && live
	}
	l.c.Close(ctx)
	return ok
}

type hold struct {
	h       *lockclient.Hold
	session int64
}

func (h *hold) Token() token.Token                { return h.h.Token() }
func (h *hold) Session() int64                    { return h.session }
func (h *hold) CanStart() bool                    { return h.h.CanStart() }
func (h *hold) Release(ctx context.Context) error { return h.h.Release(ctx) }

// Ended reports whether the hold was fenced: the service reported it
// ended under its holder (force-released), or its lease's deadline passed.
func (h *hold) Ended() bool {
	select {
	case <-h.h.Fenced():
		return true
	default:
		return false
	}
}

// deafHold is a hold whose holder is not told it ended (Config.Deaf): its
// CanStart is its session's, blind to the service's report.
type deafHold struct {
	hold
	s *lockclient.Session
}

func (h *deafHold) CanStart() bool { return h.s.CanStart() }
func (h *deafHold) Ended() bool    { return false }

// sessionError is a refused Lock on a known session, so the history can
// name the session.
type sessionError struct {
	session int64
	err     error
}

func (e *sessionError) Error() string { return e.err.Error() }
func (e *sessionError) Unwrap() error { return e.err }

// sessionOf names the session a refused Lock was made on, if any.
func sessionOf(err error) int64 {
	var se *sessionError
	if errors.As(err, &se) {
		return se.session
	}
	return 0
}

// watchGrant adapts the unsafe negative control to Locker. Its keys are
// not the service's holds: it has no sessions to report or close.
type watchGrant struct{ *unsafelocker.WatchGrant }

func (w watchGrant) Current() int64 { return 0 }

func (w watchGrant) Holder(context.Context, string) (int64, time.Time, error) {
	return 0, time.Time{}, errors.New("traffic: the watch-grant locker has no Inspect")
}

func (w watchGrant) Close(ctx context.Context) bool {
	w.WatchGrant.Close(ctx)
	return false
}

func (w watchGrant) Lock(ctx context.Context, key string) (Grant, error) {
	g, err := w.WatchGrant.Lock(ctx, key)
	var se *unsafelocker.SessionError
	var le *unsafelocker.LockError
	switch {
	case errors.As(err, &se):
		return nil, fmt.Errorf("%w: %v", ErrNoSession, err)
	case errors.As(err, &le):
		return nil, &sessionError{session: le.Lease, err: err}
	case err != nil:
		return nil, err
	}
	return g, nil
}
