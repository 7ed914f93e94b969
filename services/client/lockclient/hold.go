package lockclient

import (
	"context"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
)

// holdState is one grant of a key on a lease, shared by nested Holds.
type holdState struct {
	lease *lease
	// class is the one the outermost Lock named; the key's Release and
	// cleanup name it too.
	class  string
	key    string
	token  token.Token
	ready  chan struct{} // closed when the outermost Acquire returned
	failed bool          // set before ready closes
	// gone is closed when hs leaves its lease's holds: the service has
	// answered for the grant's end (lock.go). Closed once.
	gone     chan struct{}
	goneOnce sync.Once

	mu        sync.Mutex
	count     int
	released  bool
	onFence   []func(*Hold)
	handles   []*Hold
	fenced    chan struct{}
	fenceDone bool
}

func (hs *holdState) newHold(onFence func(*Hold)) *Hold {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.addLocked(onFence)
}

func (hs *holdState) addLocked(onFence func(*Hold)) *Hold {
	hs.count++
	h := &Hold{state: hs}
	hs.onFence, hs.handles = append(hs.onFence, onFence), append(hs.handles, h)
	return h
}

// nest adds a nested Hold, or returns nil if the grant is gone. The check
// and the count are one step: a last Release between them would end the
// grant under the new Hold.
func (hs *holdState) nest(onFence func(*Hold)) *Hold {
	if hs.failed {
		return nil
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.released || hs.count == 0 || hs.fenceDone {
		return nil
	}
	return hs.addLocked(onFence)
}

func (hs *holdState) release() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.released = true
}

func (hs *holdState) fenceOnce() {
	if run := hs.fenceMark(); run != nil {
		run()
	}
}

// fenceMark marks hs fenced, its CanStart false from here on, and returns
// what runs its OnFence callbacks; nil if it was fenced or released
// already.
func (hs *holdState) fenceMark() func() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.fenceDone || hs.released {
		return nil
	}
	hs.fenceDone = true
	close(hs.fenced)
	fs, handles := hs.onFence, hs.handles
	return func() {
		for i, f := range fs {
			f(handles[i])
		}
	}
}

// Hold is one acquisition of a key. Nested acquisitions on the same session
// are separate Holds sharing one grant and token.
type Hold struct {
	state    *holdState
	mu       sync.Mutex
	released bool
}

// Key is the held key.
func (h *Hold) Key() string { return h.state.key }

// Token is the fencing token to present with every write to the resource.
func (h *Hold) Token() token.Token { return h.state.token }

// CanStart reports whether the holder may start a new unit of work under
// this hold: the hold is live (not fenced, not force-released) and its
// session's last keepalive succeeded.
func (h *Hold) CanStart() bool {
	select {
	case <-h.state.fenced:
		return false
	default:
	}
	h.mu.Lock()
	rel := h.released
	h.mu.Unlock()
	return !rel && h.state.lease.live()
}

// RemainingTTL is the time left before the local deadline fences the hold.
func (h *Hold) RemainingTTL() time.Duration { return h.state.lease.remaining() }

// Fenced is closed when the hold's deadline passes, or when the service
// reports the hold ended under its holder (force-released by operators).
func (h *Hold) Fenced() <-chan struct{} { return h.state.fenced }

// Release ends this acquisition. Only the release of the outermost one
// calls the service; it returns ErrGrantEnded if the grant had already
// ended, and ErrFenced after the deadline. Releasing twice is a no-op.
func (h *Hold) Release(ctx context.Context) error {
	h.mu.Lock()
	if h.released {
		h.mu.Unlock()
		return nil
	}
	h.released = true
	h.mu.Unlock()
	hs := h.state
	hs.mu.Lock()
	hs.count--
	last := hs.count == 0
	if last {
		hs.released = true
	}
	hs.mu.Unlock()
	if !last {
		return nil
	}
	return hs.lease.release(ctx, hs)
}
