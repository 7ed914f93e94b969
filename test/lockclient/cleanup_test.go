package lockclient_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/lockclient/lockclienttest"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// lossy is a client whose calls the test can make fail after (or
// instead of) reaching the service, counting what it sends.
type lossy struct {
	// dropAcquire: the next Acquire reaches the service, but its answer is
	// replaced by UNAVAILABLE; lostRev receives the lost grant's revision.
	dropAcquire atomic.Bool
	lostRev     chan int64
	// skipRelease: the next Release by token fails UNAVAILABLE without
	// reaching the service.
	skipRelease atomic.Bool
	// failCleanups: Releases by any_token fail UNAVAILABLE unsent.
	failCleanups       atomic.Bool
	acquires, cleanups atomic.Int32
}

func (l *lossy) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch methodName(method) {
	case "Acquire":
		l.acquires.Add(1)
		err := inv(ctx, method, req, reply, cc, opts...)
		if err == nil && l.dropAcquire.CompareAndSwap(true, false) {
			l.lostRev <- reply.(*lockv1.AcquireResponse).GetToken().GetRevision()
			return status.Error(codes.Unavailable, "test: the answer was lost")
		}
		return err
	case "Release":
		if req.(*lockv1.ReleaseRequest).GetAnyToken() {
			l.cleanups.Add(1)
			if l.failCleanups.Load() {
				return status.Error(codes.Unavailable, "test: the cleanup was lost")
			}
		} else if l.skipRelease.CompareAndSwap(true, false) {
			return status.Error(codes.Unavailable, "test: the release was lost")
		}
	}
	return inv(ctx, method, req, reply, cc, opts...)
}

func lossyClient(t *testing.T, env *devenv.Env) (*lossy, *lockclient.Session) {
	l := &lossy{lostRev: make(chan int64, 1)}
	return l, devenvtest.Session(t, dialWith(t, env, "demo", l.intercept), "")
}

// takenByAnother waits, up to 10 s, for another identity to be granted
// key: it is, once nothing of the lossy session holds it.
func takenByAnother(t *testing.T, env *devenv.Env, key string) *lockclient.Session {
	t.Helper()
	other := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	if _, err := other.Lock(ctxT(t, 10*time.Second), key, noFence); err != nil {
		lease, _ := holdOf(t, env, key)
		t.Fatalf("another session could not take the key (%v): still held on lease %x", err, lease)
	}
	return other
}

// An Acquire whose grant committed but whose answer was lost must leave no
// hold in etcd: the session ends it by Release{any_token}. Otherwise the
// key stays held, by nobody who knows it, until the session ends.
func TestAnAcquireWhoseAnswerIsLostLeavesNoHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	l, s := lossyClient(t, env)
	const key = "team-a/lost/1"
	l.dropAcquire.Store(true)
	if _, err := s.Lock(ctx, key, noFence); status.Code(err) != codes.Unavailable {
		t.Fatalf("Lock with its answer lost: %v, want UNAVAILABLE", err)
	}
	<-l.lostRev // the grant committed
	other := takenByAnother(t, env, key)
	if lease, _ := holdOf(t, env, key); lease != other.ID() {
		t.Fatalf("the key is held on lease %x, not by the session that took it", lease)
	}
	if l.cleanups.Load() == 0 {
		t.Fatal("the key was freed without a cleanup")
	}
}

// The same for a Release that never reached the service: the hold is
// still there, and the session ends it.
func TestAReleaseWhoseOutcomeIsUnknownLeavesNoHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	l, s := lossyClient(t, env)
	const key = "team-a/lost/2"
	h, err := s.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	l.skipRelease.Store(true)
	if err := h.Release(ctx); status.Code(err) != codes.Unavailable {
		t.Fatalf("Release that was lost: %v, want UNAVAILABLE", err)
	}
	takenByAnother(t, env, key)
}

// A cleanup that cannot complete is tried again while the session lives,
// and the key's next Lock on the session waits for it (within its own
// deadline): it is never answered with the lost grant, nor sent an Acquire
// that could share it.
func TestACleanupThatCannotCompleteHoldsTheNextLockUntilItDoes(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	l, s := lossyClient(t, env)
	const key = "team-a/lost/3"
	retried := make(chan struct{}, 64)
	lockclienttest.SetHooks(&lockclienttest.Hooks{CleanupRetry: func(k string) {
		if k == key {
			retried <- struct{}{}
		}
	}})
	t.Cleanup(func() { lockclienttest.SetHooks(nil) })
	l.dropAcquire.Store(true)
	l.failCleanups.Store(true)
	if _, err := s.Lock(ctx, key, noFence); status.Code(err) != codes.Unavailable {
		t.Fatalf("Lock with its answer lost: %v, want UNAVAILABLE", err)
	}
	lost := <-l.lostRev
	acquires := l.acquires.Load()
	for range 3 {
		<-retried // failing tries go on
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	h, err := s.TryLock(short, key, noFence)
	if err == nil {
		if h.Token().Revision() == lost {
			t.Fatal("the next Lock was answered with the lost grant, which no cleanup ended")
		}
		t.Fatal("the next Lock succeeded though no cleanup could complete")
	}
	if !errors.Is(err, context.DeadlineExceeded) || l.acquires.Load() != acquires {
		t.Fatalf("the next Lock: %v after %d Acquires; want its deadline, waiting for the cleanup, and none sent", err, l.acquires.Load()-acquires)
	}
	if lease, rev := holdOf(t, env, key); lease != s.ID() || rev != lost {
		t.Fatalf("the lost grant should still be held (cleanups fail): hold lease %x", lease)
	}
	l.failCleanups.Store(false)
	h, err = s.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if lease, rev := holdOf(t, env, key); h.Token().Revision() <= lost || lease != s.ID() || rev != h.Token().Revision() {
		t.Fatalf("after the cleanup the Lock must be a new grant that etcd holds (hold lease %x)", lease)
	}
}

// A definite refusal granted nothing: no cleanup is sent.
func TestARefusedLockNeedsNoCleanup(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	const key = "team-a/lost/4"
	if _, err := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "").TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	l, s := lossyClient(t, env)
	if _, err := s.TryLock(ctx, key, noFence); status.Code(err) != codes.Aborted {
		t.Fatalf("TryLock of a held key: %v, want ABORTED/CONTENDED", err)
	}
	if _, err := s.Lock(ctxT(t, time.Second), key, noFence); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("Lock of a held key until its deadline: %v, want DEADLINE_EXCEEDED/CONTENDED", err)
	}
	// The key is free for this session's next Lock at once: nothing was
	// left to clean up.
	if _, err := s.TryLock(ctx, "team-a/lost/5", noFence); err != nil {
		t.Fatal(err)
	}
	if n := l.cleanups.Load(); n != 0 {
		t.Fatalf("%d cleanups after definite refusals, want 0", n)
	}
}

// An Acquire the client gave up on may still commit at the service after
// the client cleaned up (its grant Txn held up by a leader election), and
// the service then ends that grant itself (its caller has gone). The
// session's next Lock of the key must not be handed that hold: the
// service says LEAKED naming the session, the client ends the hold and
// is granted afresh, and the late end of the earlier grant leaves the
// new one alone.
func TestALockIsNeverHandedAnEarlierAcquiresHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	l, s := lossyClient(t, env)
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return inv(ctx, method, req, reply, cc, opts...)
	})
	api := lockv1.NewLockServiceClient(c.Conn())
	const key = "team-a/unheard/1"
	// The earlier Acquire, whose answer the session never heard.
	earlier, err := api.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Lock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if h.Token() <= token.Token(earlier.GetToken().GetValue()) {
		t.Fatalf("the Lock was handed the earlier Acquire's hold (token %d, the earlier grant's %d)", h.Token(), earlier.GetToken().GetValue())
	}
	if l.cleanups.Load() == 0 {
		t.Fatal("the earlier hold was not ended by the session")
	}
	// The service ends the earlier grant, late.
	if r, err := api.Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.ID(), Token: earlier.GetToken().GetValue()}); err != nil || r.GetReleased() {
		t.Fatalf("ending the earlier grant: released %v, err %v; want nothing released", r.GetReleased(), err)
	}
	if lease, rev := holdOf(t, env, key); lease != s.ID() || rev != int64(h.Token().Revision()) {
		t.Fatalf("the Lock's hold was ended by the late end of the earlier grant (held on lease %x at revision %d)", lease, rev)
	}
	if !h.CanStart() {
		t.Fatal("the Lock's hold cannot start")
	}
}
