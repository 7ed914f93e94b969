package lockclient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
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
	if n := leaseCount(t, ctx, env); n != 2 {
		t.Fatalf("%d leases at etcd for 3 classes of 2 TTLs, want 2", n)
	}
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
