package lockclient_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/lockclient/lockclienttest"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fencedHook returns a channel closed when the lease of session id has
// fenced and run its holds' OnFence callbacks (the Fenced hook).
func fencedHook(t *testing.T, id func() int64) <-chan struct{} {
	done := make(chan struct{})
	var once sync.Once
	lockclienttest.SetHooks(&lockclienttest.Hooks{Fenced: func(s int64) {
		if s == id() {
			once.Do(func() { close(done) })
		}
	}})
	t.Cleanup(func() { lockclienttest.SetHooks(nil) })
	return done
}

// await receives from ch (or sees it closed), failing the test if ctx
// ends first.
func await[T any](t *testing.T, ctx context.Context, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		t.Fatalf("%s never came", what)
		panic("unreachable")
	}
}

// A Lock whose lease fences while its Acquire is in flight must fail with
// ErrFenced: the fence has already run the holds' OnFence callbacks, so a
// Hold returned now would never learn it must stop. The interceptor holds
// the granted Acquire's answer until the fence (the lease revoked at etcd,
// found by the next keepalive) has run.
func TestALockWhoseLeaseFencesDuringItsAcquireFails(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	acquire := newGate(t, "Acquire", true)
	c := dialWith(t, env, "demo", acquire.intercept)
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	fenced := fencedHook(t, s.ID)
	const key = "team-a/fence/acquiring"
	type result struct {
		h   *lockclient.Hold
		err error
	}
	locked, onFence := make(chan result, 1), make(chan struct{}, 1)
	acquire.armed.Store(true)
	go func() {
		h, err := s.Lock(ctx, key, func(*lockclient.Hold) { onFence <- struct{}{} })
		locked <- result{h, err}
	}()
	await(t, ctx, acquire.reached, "the Acquire's answer") // granted at etcd, the answer held back
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s.ID())); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, fenced, "the fence of the revoked lease")
	acquire.release()
	r := await(t, ctx, locked, "the Lock's answer")
	if !errors.Is(r.err, lockclient.ErrFenced) {
		fired := len(onFence) > 0
		t.Fatalf("Lock whose lease fenced during its Acquire: hold %v, err %v (OnFence fired: %v); want ErrFenced", r.h != nil, r.err, fired)
	}
	// The key's state on the old lease is settled: a new session takes it.
	s2 := devenvtest.Session(t, c, devenvtest.Fast.Name)
	if s2.ID() == s.ID() {
		t.Fatal("Session returned the fenced lease")
	}
	if _, err := s2.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
}

// deafStream drops the KeepAlive answers while deaf is set: the requests
// still reach etcd and renew the lease there, but the client confirms none
// and fences at its deadline, the lease living on at etcd for a while.
type deafStream struct {
	grpc.ClientStream
	deaf *atomic.Bool
}

func (d deafStream) RecvMsg(m any) error {
	for {
		if err := d.ClientStream.RecvMsg(m); err != nil || !d.deaf.Load() {
			return err
		}
	}
}

// deafKeepAlives is a stream interceptor making KeepAlive streams deaf
// while deaf is set.
func deafKeepAlives(deaf *atomic.Bool) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil || methodName(method) != "KeepAlive" {
			return cs, err
		}
		return deafStream{cs, deaf}, nil
	})
}

// After a local fence the fenced lease may still hold the key at etcd, for
// up to a TTL. Its holds ended with the fence, so the service's LEAKED
// naming it is contention, not a leak in the caller: a TryLock of the key
// on a new session is CONTENDED, and a Lock waits until the old lease has
// expired.
func TestARelockAfterAFenceWaitsForTheFencedLease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	var deaf atomic.Bool
	c := dialOpts(t, env, "demo", deafKeepAlives(&deaf))
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	const key = "team-a/fence/relock"
	fenced := make(chan struct{})
	h, err := s.TryLock(ctx, key, func(*lockclient.Hold) { close(fenced) })
	if err != nil {
		t.Fatal(err)
	}
	deaf.Store(true)
	await(t, ctx, fenced, "the fence")
	deaf.Store(false)
	if err := h.Release(ctx); err != lockclient.ErrFenced {
		t.Fatalf("Release of a fenced hold: %v, want ErrFenced", err)
	}
	s2 := devenvtest.Session(t, c, devenvtest.Fast.Name)
	if s2.ID() == s.ID() {
		t.Fatal("Session returned the fenced lease")
	}
	if lease, _ := holdOf(t, env, key); lease != s.ID() {
		t.Fatalf("the key is held on lease %x, not the fenced one %x: it expired before the test could lock it", lease, s.ID())
	}
	if _, err := s2.TryLock(ctx, key, noFence); reason.Of(err) != lockv1.ErrorReason_CONTENDED || status.Code(err) != codes.Aborted {
		t.Fatalf("TryLock of a key the fenced lease may still hold: %v, want ABORTED/CONTENDED", err)
	}
	h2, err := s2.Lock(ctx, key, noFence)
	if err != nil {
		t.Fatalf("Lock of a key the fenced lease may still hold: %v, want it granted once that lease expires", err)
	}
	if lease, rev := holdOf(t, env, key); lease != s2.ID() || rev != h2.Token().Revision() {
		t.Fatalf("the key is held on lease %x, want the new session's %x", lease, s2.ID())
	}
}

// A fenced lease's holds ended with it: they are not this client's to
// leak. Once the lease is gone at etcd (revoked here), a key it held is
// granted through the client's lease of another TTL, not refused by the
// client as held by its other session.
func TestAKeyOfAFencedLeaseIsNotLeakedOnAnother(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c := devenvtest.Client(t, env, "demo")
	fast, def := devenvtest.Session(t, c, devenvtest.Fast.Name), devenvtest.Session(t, c, "")
	const key = "team-a/fence/other-ttl"
	fenced := make(chan struct{})
	if _, err := fast.TryLock(ctx, key, func(*lockclient.Hold) { close(fenced) }); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(fast.ID())); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, fenced, "the fence")
	if _, err := def.TryLock(ctx, key, noFence); err != nil {
		t.Fatalf("lock through another lease of a key only a fenced, revoked lease held: %v", err)
	}
}

// A Lock waiting for a key fails with ErrFenced as soon as its lease
// fences (revoked at etcd here), not at its own deadline.
func TestAWaitingLockFailsWhenItsLeaseFences(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	const key = "team-a/fence/waiting"
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := holder.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := fencedHook(t, s.ID)
	locked := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, key, noFence)
		locked <- err
	}()
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s.ID())); err != nil {
		t.Fatal(err)
	}
	await(t, ctx, fenced, "the fence of the revoked lease")
	select {
	case err := <-locked:
		if !errors.Is(err, lockclient.ErrFenced) {
			t.Fatalf("Lock waiting on a lease that fenced: %v, want ErrFenced", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("a Lock waited on 3 s after its lease fenced")
	}
}
