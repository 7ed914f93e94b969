package lockclient_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/lockclient/lockclienttest"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc"
)

// A Lock of a key whose Release is in flight on the same session must
// wait for the Release's answer, then be granted afresh. Sent to the
// service while the release is in flight, it is answered with the grant
// being released (the arbiter answers a session's own hold with its
// grant), which the release then deletes: a Hold whose CanStart is true
// with nothing in etcd. An interceptor holds the Release RPC until the
// Lock has either waited (the AwaitingKey hook) or been answered by the
// service (its Acquire was sent while the Release was held).
func TestALockDuringAReleaseWaitsForItsAnswer(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	var holdRelease, releaseInFlight atomic.Bool
	releasing, goOn := make(chan struct{}), make(chan struct{})
	acquiredDuring := make(chan struct{}, 1)
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		switch methodName(method) {
		case "Release":
			if holdRelease.CompareAndSwap(true, false) {
				releaseInFlight.Store(true)
				defer releaseInFlight.Store(false)
				close(releasing)
				<-goOn
			}
		case "Acquire":
			if releaseInFlight.Load() {
				select {
				case acquiredDuring <- struct{}{}:
				default:
				}
			}
		}
		return inv(ctx, method, req, reply, cc, opts...)
	})
	s := devenvtest.Session(t, c, "")
	const key = "team-a/release-race/1"
	h1, err := s.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	holdRelease.Store(true)
	released := make(chan error, 1)
	go func() { released <- h1.Release(ctx) }()
	<-releasing

	waiting := make(chan struct{}, 1)
	lockclienttest.SetHooks(&lockclienttest.Hooks{AwaitingKey: func(k string) {
		if k == key {
			select {
			case waiting <- struct{}{}:
			default:
			}
		}
	}})
	t.Cleanup(func() { lockclienttest.SetHooks(nil) })
	type result struct {
		h   *lockclient.Hold
		err error
	}
	locked := make(chan result, 1)
	go func() {
		h, err := s.Lock(ctx, key, noFence)
		locked <- result{h, err}
	}()
	var r result
	select {
	case <-waiting: // the Lock waits for the release's answer
		close(goOn)
		r = <-locked
	case <-acquiredDuring: // the Lock reached the service first
		r = <-locked
		close(goOn)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	lease, rev := holdOf(t, env, key)
	if r.h.Token() == h1.Token() {
		t.Errorf("the Lock made during the release was answered with the grant being released")
	}
	if r.h.CanStart() && (lease != s.ID() || rev != r.h.Token().Revision()) {
		t.Fatalf("the new Hold's CanStart is true, but etcd has no hold of its grant (hold lease %x, session %x)", lease, s.ID())
	}
}
