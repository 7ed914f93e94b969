package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/internal/testhook"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"google.golang.org/grpc/codes"
)

// A lease serialises Lock and Release per key, through whichever class's
// Session they come. From a key's first Lock until the service has
// answered for the grant's end, the key has one holdState in l.holds:
// through the outermost Acquire, the nested Locks sharing its grant
// (ADR-13), the outermost Release, and, after an Acquire or Release whose
// outcome is unknown, the cleanup that ends whatever hold the lease may
// have on the key (cleanup.go). A Lock that finds the key's grant failed
// or ending waits for its state to go, then acquires afresh: so a Lock can
// never be answered with a grant whose release is in flight, and the
// service never sees two requests of one session for one key at a time,
// but for an Acquire this lease gave up on that the service is still
// finishing: it never hands that call's hold to the next (LEAKED naming
// this lease; heldUnheard).

// Lock acquires key on the session, waiting until ctx's deadline.
// onFence is required: it runs once if the session reaches its deadline
// while the key is held. Lock fails with ErrFenced if the session's lease
// has ended, even while its Acquire was in flight: a Hold returned with a
// nil error was taken on a live lease, and its onFence runs if that lease
// fences.
func (s *Session) Lock(ctx context.Context, key string, onFence func(*Hold)) (*Hold, error) {
	return s.lease.lock(ctx, s.class, key, onFence, true)
}

// TryLock acquires key once, failing with CONTENDED if it is held
// (including by a lease of this client that has ended but not yet expired
// at etcd).
func (s *Session) TryLock(ctx context.Context, key string, onFence func(*Hold)) (*Hold, error) {
	return s.lease.lock(ctx, s.class, key, onFence, false)
}

func (l *lease) lock(ctx context.Context, class, key string, onFence func(*Hold), wait bool) (*Hold, error) {
	if onFence == nil {
		return nil, errors.New("lockclient: onFence is required: it is how a holder learns it must stop")
	}
	// Another lease of this client holding the key, or acquiring it (one
	// of another TTL, or one since replaced), would make this one wait on
	// itself: a leak in the caller, said at once. The service says the same
	// of a hold it has granted (the instance); other clients of the same
	// identity (replicas) queue.
	if l.owner != nil {
		if o := l.owner.heldByAnother(l, key); o != nil {
			return nil, reason.New(codes.FailedPrecondition, lockv1.ErrorReason_LEAKED,
				fmt.Sprintf("key %s is held by this client's session %d; a second session of the same client would wait on it", key, o.id),
				"holder_session", strconv.FormatInt(o.id, 10))
		}
	}
	for {
		l.mu.Lock()
		if l.fenced {
			l.mu.Unlock()
			return nil, ErrFenced
		}
		hs, ok := l.holds[key]
		if !ok {
			hs = &holdState{lease: l, class: class, key: key, ready: make(chan struct{}), gone: make(chan struct{}), fenced: make(chan struct{})}
			l.holds[key] = hs
			l.mu.Unlock()
			return l.grant(ctx, hs, wait, onFence)
		}
		l.mu.Unlock()
		// The class picks the key's cluster: sharing a grant made in
		// another class could share one on another cluster's key.
		if hs.class != class {
			return nil, reason.New(codes.InvalidArgument, lockv1.ErrorReason_INVALID_ARGUMENT,
				fmt.Sprintf("class: key %s is locked on this session in class %s; lock it in that class", key, hs.class),
				"field", "class")
		}
		// Re-entrant: wait for an outermost Lock in flight, then share it.
		select {
		case <-hs.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if h, err := l.join(hs, onFence, false); h != nil || err != nil {
			return h, err
		}
		// The grant failed or is ending: wait until the service has
		// answered for it, then acquire afresh.
		testhook.AwaitingKey(key)
		select {
		case <-hs.gone:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// grant makes hs the key's grant, by the outermost Lock's Acquire. The
// outermost Hold is counted before ready closes, so a nested
// Lock never finds the grant without holders. The Acquire, and any wait
// in it, ends when the lease does; a grant that fails on a lease that has
// ended fails with ErrFenced (wrapping the Acquire's error).
func (l *lease) grant(ctx context.Context, hs *holdState, wait bool, onFence func(*Hold)) (*Hold, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.life, cancel)()
	resp, err := l.acquire(ctx, hs, wait)
	var h *Hold
	if err == nil {
		hs.token = token.Token(resp.GetToken().GetValue())
		h, err = l.join(hs, onFence, true)
	}
	if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
		l.fenceNow()
	}
	if err != nil && !errors.Is(err, ErrFenced) && l.isFenced() {
		err = fmt.Errorf("%w: %w", ErrFenced, err)
	}
	if err != nil {
		hs.failed = true
	}
	close(hs.ready)
	switch {
	case errors.Is(err, ErrFenced):
		// The grant, if any, ends with the lease at etcd, and the lease
		// has nothing left to clean up.
		l.forget(hs)
	case err != nil:
		l.settle(hs, err)
	}
	return h, err
}

// join adds a Hold with onFence to hs's grant, the outermost one if first,
// else a nested one (nil if the grant is gone); or fails with ErrFenced if
// the lease has ended or its local deadline has passed (fencing it, if its
// timer has not yet). It runs under l.mu, which fenceNow holds to mark the
// lease fenced and list its holds: a fence either comes after the Hold
// joined, and runs its OnFence, or before, and no Hold is returned. So
// every Hold returned is on a lease whose fence, when it comes, runs the
// Hold's OnFence.
func (l *lease) join(hs *holdState, onFence func(*Hold), first bool) (*Hold, error) {
	l.mu.Lock()
	if l.fenced || !time.Now().Before(l.deadline) {
		l.mu.Unlock()
		l.fenceNow()
		return nil, ErrFenced
	}
	defer l.mu.Unlock()
	if first {
		return hs.newHold(onFence), nil
	}
	return hs.nest(onFence), nil
}

// acquire calls Acquire. A waiting Lock outlasts what passes: a range
// moving between shards, an arbiter draining, a region's shard map being
// written, an epoch advance's quiet period (asked again no sooner than its
// retry_after), a lease of this client that has ended expiring at etcd.
// The last is contention: the service waits on no lease of the caller's own,
// so the client does, and says CONTENDED if it cannot.
func (l *lease) acquire(ctx context.Context, hs *holdState, wait bool) (*lockv1.AcquireResponse, error) {
	req := &lockv1.AcquireRequest{Key: hs.key, SessionId: l.id, Wait: wait, Class: hs.class, Instance: l.instance}
	rctx := routedBy(ctx, hs.key)
	resp, err := l.api.Acquire(rctx, req)
	backoff, ended := 100*time.Millisecond, 0
	for ctx.Err() == nil {
		switch {
		case l.heldUnheard(err) && ended < maxUnheard:
			// A hold of an earlier Acquire of this lease whose answer never
			// arrived: this lease has no other Acquire of the key in
			// flight, so it is ended (as after an unknown outcome) and
			// asked again.
			ended++
			if cerr := l.cleanUpOnce(ctx, hs); !cleanupDone(cerr) {
				return resp, err
			}
		case wait && (transient(err) || l.heldByRetired(err)):
			t := time.NewTimer(max(backoff/2+rand.N(backoff/2), retryAfter(err)))
			select {
			case <-ctx.Done():
				t.Stop()
				continue
			case <-t.C:
			}
			backoff = min(2*backoff, 2*time.Second)
		default:
			return l.retiredAsContended(resp, err, hs, wait)
		}
		resp, err = l.api.Acquire(rctx, req)
	}
	return l.retiredAsContended(resp, err, hs, wait)
}

// retiredAsContended says CONTENDED for a key held by an ended lease of
// this client: waiting for it to expire at etcd is contention, not a leak.
func (l *lease) retiredAsContended(resp *lockv1.AcquireResponse, err error, hs *holdState, wait bool) (*lockv1.AcquireResponse, error) {
	if l.heldByRetired(err) {
		code := codes.Aborted
		if wait {
			code = codes.DeadlineExceeded
		}
		err = reason.New(code, lockv1.ErrorReason_CONTENDED,
			fmt.Sprintf("key %s is held by an ended session of this client until its lease expires", hs.key))
	}
	return resp, err
}

// release ends hs's grant: the outermost Hold's Release. The key's state
// stays in l.holds until the answer, so a Lock of the key meanwhile waits
// for it rather than being answered with this grant.
func (l *lease) release(ctx context.Context, hs *holdState) error {
	if l.isFenced() {
		l.forget(hs)
		return ErrFenced
	}
	resp, err := l.api.Release(routedBy(ctx, hs.key), &lockv1.ReleaseRequest{Key: hs.key, SessionId: l.id, Token: uint64(hs.token), Class: hs.class})
	l.settle(hs, err)
	if err != nil {
		return err
	}
	if !resp.GetReleased() {
		return ErrGrantEnded
	}
	return nil
}

// settle ends hs after its Acquire or Release answered err: at once,
// unless the outcome is unknown and the key must be cleaned up first.
func (l *lease) settle(hs *holdState, err error) {
	if err != nil && outcomeUnknown(err) {
		go l.cleanUp(hs)
		return
	}
	l.forget(hs)
}

// forget removes hs from the lease: the key is free for a new grant. A
// lease left holding nothing tells its owner, which closes it if it is no
// longer current.
func (l *lease) forget(hs *holdState) {
	l.mu.Lock()
	if l.holds[hs.key] == hs {
		delete(l.holds, hs.key)
	}
	idle := len(l.holds) == 0 && !l.fenced
	l.mu.Unlock()
	hs.goneOnce.Do(func() { close(hs.gone) })
	if idle && l.owner != nil {
		l.owner.idle(l)
	}
}

// transient reports refusals a waiting Lock retries. EPOCH_CHANGED is an
// epoch advance: the arbiter's cached record caught up, or no key is
// granted on the cluster until its quiet period ends (retry_after).
func transient(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_MOVING, lockv1.ErrorReason_DRAINING, lockv1.ErrorReason_SHARD_MAP_MISSING,
		lockv1.ErrorReason_EPOCH_CHANGED:
		return true
	}
	return false
}

// maxRetryAfter bounds a refusal's retry_after: an epoch advance's quiet
// period is at most the longest class TTL (300 s) plus a second.
const maxRetryAfter = 5*time.Minute + 5*time.Second

// retryAfter is the refusal's "retry_after" metadata (a Go duration): the
// service grants nothing before then, so asking sooner is wasted. Zero
// when the refusal names none.
func retryAfter(err error) time.Duration {
	_, meta := reason.Info(err)
	d, perr := time.ParseDuration(meta["retry_after"])
	if perr != nil || d <= 0 {
		return 0
	}
	return min(d, maxRetryAfter)
}
