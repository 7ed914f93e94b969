package arbiter

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A durable waiter whose Acquire ended without giving up its place (its
// arbiter drained) retries, finds its queue key and keeps its place. The
// key's record must then carry the retry's deadline: with the first
// call's, once that passes the waiter behind takes the live retry for an
// Acquire that has ended, deletes its key, and the retry loses its place.
// The record here says the first call's deadline passed 10 s ago, as it
// will while the retry still waits; the retry's own runs a minute.
func TestADurableRetryKeepsItsPlaceBeyondItsFirstDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli := oneMember(t, ctx)
	a := readyArbiter(t, ctx, cli)
	durable := class.Default
	durable.Fairness = class.FairnessDurable
	open := func(name string) (request, int64) {
		r, s := openTestSession(t, ctx, cli, name, "team-a/retry/1")
		r.class = durable
		return r, s
	}
	holder, hs := open("holder")
	retried, rs := open("retried")
	behind, bs := open("behind")
	held, err := a.acquire(ctx, holder, hs, false)
	if err != nil {
		t.Fatal(err)
	}
	// The first call's queue key, left in place by a drain.
	waitKey := lockkey.WaitKey(retried.key, rs)
	first, _ := json.Marshal(waitRecord{Identity: retried.caller.String(), Until: time.Now().Add(-10 * time.Second).UTC(), Queued: time.Now().Add(-time.Minute).UTC()})
	put, err := cli.Put(ctx, waitKey, string(first), clientv3.WithLease(clientv3.LeaseID(rs)))
	if err != nil {
		t.Fatal(err)
	}
	place := put.Header.Revision

	queued := make(chan struct{})
	var once sync.Once
	a.SetTestHooks(&TestHooks{Queued: func(_ string, s int64) {
		if s == rs {
			once.Do(func() { close(queued) })
		}
	}})
	type result struct {
		g   grant
		err error
	}
	out := make(chan result, 1)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		g, err := a.acquire(rctx, retried, rs, true)
		out <- result{g, err}
	}()
	select {
	case <-queued:
	case <-ctx.Done():
		t.Fatal("the retried Acquire never found its queue key")
	}

	// The waiter behind waits a little while and gives up; meanwhile it
	// reads the record of the waiter ahead.
	bctx, bcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = a.acquire(bctx, behind, bs, true)
	bcancel()
	if err == nil {
		t.Fatal("the waiter behind was granted while the holder held the key")
	}
	get, err := cli.Get(ctx, waitKey)
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) == 0 || get.Kvs[0].CreateRevision != place {
		t.Fatalf("the retried waiter's queue key (created at %d) was removed as stale while its Acquire was live: it lost its place", place)
	}
	var rec waitRecord
	if err := json.Unmarshal(get.Kvs[0].Value, &rec); err != nil || !rec.Until.After(time.Now()) || !rec.Queued.Equal(mustQueued(t, first)) {
		t.Fatalf("the retried waiter's record %s: want the retry's deadline and the first queueing time", get.Kvs[0].Value)
	}
	if _, err := a.releaseHold(ctx, holder, hs, held.token); err != nil {
		t.Fatal(err)
	}
	if r := <-out; r.err != nil {
		t.Fatalf("the retried waiter, first in the queue, was not granted: %v", r.err)
	}
}

func mustQueued(t *testing.T, rec []byte) time.Time {
	t.Helper()
	var w waitRecord
	if err := json.Unmarshal(rec, &w); err != nil {
		t.Fatal(err)
	}
	return w.Queued
}

// Extending a retried waiter's deadline is a write of its own, and it can
// fail. The retry must not then end with its queue key left behind (an
// error answered with the key in place, nothing dequeued): it keeps its
// place with the first call's deadline and goes on waiting, granted in
// turn, or, when its wait ends, dequeued like any waiter.
func TestADurableRetryWhoseDeadlineCannotBeExtendedLeavesNoQueueKey(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	durable := class.Default
	durable.Fairness = class.FairnessDurable
	for _, tc := range []struct {
		name    string
		wait    time.Duration
		release bool
	}{
		{"granted in turn", time.Minute, true},
		{"the wait ends", 2 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cli := oneMember(t, ctx)
			e := &failExtendEtcd{Etcd: cli}
			a, err := New(Config{Etcd: e, AllowAnyWorkload: true})
			if err != nil {
				t.Fatal(err)
			}
			if err := a.Ready(ctx); err != nil {
				t.Fatal(err)
			}
			holder, hs := openTestSession(t, ctx, cli, "holder", "team-a/retry/2")
			retried, rs := openTestSession(t, ctx, cli, "retried", holder.key)
			holder.class, retried.class = durable, durable
			held, err := a.acquire(ctx, holder, hs, false)
			if err != nil {
				t.Fatal(err)
			}
			// The first call's queue key, its deadline passed, left by a drain.
			waitKey := lockkey.WaitKey(retried.key, rs)
			e.waitKey = waitKey
			first, _ := json.Marshal(waitRecord{Identity: retried.caller.String(), Until: time.Now().Add(-10 * time.Second).UTC(), Queued: time.Now().Add(-time.Minute).UTC()})
			if _, err := cli.Put(ctx, waitKey, string(first), clientv3.WithLease(clientv3.LeaseID(rs))); err != nil {
				t.Fatal(err)
			}
			queued := make(chan struct{})
			var once sync.Once
			a.SetTestHooks(&TestHooks{Queued: func(_ string, s int64) {
				if s == rs {
					once.Do(func() { close(queued) })
				}
			}})
			type result struct {
				g   grant
				err error
			}
			out := make(chan result, 1)
			go func() {
				rctx, cancel := context.WithTimeout(ctx, tc.wait)
				defer cancel()
				g, err := a.acquire(rctx, retried, rs, true)
				out <- result{g, err}
			}()
			var r result
			select {
			case <-queued:
				if e.failed.Load() == 0 {
					t.Fatal("the retry never tried to extend its deadline")
				}
				if tc.release {
					if _, err := a.releaseHold(ctx, holder, hs, held.token); err != nil {
						t.Fatal(err)
					}
				}
				r = <-out
			case r = <-out:
			case <-ctx.Done():
				t.Fatal("the retried Acquire never found its queue key")
			}
			get, err := cli.Get(ctx, waitKey)
			if err != nil {
				t.Fatal(err)
			}
			if len(get.Kvs) > 0 {
				t.Fatalf("the retry, its deadline not extended, answered %s (%v), and its queue key (created at %d) remains ahead of every later waiter",
					reason.Of(r.err), r.err, get.Kvs[0].CreateRevision)
			}
			switch {
			case tc.release && r.err != nil:
				t.Fatalf("the retried waiter, first in the queue, was not granted: %v", r.err)
			case !tc.release && reason.Of(r.err) != lockv1.ErrorReason_CONTENDED:
				t.Fatalf("the wait ended with %s (%v); want CONTENDED", reason.Of(r.err), r.err)
			}
		})
	}
}

// failExtendEtcd is a real etcd client that fails each Txn which
// rewrites waitKey without an Else branch (extendWait's; the enqueue's
// has one) as if etcd fell silent.
type failExtendEtcd struct {
	Etcd
	waitKey string
	failed  atomic.Int32
}

func (e *failExtendEtcd) Txn(ctx context.Context) clientv3.Txn {
	return &failExtendTxn{Txn: e.Etcd.Txn(ctx), e: e}
}

type failExtendTxn struct {
	clientv3.Txn
	e                *failExtendEtcd
	putsKey, hasElse bool
}

func (x *failExtendTxn) If(cs ...clientv3.Cmp) clientv3.Txn { x.Txn = x.Txn.If(cs...); return x }

func (x *failExtendTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	for _, op := range ops {
		x.putsKey = x.putsKey || op.IsPut() && string(op.KeyBytes()) == x.e.waitKey
	}
	x.Txn = x.Txn.Then(ops...)
	return x
}

func (x *failExtendTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	x.hasElse = x.hasElse || len(ops) > 0
	x.Txn = x.Txn.Else(ops...)
	return x
}

func (x *failExtendTxn) Commit() (*clientv3.TxnResponse, error) {
	if x.putsKey && !x.hasElse {
		x.e.failed.Add(1)
		return nil, status.Error(codes.Unavailable, "test: etcd fell silent")
	}
	return x.Txn.Commit()
}
