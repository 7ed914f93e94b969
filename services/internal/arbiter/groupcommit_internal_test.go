package arbiter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"time"

	"github.com/lockplane/lockplane/services/internal/etcdembed"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// grantLike is a sub-Txn shaped as a grant: put key if it is free (on
// lease, when not 0), else read it.
func grantLike(key string, lease clientv3.LeaseID, deadline time.Time) *subTxn {
	var opts []clientv3.OpOption
	if lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	return &subTxn{key: key, deadline: deadline, done: make(chan struct{}),
		cmps: []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)},
		then: []clientv3.Op{clientv3.OpPut(key, "v", opts...)},
		els:  []clientv3.Op{clientv3.OpGet(key)}}
}

// A batch is taken oldest first, never with two requests for one key, at
// most maxBatch long; a request past its deadline is answered, not sent.
func TestAGroupCommitBatchHasOneRequestPerKey(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Minute)
	g := &groupCommit{}
	a1, b, a2, late := grantLike("a", 0, later), grantLike("b", 0, later), grantLike("a", 0, later), grantLike("c", 0, now)
	g.queue = []*subTxn{a1, b, a2, late}
	batch := g.take(now)
	if len(batch) != 2 || batch[0] != a1 || batch[1] != b {
		t.Fatalf("first batch %v, want a then b", keysOf(batch))
	}
	select {
	case <-late.done:
		if !errors.Is(late.err, context.DeadlineExceeded) {
			t.Fatalf("a request past its deadline: %v, want DeadlineExceeded", late.err)
		}
	default:
		t.Fatal("a request past its deadline was neither sent nor answered")
	}
	if batch := g.take(now); len(batch) != 1 || batch[0] != a2 {
		t.Fatalf("second batch %v, want the second request for a", keysOf(batch))
	}
	for i := range maxBatch + 1 {
		g.queue = append(g.queue, grantLike(fmt.Sprint(i), 0, later))
	}
	if batch := g.take(now); len(batch) != maxBatch || len(g.queue) != 1 {
		t.Fatalf("batch of %d with %d left, want %d and 1", len(batch), len(g.queue), maxBatch)
	}
	g.queue = nil

	// Wide requests: a batch leaves each sub-Txn maxTxnOps less its size.
	for i := range 40 {
		g.queue = append(g.queue, wide(fmt.Sprint("w", i), 100, later))
	}
	if batch := g.take(now); len(batch) != maxTxnOps-100 {
		t.Fatalf("a batch of %d requests of 100 compares, want %d", len(batch), maxTxnOps-100)
	}
}

// wide is grantLike with n compares.
func wide(key string, n int, deadline time.Time) *subTxn {
	s := grantLike(key, 0, deadline)
	for i := 1; i < n; i++ {
		s.cmps = append(s.cmps, clientv3.Compare(clientv3.CreateRevision(fmt.Sprint(key, "/", i)), "=", 0))
	}
	s.width = txnWidth(s.cmps, s.then, s.els)
	return s
}

func keysOf(batch []*subTxn) []string {
	var out []string
	for _, s := range batch {
		out = append(out, s.key)
	}
	return out
}

// On a real etcd: a batch commits each sub-Txn as it would alone, all at
// one revision; one whose write names a lease gone makes etcd refuse the
// whole Txn, and then each is sent alone and gets its own answer.
func TestAGroupCommitAnswersEachRequestAsItsOwnTxn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	if _, err := cli.Put(ctx, "held", "x"); err != nil {
		t.Fatal(err)
	}
	g := newGroupCommit(cli, 1)
	deadline := time.Now().Add(10 * time.Second)
	free, held := grantLike("free", 0, deadline), grantLike("held", 0, deadline)
	g.send([]*subTxn{free, held})
	if free.err != nil || held.err != nil {
		t.Fatalf("errors %v, %v", free.err, held.err)
	}
	if !free.resp.Succeeded || held.resp.Succeeded {
		t.Fatalf("succeeded: free %v, held %v; want true, false", free.resp.Succeeded, held.resp.Succeeded)
	}
	if kvs := held.resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || string(kvs[0].Value) != "x" {
		t.Fatalf("the refused request's read: %v", kvs)
	}
	got, err := cli.Get(ctx, "free")
	if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != free.resp.Header.Revision {
		t.Fatalf("the granted key: %v %v, want it written at the batch's revision %d", got, err, free.resp.Header.Revision)
	}

	gone := clientv3.LeaseID(0x7fff0001)
	ok1, bad, ok2 := grantLike("ok1", 0, deadline), grantLike("bad", gone, deadline), grantLike("ok2", 0, deadline)
	g.send([]*subTxn{ok1, bad, ok2})
	if ok1.err != nil || ok2.err != nil || !ok1.resp.Succeeded || !ok2.resp.Succeeded {
		t.Fatalf("the requests beside a refused one: %v %v; want both granted", ok1.err, ok2.err)
	}
	if !errors.Is(bad.err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("the request naming a lease gone: %v, want %v", bad.err, rpctypes.ErrLeaseNotFound)
	}
}

// On a real etcd: a batch of wide requests, as take builds it, is not
// refused for too many operations (each request is granted at the batch's
// one revision, not resent alone), and a request about to time out does
// not end the others' Txn.
func TestAGroupCommitBatchIsOneTxnEtcdAccepts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	g := newGroupCommit(cli, 1)
	later := time.Now().Add(10 * time.Second)
	for i := range 40 {
		g.queue = append(g.queue, wide(fmt.Sprint("w", i), 100, later))
	}
	batch := g.take(time.Now())
	g.send(batch)
	revs := map[int64]bool{}
	for _, s := range batch {
		if s.err != nil || !s.resp.Succeeded {
			t.Fatalf("%s: %v", s.key, s.err)
		}
		revs[s.resp.Header.Revision] = true
	}
	if len(revs) != 1 {
		t.Fatalf("a batch of %d committed at %d revisions: etcd refused it whole", len(batch), len(revs))
	}

	soon := grantLike("soon", 0, time.Now().Add(time.Millisecond))
	rest := []*subTxn{grantLike("r1", 0, later), soon, grantLike("r2", 0, later)}
	g.send(rest)
	for _, s := range rest {
		if s != soon && (s.err != nil || !s.resp.Succeeded) {
			t.Fatalf("%s beside a request about to time out: %v", s.key, s.err)
		}
	}
}

// Many callers at once, one Txn in flight: every request for a distinct key
// is granted exactly once, and each for one key twice is granted once.
func TestConcurrentCallersOfAGroupCommitAreEachAnswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	g := newGroupCommit(cli, 1)
	const n = 40
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted = map[string]int{}
		revs    = map[int64]bool{}
	)
	for i := range 2 * n {
		wg.Go(func() {
			key := fmt.Sprint("k", i%n)
			s := grantLike(key, 0, time.Now().Add(10*time.Second))
			octx, cancel := context.WithDeadline(ctx, s.deadline)
			defer cancel()
			resp, err := g.commit(octx, key, s.cmps, s.then, s.els)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if resp.Succeeded {
				granted[key]++
				revs[resp.Header.Revision] = true
			}
		})
	}
	wg.Wait()
	for i := range n {
		if k := fmt.Sprint("k", i); granted[k] != 1 {
			t.Errorf("%s granted %d times, want once", k, granted[k])
		}
	}
	t.Logf("%d grants at %d revisions", n, len(revs))
}

// A batch is sent again request by request only after an error etcd
// returns from its checks of the whole request, before any write. An
// error that can follow a Txn that committed (etcd's NOSPACE, returned
// after applying; a status the gRPC client made, such as a response too
// large to receive) leaves every request's outcome unknown: resent, a
// release that committed would be answered "not held", a handoff that
// committed "not handed".
func TestOnlyARefusalOfTheWholeBatchIsResent(t *testing.T) {
	for _, c := range []struct {
		err    error
		resend bool
	}{
		{rpctypes.ErrGRPCLeaseNotFound, true},
		{rpctypes.ErrGRPCTooManyOps, true},
		{rpctypes.ErrGRPCRequestTooLarge, true},
		{rpctypes.ErrGRPCPermissionDenied, true},
		{rpctypes.ErrGRPCNoSpace, false},
		{rpctypes.ErrGRPCTimeout, false},
		{rpctypes.ErrGRPCLeaderChanged, false},
		{status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000000 vs. 4194304)"), false},
		{status.Error(codes.ResourceExhausted, "transport: received RST_STREAM with error code ENHANCE_YOUR_CALM"), false},
		{status.Error(codes.FailedPrecondition, "some other precondition"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := refusedWhole(c.err); got != c.resend {
			t.Errorf("refusedWhole(%v) = %v, want %v", c.err, got, c.resend)
		}
	}
}

// A Txn stuck on a member (its answer held) does not hold back the
// requests that arrive behind it for their whole deadline: past
// stallAfter they go in a Txn beside it.
func TestAStuckBatchDoesNotHoldTheNextBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, cli := startOne(t, ctx, etcdembed.Config{})
	held := &heldAnswer{Etcd: cli, executed: make(chan struct{}), release: make(chan struct{})}
	defer close(held.release)
	g := newGroupCommit(held, 1)
	commit := func(key string) <-chan error {
		out := make(chan error, 1)
		go func() {
			s := grantLike(key, 0, time.Now().Add(10*time.Second))
			octx, cancel := context.WithDeadline(ctx, s.deadline)
			defer cancel()
			resp, err := g.commit(octx, key, s.cmps, s.then, s.els)
			if err == nil && !resp.Succeeded {
				err = errors.New("not granted")
			}
			out <- err
		}()
		return out
	}
	commit("stuck")
	<-held.executed
	// The stuck Txn stays held until the test ends: the next requests are
	// answered beside it, or at their own deadlines with an error. One is
	// asked at once (waiting when the Txn is found stalled), one after.
	if err := <-commit("queued"); err != nil {
		t.Fatalf("a request queued behind a stuck Txn: %v; want it granted in a Txn beside it", err)
	}
	for g.stalledNow() == 0 {
		time.Sleep(time.Millisecond) // the stall timer is the event
	}
	if err := <-commit("later"); err != nil {
		t.Fatalf("a request asked once a Txn was stalled: %v; want it granted in a Txn beside it", err)
	}
	g.mu.Lock()
	running, limit := g.running, g.limit()
	g.mu.Unlock()
	if running > limit || limit > g.inflight+maxStalled {
		t.Fatalf("%d runners for a limit of %d", running, limit)
	}
}

func (g *groupCommit) stalledNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stalled
}
