package arbiter_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Only the watch on the hold key can wake a waiter whose key is released
// through another arbiter: that arbiter has no waiter to hand the key to,
// so its release is a plain delete, and the waiter's own arbiter polls once
// an hour. Each wait ends long before the poll could fire, so a waiter that
// is granted was woken by the watch, from its refused Txn's revision on.
func TestWaiterIsWokenByTheReleaseWatch(t *testing.T) {
	const poll = time.Hour
	env := devenvtest.Start(t, devenv.Options{PollInterval: poll})
	ctx := ctxT(t, time.Minute)
	other := secondArbiter(t, env, poll)
	// The holder works through the other arbiter, the waiter through env's.
	a := devenvtest.Session(t, other.client(t, "demo"), "")
	bc := devenvtest.Client(t, env, "other")
	b := devenvtest.Session(t, bc, "")
	queued := queuedOn(t, env)
	for i := 0; i < 5; i++ {
		key := fmt.Sprintf("team-a/watch/%d", i)
		h, err := a.TryLock(ctx, key, noFence)
		if err != nil {
			t.Fatal(err)
		}
		// One Acquire, no client retries: a retry's first attempt would
		// find the key free without any wake-up. Its deadline is far
		// inside the poll interval, so only the watch can end it granted.
		wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		got := make(chan *lockv1.AcquireResponse, 1)
		failed := make(chan error, 1)
		go func() {
			defer cancel()
			r, err := raw(bc).Acquire(wctx, &lockv1.AcquireRequest{Key: key, SessionId: b.ID(), Instance: b.Instance(), Wait: true})
			if err != nil {
				failed <- err
				return
			}
			got <- r
		}()
		// Release only once b's refused Txn has happened, or the watch
		// would start after the delete and the test would prove nothing.
		awaitQueued(t, ctx, queued, key)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		var r *lockv1.AcquireResponse
		select {
		case r = <-got:
		case err := <-failed:
			t.Fatalf("waiter %d was not woken by the release on another arbiter (poll every %s): %v", i, poll, err)
		}
		resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != b.ID() || resp.Kvs[0].ModRevision != int64(r.Token.Revision) {
			t.Fatalf("waiter %d was answered %v but the hold is %v (err %v)", i, r.Token, resp.Kvs, err)
		}
		if _, err := raw(bc).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: b.ID(), Token: r.Token.Value}); err != nil {
			t.Fatal(err)
		}
	}
	// Nothing was handed over in a release Txn: every grant was the
	// waiter's own attempt after its watch saw the delete.
	if n := counter(t, env, "lockplane_handoffs_total"); n != 0 {
		t.Fatalf("%v handoffs: the release was not on the other arbiter", n)
	}
}

// peer is a second arbiter on env's etcd cluster, with its own etcd client
// and gRPC server, as another replica behind Envoy would be.
type peer struct {
	env  *devenv.Env
	addr string
}

// secondArbiter starts a peer of env's arbiter, stopped with the test.
func secondArbiter(t *testing.T, env *devenv.Env, poll time.Duration) *peer {
	t.Helper()
	cli, err := etcdauth.New(env.Cluster.ClientConfig(etcdauth.Arbiter))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	src, err := env.Profile.Source("arbiter")
	if err != nil {
		t.Fatal(err)
	}
	self, err := identity.ID(src)
	if err != nil {
		t.Fatal(err)
	}
	a, err := arbiter.New(arbiter.Config{
		Etcd: cli, Cluster: "embedded", Self: self, Classes: class.NewStatic(devenvtest.Fast), AllowAnyWorkload: true,
		IsOperator:   arbiter.OperatorPathPrefix(spiffeid.RequireTrustDomainFromString(devenv.TrustDomain), "/operator/"),
		OpTimeout:    devenvtest.OpTimeout,
		PollInterval: poll,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go a.Run(ctx)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	if err := a.Ready(rctx); err != nil {
		t.Fatal(err)
	}
	creds, err := identity.ServerCredentials(src)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(creds))
	a.Register(srv)
	go srv.Serve(lis)
	t.Cleanup(func() { a.Drain(); srv.Stop() })
	return &peer{env: env, addr: lis.Addr().String()}
}

// client dials the peer as the named development identity.
func (p *peer) client(t *testing.T, name string) *lockclient.Client {
	t.Helper()
	src, err := p.env.Profile.Source(name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := lockclient.Dial(lockclient.Config{Target: p.addr, Identity: src, ServerID: p.env.Profile.ServerID})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.Close(ctx)
	})
	return c
}

// queuedOn returns a channel that receives the key of each waiter that
// joins a queue on env's arbiter (behind a Router, any cluster's) from now
// on: the arbiter's Queued hook, which fires once per waiting Acquire,
// after its refused attempt.
func queuedOn(t *testing.T, env *devenv.Env) <-chan string {
	t.Helper()
	queued := make(chan string, 64)
	setHooks(t, env, func(done <-chan struct{}) *arbiter.TestHooks {
		return &arbiter.TestHooks{Queued: func(key string, _ int64) { send(done, queued, key) }}
	})
	return queued
}

// answer is an Acquire's answer as the arbiter decided it.
type answer struct {
	key     string
	session int64
	err     error
}

// hooksOn is queuedOn, and also a channel that receives each Acquire's
// answer as the arbiter decided it (its Answered hook), whether or not
// the caller was still there to hear it.
func hooksOn(t *testing.T, env *devenv.Env) (<-chan string, <-chan answer) {
	t.Helper()
	queued, answered := make(chan string, 64), make(chan answer, 64)
	setHooks(t, env, func(done <-chan struct{}) *arbiter.TestHooks {
		return &arbiter.TestHooks{
			Queued:   func(key string, _ int64) { send(done, queued, key) },
			Answered: func(key string, session int64, err error) { send(done, answered, answer{key, session, err}) },
		}
	})
	return queued, answered
}

// setHooks installs the hooks made for env's arbiter (behind a Router,
// every cluster's) until the test ends; done is closed then, so that a
// hook blocked on a full channel returns rather than hold the arbiter.
func setHooks(t *testing.T, env *devenv.Env, hooks func(done <-chan struct{}) *arbiter.TestHooks) {
	var hooked interface{ SetTestHooks(*arbiter.TestHooks) } = env.Arbiter
	if env.Router != nil {
		hooked = env.Router
	}
	done := make(chan struct{})
	hooked.SetTestHooks(hooks(done))
	t.Cleanup(func() { close(done); hooked.SetTestHooks(nil) })
}

// send delivers v unless the test has ended.
func send[T any](done <-chan struct{}, ch chan<- T, v T) {
	select {
	case ch <- v:
	case <-done:
	}
}

// wantContended checks a wait that ran out its deadline: the arbiter
// answered CONTENDED, and the client heard that or, when the answer took
// longer than the arbiter's margin (200 ms at most) to reach it on a
// loaded machine, its own DEADLINE_EXCEEDED.
func wantContended(t *testing.T, ctx context.Context, answered <-chan answer, key string, session int64, heard error) {
	t.Helper()
	for {
		select {
		case a := <-answered:
			if a.key != key || a.session != session {
				continue
			}
			if reason.Of(a.err) != lockv1.ErrorReason_CONTENDED {
				t.Fatalf("the arbiter answered %v (reason %s), want CONTENDED", a.err, reason.Of(a.err))
			}
			if reason.Of(heard) != lockv1.ErrorReason_CONTENDED && status.Code(heard) != codes.DeadlineExceeded {
				t.Fatalf("the client heard %v, want CONTENDED or its own deadline", heard)
			}
			return
		case <-ctx.Done():
			t.Fatalf("the arbiter never answered the wait on %s: %v", key, ctx.Err())
		}
	}
}

// awaitQueued blocks until the next waiter for key has joined its queue.
func awaitQueued(t *testing.T, ctx context.Context, queued <-chan string, key string) {
	t.Helper()
	for {
		select {
		case k := <-queued:
			if k == key {
				return
			}
		case <-ctx.Done():
			t.Fatalf("no waiter for %s joined its queue: %v", key, ctx.Err())
		}
	}
}

// A notification is a hint (ADR-15): a delete whose key is taken again
// before the waiter's Txn must not let the waiter in.
func TestDeleteNotificationNeverGrantsByItself(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	thief := devenvtest.Session(t, devenvtest.Client(t, env, "alice"), "")
	queued := queuedOn(t, env)
	wins := map[string]int{}
	defer func() { t.Logf("race outcomes over 10 rounds: %v", wins) }()
	for i := 0; i < 10; i++ {
		key := fmt.Sprintf("team-a/hint/%d", i)
		if _, err := a.TryLock(ctx, key, noFence); err != nil {
			t.Fatal(err)
		}
		granted := make(chan *lockclient.Hold, 1)
		go func() {
			h, err := b.Lock(ctx, key, noFence)
			if err == nil {
				granted <- h
			}
		}()
		awaitQueued(t, ctx, queued, key)
		// Delete a's hold behind the arbiter's back and let the thief
		// race the woken waiter for it.
		if _, err := env.Etcd.Delete(ctx, lockkey.HoldKey(key)); err != nil {
			t.Fatal(err)
		}
		th, terr := thief.TryLock(ctx, key, noFence)
		var wh *lockclient.Hold
		if terr != nil {
			if r := reason.Of(terr); r != lockv1.ErrorReason_CONTENDED {
				t.Fatal(terr)
			}
			wh = <-granted // the waiter won the race fairly, by its Txn
		}
		resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
		if err != nil || len(resp.Kvs) != 1 {
			t.Fatalf("round %d: %d holds", i, len(resp.Kvs))
		}
		owner := resp.Kvs[0].Lease
		if th != nil {
			wins["thief"]++
		} else {
			wins["waiter"]++
		}
		switch {
		case th != nil && owner != thief.ID():
			t.Fatalf("round %d: the thief was granted but the hold is on session %d", i, owner)
		case wh != nil && owner != b.ID():
			t.Fatalf("round %d: the waiter was granted but the hold is on session %d", i, owner)
		}
		select {
		case <-granted:
			if th != nil {
				t.Fatalf("round %d: waiter and thief both granted", i)
			}
		default:
		}
		env.Etcd.Delete(ctx, lockkey.HoldKey(key), clientv3.WithPrefix())
	}
}

// counter sums a counter family across its label sets.
func counter(t *testing.T, env *devenv.Env, name string) float64 {
	t.Helper()
	fams, _ := env.Registry.Gather()
	var total float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// Waiters on one arbiter are granted in arrival order, and a release makes
// one grant attempt (the head's), not one per waiter (ADR-14).
func TestWaitersAreGrantedInArrivalOrderOneAttemptPerRelease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key, n = "team-a/fifo/1", 6
	holder := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	h, err := holder.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	type granted struct {
		i    int
		hold *lockclient.Hold
	}
	grants := make(chan granted, n)
	queued := queuedOn(t, env)
	for i := 0; i < n; i++ {
		s := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
		go func() {
			hold, err := s.Lock(ctx, key, noFence)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			grants <- granted{i, hold}
		}()
		awaitQueued(t, ctx, queued, key) // arrival order is the order they queued
	}
	before := counter(t, env, "lockplane_grant_attempts_total")
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	inOrder := 0
	for want := 0; want < n; want++ {
		g := <-grants
		if g.i == want {
			inOrder++
		}
		// Exactly one attempt per release so far: the head's.
		if got := counter(t, env, "lockplane_grant_attempts_total") - before; got != float64(want+1) {
			t.Fatalf("after %d releases %v grant attempts were made, want %d", want+1, got, want+1)
		}
		if err := g.hold.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Every release handed the key to the next head in its own Txn.
	if got := counter(t, env, "lockplane_handoffs_total"); got != n {
		t.Fatalf("%v of %d grants were handoffs", got, n)
	}
	t.Logf("%d of %d grants in arrival order", inOrder, n)
	if inOrder != n {
		t.Fatalf("only %d of %d grants in arrival order on one arbiter", inOrder, n)
	}
}

// A waiter whose wait ended is out of the queue: the next release hands
// the key to the waiter behind it, never to the one that gave up.
func TestAWaiterThatGaveUpIsNeverHandedTheKey(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/handoff/gave-up"
	h, err := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "").TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	quitter := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	patient := devenvtest.Session(t, devenvtest.Client(t, env, "alice"), "")
	queued, answered := hooksOn(t, env)
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	_, qerr := quitter.Lock(short, key, noFence)
	wantContended(t, ctx, answered, key, quitter.ID(), qerr)
	// The quitter's own wait: once per attempt, each sent before its answer.
	if len(queued) == 0 {
		t.Fatal("the quitter never joined the queue")
	}
	for len(queued) > 0 {
		<-queued
	}
	got := make(chan error, 1)
	go func() {
		_, err := patient.Lock(ctx, key, noFence)
		got <- err
	}()
	awaitQueued(t, ctx, queued, key)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease != patient.ID() {
		t.Fatalf("the hold is not the patient waiter's: %v %v", resp, err)
	}
	if got := counter(t, env, "lockplane_handoffs_total"); got != 1 {
		t.Fatalf("%v handoffs, want 1 (to the patient waiter)", got)
	}
}

// A release whose head waiter's session is gone is a plain release: the
// key is free, and the waiter learns its session expired.
func TestHandoffToAnExpiredSessionFallsBackToRelease(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/handoff/expired"
	h, err := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "").TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	waiter := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	queued := queuedOn(t, env)
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Lock(ctx, key, noFence)
		got <- err
	}()
	awaitQueued(t, ctx, queued, key)
	// The waiter's lease ends behind the arbiter's back.
	if _, err := env.Etcd.Revoke(ctx, clientv3.LeaseID(waiter.ID())); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The arbiter answers the waiter SESSION_EXPIRED; on a slow machine
	// the waiter's own keepalive may learn first that its lease ended, and
	// the client ends the wait as fenced. Either way it learns.
	if err := <-got; !errors.Is(err, lockclient.ErrFenced) {
		wantReason(t, err, lockv1.ErrorReason_SESSION_EXPIRED)
	}
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("the key is still held after the release: %v %v", resp, err)
	}
	if got := counter(t, env, "lockplane_handoffs_total"); got != 0 {
		t.Fatalf("%v handoffs to an expired session", got)
	}
}

// Drain ends a wait at once with DRAINING rather than holding a rolling
// restart up for as long as the wait.
func TestDrainEndsWaitsWithDraining(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{PollInterval: time.Hour})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/drain/1"
	if _, err := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "").TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	w := raw(devenvtest.Client(t, env, "other"))
	s, err := w.OpenSession(ctx, &lockv1.OpenSessionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	queued := queuedOn(t, env)
	got := make(chan error, 1)
	go func() {
		_, err := w.Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.SessionId, Wait: true})
		got <- err
	}()
	awaitQueued(t, ctx, queued, key)
	env.Arbiter.Drain()
	wantReason(t, <-got, lockv1.ErrorReason_DRAINING)
}
