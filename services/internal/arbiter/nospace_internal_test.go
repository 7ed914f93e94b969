package arbiter

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/lockkey"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A NOSPACE error can reach the arbiter after its grant Txn was applied:
// the client's answer was lost and its retry met the alarm that the write
// itself raised. A definite refusal (STORE_FULL) then leaves a hold the
// client does not know of, blocking the key until its session ends. The
// arbiter must answer the grant it finds, or say the outcome is unknown.
func TestNoSpaceAfterAnAppliedGrantLeavesNoHoldBehindARefusal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	durable := class.Default
	durable.Fairness = class.FairnessDurable
	for _, tc := range []struct {
		name string
		cls  class.Class
		wait bool
	}{
		{"try-lock", class.Default, false},
		{"durable try-lock", durable, false},
		{"durable wait", durable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, a := noSpaceArbiter(t, ctx)
			r, session := openTestSession(t, ctx, e.cli, "filler", "team-a/full/1")
			r.class = tc.cls
			e.noSpaceAfterApply.Store(true)
			g, err := a.acquire(ctx, r, session, tc.wait)
			if e.noSpaceAfterApply.Load() {
				t.Fatal("the grant Txn never reached etcd")
			}
			noOrphan(t, ctx, e.cli, r.key, session, g, err)
			if err != nil {
				t.Fatalf("answered %s (%v); want the grant that etcd applied", reason.Of(err), err)
			}
		})
	}
	t.Run("the lookup fails", func(t *testing.T) {
		e, a := noSpaceArbiter(t, ctx)
		r, session := openTestSession(t, ctx, e.cli, "blind", "team-a/full/2")
		e.noSpaceAfterApply.Store(true)
		e.failAfterNoSpace = true
		g, err := a.acquire(ctx, r, session, false)
		noOrphan(t, ctx, e.cli, r.key, session, g, err)
		if why := reason.Of(err); why != lockv1.ErrorReason_STORE_ERROR {
			t.Fatalf("answered %s (%v); want STORE_ERROR, an outcome the client cleans up after", why, err)
		}
	})
}

// A durable waiter's queue key is a write too. NOSPACE after its enqueue
// was applied, answered STORE_FULL with the key left in place, makes an
// orphan: the client gives up, and its key blocks every waiter behind it
// until its deadline and the grace after it pass. The key is held first,
// so that the first write etcd applies under the armed alarm is the
// enqueue, not a grant.
func TestNoSpaceAfterAnAppliedEnqueueLeavesNoQueueKeyBehindARefusal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	durable := class.Default
	durable.Fairness = class.FairnessDurable
	for _, tc := range []struct {
		name      string
		silent    bool
		wantIfErr lockv1.ErrorReason
	}{
		{"the key is removed", false, lockv1.ErrorReason_STORE_FULL},
		{"the removal fails", true, lockv1.ErrorReason_STORE_ERROR},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, a := noSpaceArbiter(t, ctx)
			holder, hs := openTestSession(t, ctx, e.cli, "holder", "team-a/full/5")
			waiter, ws := openTestSession(t, ctx, e.cli, "waiter", holder.key)
			holder.class, waiter.class = durable, durable
			if _, err := a.acquire(ctx, holder, hs, false); err != nil {
				t.Fatal(err)
			}
			e.noSpaceAfterApply.Store(true)
			e.failAfterNoSpace = tc.silent
			_, err := a.acquire(ctx, waiter, ws, true)
			if e.noSpaceAfterApply.Load() {
				t.Fatal("the enqueue Txn never reached etcd")
			}
			if err == nil {
				t.Fatal("the waiter was granted a key its holder still holds")
			}
			e.failing.Store(false)
			get, gerr := e.cli.Get(ctx, lockkey.WaitKey(waiter.key, ws))
			if gerr != nil {
				t.Fatal(gerr)
			}
			if !mayHaveApplied(err) && len(get.Kvs) > 0 {
				t.Fatalf("answered %s (%v), a definite refusal, yet the waiter's queue key (created at %d) remains: an orphan ahead of every later waiter",
					reason.Of(err), err, get.Kvs[0].CreateRevision)
			}
			if why := reason.Of(err); why != tc.wantIfErr {
				t.Fatalf("answered %s (%v); want %s", why, err, tc.wantIfErr)
			}
			if mayHaveApplied(err) {
				// The client cleans up after an unknown outcome: Release with
				// any_token, a delete, which etcd serves under the alarm.
				if _, err := a.releaseAny(ctx, waiter, ws); err != nil {
					t.Fatal(err)
				}
				if get, err := e.cli.Get(ctx, lockkey.WaitKey(waiter.key, ws)); err != nil || len(get.Kvs) > 0 {
					t.Fatalf("the waiter's queue key after Release with any_token: %v (err %v)", get.Kvs, err)
				}
			}
		})
	}
}

// A release that hands the key to a waiter writes the waiter's hold: a Put,
// which etcd refuses under its NOSPACE alarm. Refused with STORE_FULL, the
// releasing client forgets a hold that is still there, and the key stays
// held until its session ends. Under the alarm deletes still work: the
// release must end the hold (the waiter then attempts on its own).
func TestAReleaseWithAWaiterUnderTheNoSpaceAlarmEndsTheHold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, a := noSpaceArbiter(t, ctx)
	holder, hs := openTestSession(t, ctx, e.cli, "holder", "team-a/full/3")
	waiter, ws := openTestSession(t, ctx, e.cli, "waiter", holder.key)
	held, err := a.attempt(ctx, holder, hs)
	if err != nil {
		t.Fatal(err)
	}
	result := queueWaiter(t, ctx, a, waiter, ws)
	e.raiseNoSpace(ctx, t)
	released, err := a.releaseHold(ctx, holder, hs, held.token)
	t.Logf("release under the alarm: released %v, err %v", released, err)
	if err != nil && !mayHaveApplied(err) {
		// A definite refusal: the client forgets the hold, so it must be gone.
		if get := holdOf(t, ctx, e.cli, holder.key); get != nil && get.Lease == hs {
			t.Fatalf("release answered %s (%v), yet the holder's hold remains: an orphan until its session ends", reason.Of(err), err)
		}
	}
	if !released {
		t.Fatalf("the release did not end the hold (err %v)", err)
	}
	r := <-result
	noOrphan(t, ctx, e.cli, waiter.key, ws, r.g, r.err)
}

// A handoff whose Txn was applied but answered NOSPACE: the releaser's
// hold is gone (the release happened) and the waiter, whose own attempt
// meets the alarm, finds the handoff's grant and is answered it.
func TestAHandoffAppliedThenAnsweredNoSpaceIsTheWaitersGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, a := noSpaceArbiter(t, ctx)
	holder, hs := openTestSession(t, ctx, e.cli, "holder", "team-a/full/4")
	waiter, ws := openTestSession(t, ctx, e.cli, "waiter", holder.key)
	held, err := a.attempt(ctx, holder, hs)
	if err != nil {
		t.Fatal(err)
	}
	result := queueWaiter(t, ctx, a, waiter, ws)
	e.noSpaceAfterApply.Store(true)
	released, err := a.releaseHold(ctx, holder, hs, held.token)
	if e.noSpaceAfterApply.Load() {
		t.Fatal("the handoff Txn never reached etcd")
	}
	t.Logf("release: released %v, err %v", released, err)
	if err == nil && !released {
		t.Fatal("the handoff applied, yet the release was answered as not releasing the hold")
	}
	r := <-result
	noOrphan(t, ctx, e.cli, waiter.key, ws, r.g, r.err)
	if r.err != nil {
		t.Fatalf("the waiter was answered %s (%v); want the grant the handoff applied", reason.Of(r.err), r.err)
	}
}

type waitResult struct {
	g   grant
	err error
}

// queueWaiter starts a memory-fairness wait of r and returns once it is
// in the arbiter's queue.
func queueWaiter(t *testing.T, ctx context.Context, a *Arbiter, r request, session int64) <-chan waitResult {
	t.Helper()
	queued := make(chan struct{})
	var once sync.Once
	a.SetTestHooks(&TestHooks{Queued: func(key string, s int64) {
		if s == session {
			once.Do(func() { close(queued) })
		}
	}})
	out := make(chan waitResult, 1)
	go func() {
		g, err := a.acquire(ctx, r, session, true)
		out <- waitResult{g, err}
	}()
	select {
	case <-queued:
	case <-ctx.Done():
		t.Fatal("the waiter never queued")
	}
	return out
}

// noOrphan fails t if an Acquire's answer and the key's hold disagree: a
// grant must be the session's hold, and a definite refusal must leave no
// hold of the session's. An answer that says its outcome is unknown may
// leave one: the client ends it (Release with any_token).
func noOrphan(t *testing.T, ctx context.Context, cli *clientv3.Client, key string, session int64, g grant, err error) {
	t.Helper()
	kv := holdOf(t, ctx, cli, key)
	switch {
	case err == nil:
		if kv == nil || kv.Lease != session || kv.ModRevision != g.token.Revision() {
			t.Fatalf("granted token %d, but the hold is %v", g.token, kv)
		}
	case mayHaveApplied(err):
	case kv != nil && kv.Lease == session:
		t.Fatalf("answered %s (%v), a definite refusal, yet the session holds the key (revision %d): an orphan hold until the session ends",
			reason.Of(err), err, kv.ModRevision)
	}
}

// mayHaveApplied is the client library's outcomeUnknown (lockclient).
func mayHaveApplied(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_NO_QUORUM, lockv1.ErrorReason_STORE_ERROR:
		return true
	case lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return err != nil
	}
	return false
}

func holdOf(t *testing.T, ctx context.Context, cli *clientv3.Client, key string) *struct{ Lease, ModRevision int64 } {
	t.Helper()
	get, err := cli.Get(ctx, lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(get.Kvs) == 0 {
		return nil
	}
	return &struct{ Lease, ModRevision int64 }{get.Kvs[0].Lease, get.Kvs[0].ModRevision}
}

// noSpaceArbiter is an Arbiter over a real one-member etcd whose client
// is noSpaceEtcd.
func noSpaceArbiter(t *testing.T, ctx context.Context) (*noSpaceEtcd, *Arbiter) {
	t.Helper()
	e := &noSpaceEtcd{Etcd: oneMember(t, ctx)}
	e.cli = e.Etcd.(*clientv3.Client)
	a, err := New(Config{Etcd: e, AllowAnyWorkload: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	return e, a
}

// noSpaceEtcd is a real etcd client whose next Txn that applies a Put,
// once armed, is answered with etcd's NOSPACE error, as a client sees
// when its answer is lost and its retry meets the alarm: the alarm is
// raised for real (etcd takes no Put from then on). failAfterNoSpace
// makes every Txn and Get after that one fail as if etcd fell silent.
type noSpaceEtcd struct {
	Etcd
	cli               *clientv3.Client
	noSpaceAfterApply atomic.Bool
	failAfterNoSpace  bool
	failing           atomic.Bool
}

func (e *noSpaceEtcd) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	if e.failing.Load() {
		return nil, status.Error(codes.Unavailable, "test: etcd fell silent")
	}
	return e.Etcd.Get(ctx, key, opts...)
}

func (e *noSpaceEtcd) Txn(ctx context.Context) clientv3.Txn {
	return &noSpaceTxn{Txn: e.Etcd.Txn(ctx), ctx: ctx, e: e}
}

// raiseNoSpace raises etcd's NOSPACE alarm on its member, as etcd does
// itself when its backend reaches the quota.
func (e *noSpaceEtcd) raiseNoSpace(ctx context.Context, t *testing.T) {
	t.Helper()
	st, err := e.cli.Status(ctx, e.cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	_, err = pb.NewMaintenanceClient(e.cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	if err != nil {
		t.Fatal(err)
	}
	// The alarm is in force: a Put is refused.
	if _, err := e.cli.Put(ctx, "/test/nospace", "x"); !isNoSpace(err) {
		t.Fatalf("a Put under the alarm: %v, want NOSPACE", err)
	}
}

func isNoSpace(err error) bool {
	return err != nil && rpctypes.ErrorDesc(err) == rpctypes.ErrNoSpace.Error()
}

type noSpaceTxn struct {
	clientv3.Txn
	ctx       context.Context
	e         *noSpaceEtcd
	then, els []clientv3.Op
}

func (x *noSpaceTxn) If(cs ...clientv3.Cmp) clientv3.Txn { x.Txn = x.Txn.If(cs...); return x }

func (x *noSpaceTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	x.then = append(x.then, ops...)
	x.Txn = x.Txn.Then(ops...)
	return x
}

func (x *noSpaceTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	x.els = append(x.els, ops...)
	x.Txn = x.Txn.Else(ops...)
	return x
}

func (x *noSpaceTxn) Commit() (*clientv3.TxnResponse, error) {
	if x.e.failing.Load() {
		return nil, status.Error(codes.Unavailable, "test: etcd fell silent")
	}
	resp, err := x.Txn.Commit()
	if err != nil || !appliedPut(x.then, x.els, resp.Succeeded, resp.Responses) || !x.e.noSpaceAfterApply.CompareAndSwap(true, false) {
		return resp, err
	}
	_, aerr := pb.NewMaintenanceClient(x.e.cli.ActiveConnection()).Alarm(x.ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: resp.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	if aerr != nil {
		return nil, aerr
	}
	x.e.failing.Store(x.e.failAfterNoSpace)
	return nil, rpctypes.ErrGRPCNoSpace
}

// appliedPut reports whether a Txn with branches then and els, which
// took then if succeeded and answered responses, applied a Put (in the
// branch taken, or in a nested Txn's): a Txn whose Put was not applied
// (a grant refused as contended) does not set the alarm off.
func appliedPut(then, els []clientv3.Op, succeeded bool, responses []*pb.ResponseOp) bool {
	ops := els
	if succeeded {
		ops = then
	}
	for i, op := range ops {
		if op.IsPut() {
			return true
		}
		if op.IsTxn() && i < len(responses) {
			_, subThen, subEls := op.Txn()
			sub := responses[i].GetResponseTxn()
			if sub != nil && appliedPut(subThen, subEls, sub.Succeeded, sub.Responses) {
				return true
			}
		}
	}
	return false
}
