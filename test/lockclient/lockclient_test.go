package lockclient_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// The holder must believe it has lost before the log says so (ADR-12): cut
// the holder off from the service and time both events.
func TestOnFenceFiresBeforeEtcdRevokesLease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := make(chan time.Time, 1)
	h, err := s.TryLock(ctx, "team-a/fence/1", func(*lockclient.Hold) { fenced <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	expired := devenvtest.Released(t, ctx, env, "team-a/fence/1")

	env.StopArbiter() // the holder can no longer renew; etcd keeps counting
	cut := time.Now()
	// CanStart has no event of its own; sample it to find when it turned.
	var stopped time.Time
	for stopped.IsZero() {
		select {
		case at := <-fenced:
			t.Fatalf("OnFence at +%s before CanStart turned false", at.Sub(cut))
		case <-time.After(5 * time.Millisecond):
			if !h.CanStart() {
				stopped = time.Now()
			}
		}
	}
	fenceAt := <-fenced
	expireAt := <-expired
	if !fenceAt.Before(expireAt) {
		t.Fatalf("OnFence at +%s, lease expired at etcd at +%s: the holder learned too late", fenceAt.Sub(cut), expireAt.Sub(cut))
	}
	if h.CanStart() || h.RemainingTTL() != 0 {
		t.Fatal("a fenced hold still allows work")
	}
	t.Logf("after the cut: CanStart false at +%s, OnFence at +%s, etcd expiry at +%s (lead %s, TTL %s)",
		stopped.Sub(cut).Round(time.Millisecond), fenceAt.Sub(cut).Round(time.Millisecond),
		expireAt.Sub(cut).Round(time.Millisecond), expireAt.Sub(fenceAt).Round(time.Millisecond), s.TTL())
}

// slowFence is a class whose local deadline (last confirmed keepalive
// send + TTL - 1 s) comes at least 2 s after the next keepalive (every
// TTL/3): long enough apart that the two fences cannot be mistaken.
var slowFence = class.Class{Name: "slow-fence", TTL: 9 * time.Second, Tier: class.TierCoord}

// A session ended behind the holder's back (revoked at etcd) fences at the
// next keepalive, whose answer is SESSION_EXPIRED, not at the deadline.
func TestRevokedSessionFencesAtNextKeepalive(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, slowFence)})
	ctx := ctxT(t, 30*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), slowFence.Name)
	fenced := make(chan time.Time, 1)
	h, err := s.TryLock(ctx, "team-a/fence/2", func(*lockclient.Hold) { fenced <- time.Now() })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s.ID())); err != nil {
		t.Fatal(err)
	}
	// No keepalive sent from here on succeeds, so the hold's deadline can
	// only have moved later than this reading (a renewal sent before the
	// revoke and answered after it); the deadline fence fires at it.
	deadline := time.Now().Add(h.RemainingTTL())
	var at time.Time
	select {
	case at = <-fenced:
	case <-ctx.Done():
		t.Fatal("never fenced")
	}
	if !at.Before(deadline) {
		t.Fatalf("fenced %s after the hold's deadline: by the deadline timer, not by the keepalive that found the session expired",
			at.Sub(deadline))
	}
	t.Logf("fenced %s before the deadline fence would have fired", deadline.Sub(at).Round(time.Millisecond))
	if _, err := s.TryLock(ctx, "team-a/fence/3", func(*lockclient.Hold) {}); err != lockclient.ErrFenced {
		t.Fatalf("lock on a fenced session: %v, want ErrFenced", err)
	}
}

// counter counts unary RPCs by method.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.mu.Lock()
	c.n[method[strings.LastIndex(method, "/")+1:]]++
	c.mu.Unlock()
	return inv(ctx, method, req, reply, cc, opts...)
}

func (c *counter) get(m string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[m]
}

func TestReentrancyIsCountedInTheClient(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	src, err := env.Profile.Source("demo")
	if err != nil {
		t.Fatal(err)
	}
	rpcs := &counter{n: map[string]int{}}
	c, err := lockclient.Dial(lockclient.Config{Target: env.Addr, Identity: src, ServerID: env.Profile.ServerID,
		DialOptions: []grpc.DialOption{grpc.WithUnaryInterceptor(rpcs.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s, err := c.Session(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	key := "team-a/reentrant/1"
	held := func() bool {
		r, err := env.Etcd.Get(ctx, lockkey.HoldKey(key), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return r.Count == 1
	}
	outer, err := s.TryLock(ctx, key, func(*lockclient.Hold) {})
	if err != nil {
		t.Fatal(err)
	}
	var inner []*lockclient.Hold
	for i := 0; i < 3; i++ {
		h, err := s.Lock(ctx, key, func(*lockclient.Hold) {})
		if err != nil {
			t.Fatal(err)
		}
		if h.Token() != outer.Token() {
			t.Fatalf("nested token %v differs from the outer %v", h.Token(), outer.Token())
		}
		inner = append(inner, h)
	}
	if n := rpcs.get("Acquire"); n != 1 {
		t.Fatalf("%d Acquire RPCs for 1 outer and 3 nested locks, want 1", n)
	}
	// Releases in any order: only the last one reaches the service.
	if err := outer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, h := range inner {
		if rpcs.get("Release") != 0 || !held() {
			t.Fatalf("after %d of 4 releases: %d Release RPCs, held=%v", i+1, rpcs.get("Release"), held())
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		h.Release(ctx) // twice is a no-op, and does not count
	}
	if rpcs.get("Release") != 1 || held() {
		t.Fatalf("after the last release: %d Release RPCs, held=%v; want 1 and free", rpcs.get("Release"), held())
	}
	// The next Lock is a new grant, with a new token.
	again, err := s.TryLock(ctx, key, func(*lockclient.Hold) {})
	if err != nil {
		t.Fatal(err)
	}
	if again.Token() <= outer.Token() || rpcs.get("Acquire") != 2 {
		t.Fatalf("re-lock after release: token %v (was %v), %d Acquire RPCs", again.Token(), outer.Token(), rpcs.get("Acquire"))
	}
}

func TestConcurrentNestedLocksShareOneGrant(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	var wg sync.WaitGroup
	var tokens sync.Map
	var n atomic.Int32
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := s.Lock(ctx, "team-a/reentrant/2", func(*lockclient.Hold) {})
			if err != nil {
				t.Error(err)
				return
			}
			tokens.Store(h.Token(), true)
			n.Add(1)
		}()
	}
	wg.Wait()
	distinct := 0
	tokens.Range(func(any, any) bool { distinct++; return true })
	if n.Load() != 8 || distinct != 1 {
		t.Fatalf("%d holds with %d distinct tokens; want 8 sharing 1", n.Load(), distinct)
	}
}

func TestOnFenceIsRequired(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	if _, err := s.TryLock(ctxT(t, 10*time.Second), "team-a/x/1", nil); err == nil {
		t.Fatal("Lock without OnFence succeeded")
	}
}

// A holder's natural reaction to a fence, closing its client, must not
// deadlock against the renewal loop that delivered the fence.
func TestClosingTheClientFromOnFence(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	c, err := env.Client("demo")
	if err != nil {
		t.Fatal(err)
	}
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	closed := make(chan error, 1)
	if _, err := s.TryLock(ctx, "team-a/fence/close", func(*lockclient.Hold) { closed <- c.Close(context.Background()) }); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(s.ID())); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close from OnFence did not return")
	}
}
