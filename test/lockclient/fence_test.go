package lockclient_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/lockclient/lockclienttest"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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

// A Lock whose lease fences while its Acquire is in flight must fail with
// ErrFenced: the fence has already run the holds' OnFence callbacks, so a
// Hold returned now would never learn it must stop. The interceptor holds
// the granted Acquire's answer until the fence (the lease revoked at etcd,
// found by the next keepalive) has run.
func TestALockWhoseLeaseFencesDuringItsAcquireFails(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	var holdAnswer atomic.Bool
	answered, goOn := make(chan struct{}), make(chan struct{})
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := inv(ctx, method, req, reply, cc, opts...)
		if methodName(method) == "Acquire" && holdAnswer.CompareAndSwap(true, false) {
			close(answered)
			<-goOn
		}
		return err
	})
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	fenced := fencedHook(t, s.ID)
	const key = "team-a/fence/acquiring"
	type result struct {
		h   *lockclient.Hold
		err error
	}
	locked, onFence := make(chan result, 1), make(chan struct{}, 1)
	holdAnswer.Store(true)
	go func() {
		h, err := s.Lock(ctx, key, func(*lockclient.Hold) { onFence <- struct{}{} })
		locked <- result{h, err}
	}()
	<-answered // granted at etcd, the answer held back
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s.ID())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-fenced:
	case <-ctx.Done():
		t.Fatal("the revoked lease never fenced")
	}
	close(goOn)
	r := <-locked
	if r.err != lockclient.ErrFenced {
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
