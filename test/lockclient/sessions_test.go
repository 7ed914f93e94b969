package lockclient_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
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

// fastTwin has Fast's TTL under another name: its keys share Fast's lease.
var fastTwin = class.Class{Name: "fast-twin", TTL: devenvtest.Fast.TTL, Tier: class.TierCoord}

// sent records the class of each Acquire and Release, and counts calls.
type sent struct {
	counter
	mu      sync.Mutex
	classes map[string]string // key → class of its last Acquire or Release
}

func newSent() *sent {
	return &sent{counter: counter{n: map[string]int{}}, classes: map[string]string{}}
}

func (s *sent) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	s.mu.Lock()
	switch r := req.(type) {
	case *lockv1.AcquireRequest:
		s.classes[r.GetKey()] = r.GetClass()
	case *lockv1.ReleaseRequest:
		s.classes[r.GetKey()] = r.GetClass()
	}
	s.mu.Unlock()
	return s.counter.intercept(ctx, method, req, reply, cc, inv, opts...)
}

func (s *sent) classOf(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.classes[key]
}

// leaseCount is the number of leases at etcd: every one is a session's.
func leaseCount(t *testing.T, ctx context.Context, env *devenv.Env) int {
	t.Helper()
	r, err := env.Etcd.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(r.Leases)
}

// One session per TTL (ADR-10): two classes of one TTL share a lease, a
// third of another TTL has its own; each class's handle still names its
// class in its requests, since the class picks the key's cluster.
func TestClassesOfOneTTLShareALease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, fastTwin)})
	ctx := ctxT(t, 30*time.Second)
	rpcs := newSent()
	c := dialWith(t, env, "demo", rpcs.intercept)
	keys := map[string]string{devenvtest.Fast.Name: "team-a/ttl/fast", fastTwin.Name: "team-a/ttl/twin", class.DefaultName: "team-a/ttl/default"}
	sessions := map[string]*lockclient.Session{}
	for _, cls := range []string{devenvtest.Fast.Name, fastTwin.Name, class.DefaultName} {
		s := devenvtest.Session(t, c, cls)
		if s.Class() != cls {
			t.Fatalf("Session(%q).Class() = %q", cls, s.Class())
		}
		if _, err := s.TryLock(ctx, keys[cls], noFence); err != nil {
			t.Fatalf("lock %s: %v", keys[cls], err)
		}
		sessions[cls] = s
	}
	// 3 classes of 2 TTLs; the twin's duplicate lease is closed in the
	// background.
	awaitLeases(t, ctx, env, 2, 5*time.Second)
	fast, twin, def := sessions[devenvtest.Fast.Name], sessions[fastTwin.Name], sessions[class.DefaultName]
	if fast.ID() != twin.ID() || fast.ID() == def.ID() {
		t.Fatalf("session IDs: fast %x, fast-twin %x, default %x; want the first two equal, the third apart", fast.ID(), twin.ID(), def.ID())
	}
	for cls, key := range keys {
		if got := rpcs.classOf(key); got != cls {
			t.Fatalf("Acquire of %s sent class %q, want %q", key, got, cls)
		}
		if lease, _ := holdOf(t, env, key); lease != sessions[cls].ID() {
			t.Fatalf("%s is held on lease %x, want %x", key, lease, sessions[cls].ID())
		}
	}
	// Once the TTLs are known, sessions cost no more OpenSession calls; the
	// twin's first one cost an extra open, closed at once.
	for cls := range keys {
		if s := devenvtest.Session(t, c, cls); s.ID() != sessions[cls].ID() {
			t.Fatalf("a second Session(%q) is %x, want %x", cls, s.ID(), sessions[cls].ID())
		}
	}
	if o, cl := rpcs.get("OpenSession"), rpcs.get("CloseSession"); o != 3 || cl != 1 {
		t.Fatalf("%d OpenSession and %d CloseSession calls, want 3 and 1", o, cl)
	}
	// The fast key, held on the shared lease: locked through the other
	// lease it is a leak; through the twin, a class mix-up, not a nest.
	acquires := rpcs.get("Acquire")
	if _, err := def.TryLock(ctx, keys[devenvtest.Fast.Name], noFence); reason.Of(err) != lockv1.ErrorReason_LEAKED {
		t.Fatalf("lock of a key held on the client's other lease: %v, want LEAKED", err)
	}
	if _, err := twin.TryLock(ctx, keys[devenvtest.Fast.Name], noFence); reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT {
		t.Fatalf("lock in class %s of a key held in class %s: %v, want INVALID_ARGUMENT", fastTwin.Name, devenvtest.Fast.Name, err)
	}
	if n := rpcs.get("Acquire"); n != acquires {
		t.Fatalf("%d Acquires sent for refusals the client makes itself", n-acquires)
	}
}

// A shared lease that ends fences every class's holds on it, and the next
// Session of either class opens one fresh lease for both.
func TestAnEndedSharedLeaseIsReplacedForEveryClass(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, fastTwin)})
	ctx := ctxT(t, 30*time.Second)
	c := devenvtest.Client(t, env, "demo")
	fast := devenvtest.Session(t, c, devenvtest.Fast.Name)
	twin := devenvtest.Session(t, c, fastTwin.Name)
	fenced := make(chan string, 2)
	onFence := func(h *lockclient.Hold) { fenced <- h.Key() }
	if _, err := fast.TryLock(ctx, "team-a/ttl/fast", onFence); err != nil {
		t.Fatal(err)
	}
	if _, err := twin.TryLock(ctx, "team-a/ttl/twin", onFence); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(fast.ID())); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-fenced:
		case <-ctx.Done():
			t.Fatal("the holds on the revoked lease were not both fenced")
		}
	}
	if fast.CanStart() || twin.CanStart() {
		t.Fatal("a handle on the revoked lease can still start")
	}
	twin2 := devenvtest.Session(t, c, fastTwin.Name)
	fast2 := devenvtest.Session(t, c, devenvtest.Fast.Name)
	if twin2.ID() == twin.ID() || fast2.ID() != twin2.ID() {
		t.Fatalf("after the revoke: fast %x, fast-twin %x (old lease %x); want one new lease for both", fast2.ID(), twin2.ID(), twin.ID())
	}
	if _, err := fast2.TryLock(ctx, "team-a/ttl/fast", noFence); err != nil {
		t.Fatal(err)
	}
	if n := leaseCount(t, ctx, env); n != 1 {
		t.Fatalf("%d leases at etcd, want the new one only", n)
	}
}

// Sessions of two classes of one TTL opened at once, each not knowing the
// TTL, end with one lease: the second to be granted closes its own. The
// interceptor lets neither OpenSession through until both have been sent,
// which a Session holding the Client's lock through its call would never
// allow.
func TestSessionsOfOneTTLRacingOpenOneLease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, fastTwin)})
	ctx := ctxT(t, 30*time.Second)
	var sent atomic.Int32
	both := make(chan struct{})
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if methodName(method) == "OpenSession" {
			if sent.Add(1) == 2 {
				close(both)
			}
			select {
			case <-both:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inv(ctx, method, req, reply, cc, opts...)
	})
	classes := []string{devenvtest.Fast.Name, fastTwin.Name}
	sessions, errs := make([]*lockclient.Session, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i, cls := range classes {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			sessions[i], errs[i] = c.Session(sctx, cls)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Session(%q) racing Session(%q): %v", classes[i], classes[1-i], err)
		}
	}
	if sessions[0].ID() != sessions[1].ID() {
		t.Fatalf("racing Sessions of one TTL got leases %x and %x, want one", sessions[0].ID(), sessions[1].ID())
	}
	// The duplicate is closed in the background.
	awaitLeases(t, ctx, env, 1, 5*time.Second)
}

// A Session being opened holds up neither a Lock on an existing session
// nor, beyond its own ctx, a Session of the same class waiting for it.
func TestASessionOpenDoesNotBlockTheClient(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	open := newGate(t, "OpenSession", false)
	c := dialWith(t, env, "demo", open.intercept)
	s := devenvtest.Session(t, c, "")
	open.armed.Store(true)
	opened := make(chan error, 1)
	go func() {
		_, err := c.Session(ctx, devenvtest.Fast.Name)
		opened <- err
	}()
	await(t, ctx, open.reached, "the OpenSession")
	unblocked := make(chan error, 2)
	go func() {
		_, err := s.TryLock(ctx, "team-a/open/1", noFence)
		unblocked <- err
	}()
	go func() {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		if _, err := c.Session(short, devenvtest.Fast.Name); !errors.Is(err, context.DeadlineExceeded) {
			unblocked <- fmt.Errorf("a Session waiting for its class's open within a short deadline: %v, want its deadline", err)
			return
		}
		unblocked <- nil
	}()
	for range 2 {
		select {
		case err := <-unblocked:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a Lock, or a Session's ctx, waited for another Session's OpenSession")
		}
	}
	open.release()
	if err := await(t, ctx, opened, "the held-back Session"); err != nil {
		t.Fatal(err)
	}
}

// slowTwin has slowFence's TTL under another name.
var slowTwin = class.Class{Name: "slow-twin", TTL: slowFence.TTL, Tier: class.TierCoord}

// failingStream fails the KeepAlive sends of the session cut names,
// reporting each on failed.
type failingStream struct {
	grpc.ClientStream
	cut    *atomic.Int64
	failed chan<- struct{}
}

func (f failingStream) SendMsg(m any) error {
	if r, ok := m.(*lockv1.KeepAliveRequest); ok && r.GetSessionId() == f.cut.Load() {
		select {
		case f.failed <- struct{}{}:
		default:
		}
		return status.Error(codes.Unavailable, "test: keepalive cut")
	}
	return f.ClientStream.SendMsg(m)
}

// cutKeepAlives is a stream interceptor failing the KeepAlive sends of
// the session cut names (none when zero), reporting each on failed.
func cutKeepAlives(cut *atomic.Int64, failed chan<- struct{}) grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, err
		}
		return failingStream{cs, cut, failed}, nil
	})
}

// blipper is an environment with slowFence and slowTwin, and a client
// (dialled with opts) whose keepalives it can cut.
type blipper struct {
	env    *devenv.Env
	ctx    context.Context
	c      *lockclient.Client
	cut    atomic.Int64
	failed chan struct{}
}

func newBlipper(t *testing.T, opts ...grpc.DialOption) *blipper {
	b := &blipper{failed: make(chan struct{}, 1)}
	b.env = devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, slowFence, slowTwin)})
	b.ctx = ctxT(t, 30*time.Second)
	b.c = dialOpts(t, b.env, "demo", append(opts, cutKeepAlives(&b.cut, b.failed))...)
	return b
}

// blip cuts the keepalives of s until two sends have failed: s's lease is
// no longer live, though its deadline is seconds away. Then it opens a
// Session of slowTwin, which gets a fresh lease, and lets s's keepalives
// through again.
func (b *blipper) blip(t *testing.T, s *lockclient.Session) *lockclient.Session {
	t.Helper()
	b.cut.Store(s.ID())
	// The second failed send follows the first failure, which made the
	// lease not live.
	await(t, b.ctx, b.failed, "a failed keepalive")
	await(t, b.ctx, b.failed, "a second failed keepalive")
	n := devenvtest.Session(t, b.c, slowTwin.Name)
	if n.ID() == s.ID() {
		t.Fatal("a new class was handed the lease whose keepalives fail, not a fresh one")
	}
	b.cut.Store(0)
	return n
}

// awaitLeases waits until etcd has n leases, failing the test if it has
// not within d.
func awaitLeases(t *testing.T, ctx context.Context, env *devenv.Env, n int, d time.Duration) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		got := leaseCount(t, ctx, env)
		if got == n {
			return
		}
		select {
		case <-wctx.Done():
			t.Fatalf("%d leases at etcd after %s, want %d", got, d, n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// A lease replaced while its keepalives failed, holding nothing, is
// closed: when its keepalives recover it does not renew on beside the
// new one, and its class's next Session is on the new lease.
func TestAReplacedIdleLeaseIsClosed(t *testing.T) {
	b := newBlipper(t)
	s := devenvtest.Session(t, b.c, slowFence.Name)
	twin := b.blip(t, s)
	awaitLeases(t, b.ctx, b.env, 1, 5*time.Second)
	if again := devenvtest.Session(t, b.c, slowFence.Name); again.ID() != twin.ID() {
		t.Fatalf("Session after the replaced lease closed is on %x, want the new lease %x", again.ID(), twin.ID())
	}
}

// A lease replaced while its keepalives failed keeps its class while it
// holds a key of it, so a nested Lock of the key shares its grant; its
// last Release closes it.
func TestAReplacedLeaseKeepsItsClassWhileHolding(t *testing.T) {
	b := newBlipper(t)
	ctx := b.ctx
	s := devenvtest.Session(t, b.c, slowFence.Name)
	const key = "team-a/replaced/held"
	h, err := s.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	b.blip(t, s)
	again := devenvtest.Session(t, b.c, slowFence.Name)
	if again.ID() != s.ID() {
		t.Fatalf("Session of a class holding a key on its replaced lease %x is on %x", s.ID(), again.ID())
	}
	h2, err := again.TryLock(ctx, key, noFence)
	if err != nil || h2.Token() != h.Token() {
		t.Fatalf("nested lock through the class's Session: %v, want the outer hold's grant", err)
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	awaitLeases(t, ctx, b.env, 1, 5*time.Second)
}

// A lease whose keepalives fail is not handed to a class opening a
// session: a fresh lease is, and becomes the current one. The old lease
// runs on until it ends, and its keys are still this client's: a key it is
// acquiring is LEAKED to a Lock through the new lease, said by the client
// before the service could grant it twice over.
func TestALeaseReplacedWhileRunningKeepsItsKeys(t *testing.T) {
	acquire := newGate(t, "Acquire", false)
	b := newBlipper(t, grpc.WithUnaryInterceptor(acquire.intercept))
	ctx := b.ctx
	s := devenvtest.Session(t, b.c, slowFence.Name)
	const key = "team-a/replaced/1"
	acquire.armed.Store(true)
	locked := make(chan error, 1)
	go func() {
		_, err := s.Lock(ctx, key, noFence)
		locked <- err
	}()
	await(t, ctx, acquire.reached, "the Acquire") // in flight, not yet sent
	twin := b.blip(t, s)
	_, err := twin.TryLock(ctx, key, noFence)
	if s.RemainingTTL() == 0 {
		t.Fatal("the old lease fenced before the test could lock its key: too slow")
	}
	if reason.Of(err) != lockv1.ErrorReason_LEAKED {
		t.Fatalf("Lock through the new lease of a key the replaced, running lease is acquiring: %v, want LEAKED", err)
	}
}

// The shared open of a class is bounded by its own deadline even if its
// caller's ctx has none, and a Session does not wait for the CloseSession
// of a duplicate lease (its class's TTL had a live lease already).
func TestAnOpenIsBoundedAndDoesNotWaitForItsDuplicatesClose(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, fastTwin)})
	ctx := ctxT(t, 30*time.Second)
	closeGate := newGate(t, "CloseSession", false)
	var unbounded atomic.Value
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if m := methodName(method); m == "OpenSession" || m == "CloseSession" {
			if _, ok := ctx.Deadline(); !ok {
				unbounded.Store(m)
			}
		}
		return closeGate.intercept(ctx, method, req, reply, cc, inv, opts...)
	})
	devenvtest.Session(t, c, devenvtest.Fast.Name)
	closeGate.armed.Store(true)
	opened := make(chan error, 1)
	go func() {
		_, err := c.Session(context.Background(), fastTwin.Name)
		opened <- err
	}()
	await(t, ctx, closeGate.reached, "the duplicate lease's CloseSession")
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Session waited for its duplicate lease's CloseSession")
	}
	if m := unbounded.Load(); m != nil {
		t.Fatalf("%s sent without a deadline", m)
	}
}

// Sessions waiting for their class's open get its error, without an open
// of their own.
func TestSessionsWaitingForAFailedOpenGetItsError(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	refused := status.Error(codes.Unavailable, "test: OpenSession refused")
	var opens atomic.Int32
	first, waiting := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lockclienttest.SetHooks(&lockclienttest.Hooks{AwaitingOpen: func(string) { once.Do(func() { close(waiting) }) }})
	t.Cleanup(func() { lockclienttest.SetHooks(nil) })
	c := dialWith(t, env, "demo", func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if methodName(method) == "OpenSession" && opens.Add(1) == 1 {
			close(first)
			select {
			case <-waiting:
				return refused
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return inv(ctx, method, req, reply, cc, opts...)
	})
	errs := make(chan error, 2)
	session := func() {
		_, err := c.Session(ctx, devenvtest.Fast.Name)
		errs <- err
	}
	go session()
	await(t, ctx, first, "the first OpenSession")
	go session()
	for range 2 {
		if err := await(t, ctx, errs, "a Session's answer"); status.Convert(err).Message() != "test: OpenSession refused" {
			t.Fatalf("Session: %v, want the open's error %v", err, refused)
		}
	}
	if n := opens.Load(); n != 1 {
		t.Fatalf("%d OpenSession calls, want 1", n)
	}
}
