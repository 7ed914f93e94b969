package arbiter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// actionState is action id's state as an operator is shown it.
func actionState(t *testing.T, ctx context.Context, admin adminv1.AdminServiceClient, id string) string {
	t.Helper()
	got, err := admin.GetAction(as(ctx, "tok-bob"), &adminv1.GetActionRequest{Id: id})
	if err != nil {
		t.Fatalf("get action %s: %v", id, err)
	}
	return got.GetAction().GetState()
}

// An approval whose Txn committed but whose answer was lost (a deadline
// passing after the commit) is read back: the force record stays, the
// holder is told, and the request is approved, not put back to pending
// and later marked failed with "nothing was released".
func TestForceReleaseCommittedButUnanswered(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := make(chan string, 1)
	if _, err := s.TryLock(ctx, "jobs/unanswered", func(h *lockclient.Hold) { fenced <- h.Key() }); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/unanswered")
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionTxn: func(string) (bool, error) { return true, context.DeadlineExceeded }})
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	env.Arbiter.SetTestHooks(nil)
	if err != nil {
		t.Fatalf("an approval that committed was reported failed: %v", err)
	}
	if r.GetAction().GetState() != "approved" || r.GetForceRelease().GetRecord() != arbiter.ForceKey(act.GetId()) ||
		r.GetForceRelease().GetRevision() == 0 || len(r.GetForceRelease().GetReleased()) != 1 {
		t.Fatalf("approve = %v", r)
	}
	if holdRev(t, ctx, env.Etcd, "jobs/unanswered") != 0 {
		t.Fatal("the hold is still there")
	}
	select {
	case <-fenced:
	case <-time.After(5 * devenvtest.Fast.TTL):
		t.Fatal("the holder was never told: the force record went with its lease")
	}
	if fr, err := env.Etcd.Get(ctx, arbiter.ForceKey(act.GetId())); err != nil || len(fr.Kvs) != 1 {
		t.Fatalf("the force record of a committed approval is gone (err %v)", err)
	}
	if st := actionState(t, ctx, admin, act.GetId()); st != "approved" {
		t.Fatalf("the request is %s, want approved", st)
	}
	stored, err := env.Etcd.Get(ctx, arbiter.ActionKey(act.GetId()))
	if err != nil || len(stored.Kvs) != 1 || !strings.Contains(string(stored.Kvs[0].Value), `"record":"`+arbiter.ForceKey(act.GetId())+`"`) {
		t.Fatalf("the approved request does not keep its result: %s (err %v)", stored.Kvs, err)
	}
}

// An approval whose Txn never reached etcd reads back nothing done: the
// request is pending again and a second approval carries it out.
func TestForceReleaseUnreachedIsPendingAgain(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/unreached", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/unreached")
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionTxn: func(string) (bool, error) { return false, context.DeadlineExceeded }})
	_, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	env.Arbiter.SetTestHooks(nil)
	if reason.Of(err) != lockv1.ErrorReason_NO_QUORUM {
		t.Fatalf("approve = %v, want NO_QUORUM", err)
	}
	if st := actionState(t, ctx, admin, act.GetId()); st != "pending" || holdRev(t, ctx, env.Etcd, "jobs/unreached") == 0 {
		t.Fatalf("after an approval that did nothing the request is %s (hold there: %v), want pending and held", st, holdRev(t, ctx, env.Etcd, "jobs/unreached") != 0)
	}
	if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()}); err != nil {
		t.Fatalf("approving again: %v", err)
	}
	if holdRev(t, ctx, env.Etcd, "jobs/unreached") != 0 {
		t.Fatal("the hold is still there")
	}
}

// An approval that stops between its claim and its Txn (a crash) leaves
// the request executing, not approved with the hold intact; reconcile
// reads the force record: absent and the claim old, pending again;
// present, approved with its result.
func TestForceReleaseCrashAfterClaim(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	for _, k := range []string{"jobs/crash-1", "jobs/crash-2"} {
		if _, err := s.TryLock(ctx, k, noFence); err != nil {
			t.Fatal(err)
		}
	}
	admin := adminOf(t, env)
	crash := func(id string) {
		t.Helper()
		env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionClaimed: func(string) bool { return true }})
		defer env.Arbiter.SetTestHooks(nil)
		if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: id}); err == nil {
			t.Fatal("the crashed approval answered")
		}
	}

	// Nothing done: executing while the claim is fresh, then pending.
	act := request(t, ctx, admin, "tok-alice", "jobs/crash-1")
	crash(act.GetId())
	if st := actionState(t, ctx, admin, act.GetId()); st != "executing" {
		t.Fatalf("after a crash between claim and Txn the request is %s, want executing", st)
	}
	if holdRev(t, ctx, env.Etcd, "jobs/crash-1") == 0 {
		t.Fatal("the crashed approval released the hold")
	}
	_, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "action_executing")
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ClaimBound: new(time.Duration)}) // any claim is old
	defer env.Arbiter.SetTestHooks(nil)
	list, err := admin.ListActions(as(ctx, "tok-bob"), &adminv1.ListActionsRequest{})
	if err != nil || len(list.GetActions()) != 1 || list.GetActions()[0].GetState() != "pending" {
		t.Fatalf("a stale claim with nothing done is listed as %v (err %v), want pending", list.GetActions(), err)
	}
	if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()}); err != nil {
		t.Fatalf("approving again after the crash: %v", err)
	}
	if holdRev(t, ctx, env.Etcd, "jobs/crash-1") != 0 {
		t.Fatal("the hold is still there")
	}

	// Done (the force record there, as a crash after the Txn leaves it):
	// approved, whatever the bound.
	env.Arbiter.SetTestHooks(nil)
	act = request(t, ctx, admin, "tok-alice", "jobs/crash-2")
	crash(act.GetId())
	rec := fmt.Sprintf(`{"action":%q,"kind":"force_release","key":"jobs/crash-2","holds":[{"key":"jobs/crash-2","session":%d,"revision":%d}]}`,
		act.GetId(), s.ID(), act.GetHold().GetRevision())
	put, err := env.Etcd.Put(ctx, arbiter.ForceKey(act.GetId()), rec)
	if err != nil {
		t.Fatal(err)
	}
	got, err := admin.GetAction(as(ctx, "tok-bob"), &adminv1.GetActionRequest{Id: act.GetId()})
	if err != nil || got.GetAction().GetState() != "approved" {
		t.Fatalf("an executing request whose force record is there is %v (err %v), want approved", got.GetAction().GetState(), err)
	}
	stored, err := env.Etcd.Get(ctx, arbiter.ActionKey(act.GetId()))
	if err != nil || !strings.Contains(string(stored.Kvs[0].Value), fmt.Sprintf(`"revision":%d`, put.Header.Revision)) {
		t.Fatalf("the reconciled request does not keep the Txn's revision %d: %s (err %v)", put.Header.Revision, stored.Kvs[0].Value, err)
	}
}

// An epoch advance that committed but whose answer was lost is read back
// from the epoch record: approved, not pending again.
func TestEpochAdvanceCommittedButUnanswered(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	admin := adminOf(t, env)
	st, req := requestAdvance(t, ctx, admin)
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionTxn: func(string) (bool, error) { return true, context.DeadlineExceeded }})
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	env.Arbiter.SetTestHooks(nil)
	if err != nil {
		t.Fatalf("an advance that committed was reported failed: %v", err)
	}
	if r.GetAction().GetState() != "approved" || r.GetEpochAdvance().GetEpoch() <= st.GetEpoch() {
		t.Fatalf("approve = %v", r)
	}
	if s := actionState(t, ctx, admin, req.GetAction().GetId()); s != "approved" {
		t.Fatalf("the request is %s, want approved", s)
	}
}

// race runs first and second at once, released together once both have
// read the pending request (ActionLoaded), and returns their errors.
func race(t *testing.T, env *devenv.Env, first, second func() error) (error, error) {
	t.Helper()
	var arrived sync.WaitGroup
	arrived.Add(2)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionLoaded: func(string) {
		arrived.Done()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
		}
	}})
	defer env.Arbiter.SetTestHooks(nil)
	errs := make([]error, 2)
	var done sync.WaitGroup
	for i, f := range []func() error{first, second} {
		done.Add(1)
		go func() { defer done.Done(); errs[i] = f() }()
	}
	done.Wait()
	return errs[0], errs[1]
}

// concurrentDecisions races two approvals, then an approval and a denial,
// of one request each, and returns the violations it sees: both won.
func concurrentDecisions(t *testing.T, ctx context.Context, env *devenv.Env, s *lockclient.Session, keys [2]string) error {
	admin := adminOf(t, env)
	for _, k := range keys {
		if _, err := s.TryLock(ctx, k, noFence); err != nil {
			t.Fatal(err)
		}
	}
	approve := func(id, tok string) func() error {
		return func() error {
			_, err := admin.ApproveAction(as(ctx, tok), &adminv1.ApproveActionRequest{Id: id})
			return err
		}
	}
	var violations []error
	act := request(t, ctx, admin, "tok-alice", keys[0])
	e1, e2 := race(t, env, approve(act.GetId(), "tok-bob"), approve(act.GetId(), "tok-alice-2"))
	switch {
	case e1 == nil && e2 == nil:
		violations = append(violations, fmt.Errorf("two concurrent approvals of request %s both won", act.GetId()))
	case e1 != nil && e2 != nil:
		t.Fatalf("neither concurrent approval won: %v; %v", e1, e2)
	default:
		loser := e1
		if loser == nil {
			loser = e2
		}
		wantCause(t, loser, lockv1.ErrorReason_ACTION_STALE, "action_changed")
	}

	act = request(t, ctx, admin, "tok-alice", keys[1])
	deny := func() error {
		_, err := admin.DenyAction(as(ctx, "tok-alice-2"), &adminv1.DenyActionRequest{Id: act.GetId(), Reason: "no"})
		return err
	}
	e1, e2 = race(t, env, approve(act.GetId(), "tok-bob"), deny)
	if e1 == nil && e2 == nil {
		return errors.Join(append(violations, fmt.Errorf("a concurrent approval and denial of request %s both won (now %s, hold there: %v)",
			act.GetId(), actionState(t, ctx, admin, act.GetId()), holdRev(t, ctx, env.Etcd, keys[1]) != 0))...)
	}
	if e1 != nil && e2 != nil {
		t.Fatalf("neither the approval nor the denial won: %v; %v", e1, e2)
	}
	want := map[bool]string{true: "approved", false: "denied"}[e1 == nil]
	if st := actionState(t, ctx, admin, act.GetId()); st != want || (holdRev(t, ctx, env.Etcd, keys[1]) == 0) != (want == "approved") {
		t.Fatalf("the %s request is %s (hold there: %v)", want, st, holdRev(t, ctx, env.Etcd, keys[1]) != 0)
	}
	return errors.Join(violations...)
}

func TestActionConcurrentDecisionsOneWins(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if err := concurrentDecisions(t, ctx, env, s, [2]string{"jobs/race-1", "jobs/race-2"}); err != nil {
		t.Fatal(err)
	}
}

// A revoke_session request whose Txn would exceed etcd's max-txn-ops is
// refused when requested, naming the limit, not at every approval.
func TestForceReleaseRevokeSessionTxnLimit(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, 2*time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	var last *lockclient.Hold
	for i := range arbiter.MaxRevokedHolds + 1 {
		h, err := s.TryLock(ctx, fmt.Sprintf("jobs/many-%03d", i), noFence)
		if err != nil {
			t.Fatal(err)
		}
		last = h
	}
	admin := adminOf(t, env)
	_, err := admin.RequestForceRelease(as(ctx, "tok-alice"), &adminv1.RequestForceReleaseRequest{Key: "jobs/many-000", Reason: "r", RevokeSession: true})
	if reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT || !strings.Contains(err.Error(), "max-txn-ops") ||
		!strings.Contains(err.Error(), fmt.Sprint(arbiter.MaxRevokedHolds)) {
		t.Fatalf("a session of %d holds: %v, want INVALID_ARGUMENT naming the limit", arbiter.MaxRevokedHolds+1, err)
	}
	// At the limit it fits: requested and approved.
	if err := last.Release(ctx); err != nil {
		t.Fatal(err)
	}
	act := request(t, ctx, admin, "tok-alice", "jobs/many-000", true)
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err != nil || len(r.GetForceRelease().GetReleased()) != arbiter.MaxRevokedHolds {
		t.Fatalf("approve a session of %d holds: %v (err %v)", arbiter.MaxRevokedHolds, r.GetForceRelease(), err)
	}
}

// A reason with control characters is refused: it is printed to the
// other operator's terminal. A newline is allowed.
func TestForceReleaseReasonControlCharacters(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/ctl", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	for _, bad := range []string{"ok\x1b[2K\rfine", "bell\a", "tab\there", "c1\u009b31m", "del\x7f"} {
		_, err := admin.RequestForceRelease(as(ctx, "tok-alice"), &adminv1.RequestForceReleaseRequest{Key: "jobs/ctl", Reason: bad})
		if reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT || !strings.Contains(err.Error(), "reason") || !strings.Contains(err.Error(), "control characters") {
			t.Fatalf("reason %q: %v, want INVALID_ARGUMENT naming the field and rule", bad, err)
		}
	}
	act := request(t, ctx, admin, "tok-alice", "jobs/ctl")
	_, err := admin.DenyAction(as(ctx, "tok-bob"), &adminv1.DenyActionRequest{Id: act.GetId(), Reason: "no\x1b]0;x\a"})
	if reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT {
		t.Fatalf("a denial reason with control characters: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := admin.RequestForceRelease(as(ctx, "tok-alice"), &adminv1.RequestForceReleaseRequest{Key: "jobs/ctl", Reason: "two\nlines, ünïcode"}); err != nil {
		t.Fatalf("a reason with a newline: %v", err)
	}
}

// A force-release that revoked the session deleted its record; if the
// lease revoke after it fails, the holder's keepalives must not keep the
// lease alive: they are refused SESSION_EXPIRED.
func TestForceReleaseRevokeSessionStopsRenewal(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	c := devenvtest.Client(t, env, "demo")
	s := devenvtest.Session(t, c, devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/revoked", noFence); err != nil {
		t.Fatal(err)
	}
	// A keepalive stream of the holder's, begun before: its owner check is
	// behind it.
	ka, err := raw(c).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	if r, err := ka.Recv(); err != nil || r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Fatalf("keepalive before: %v (err %v)", r, err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/revoked", true)
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{SessionRevoking: func(int64) error { return context.DeadlineExceeded }})
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	env.Arbiter.SetTestHooks(nil)
	if err != nil || r.GetForceRelease().GetSessionRevoked() {
		t.Fatalf("approve = %v (err %v), want released with the revoke failed", r, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
			t.Fatal(err)
		}
		kr, err := ka.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if kr.GetError() == lockv1.ErrorReason_SESSION_EXPIRED {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the revoked session is still renewed: %v", kr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for {
		ttl, err := env.Etcd.TimeToLive(wctx, clientv3.LeaseID(s.ID()))
		if err == nil && ttl.TTL <= 0 {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("the revoked session's lease lives on: %v (err %v)", ttl, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An approval that finds its request's force record already there (a run
// that committed after its claim was reckoned stale and put back to
// pending) reports that run's result: approved, not failed with "nothing
// was released".
func TestForceReleaseRetryFindsItsRecord(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/retried", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/retried")
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ActionClaimed: func(string) bool { return true }})
	admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	env.Arbiter.SetTestHooks(&arbiter.TestHooks{ClaimBound: new(time.Duration)}) // any claim is old
	if st := actionState(t, ctx, admin, act.GetId()); st != "pending" {
		t.Fatalf("the stale claim is %s, want pending", st)
	}
	env.Arbiter.SetTestHooks(nil)
	// The stopped approval's Txn commits now: its force record (the hold
	// is left, so only the record tells this Txn from a changed hold).
	rec := fmt.Sprintf(`{"action":%q,"kind":"force_release","key":"jobs/retried","holds":[{"key":"jobs/retried","session":%d,"revision":%d}]}`,
		act.GetId(), s.ID(), act.GetHold().GetRevision())
	put, err := env.Etcd.Put(ctx, arbiter.ForceKey(act.GetId()), rec)
	if err != nil {
		t.Fatal(err)
	}
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err != nil {
		t.Fatalf("a retry of an approval that committed: %v", err)
	}
	if r.GetAction().GetState() != "approved" || r.GetForceRelease().GetRevision() != put.Header.Revision ||
		len(r.GetForceRelease().GetReleased()) != 1 {
		t.Fatalf("approve = %v, want the committed run's result (revision %d)", r, put.Header.Revision)
	}
}
