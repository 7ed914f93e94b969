package arbiter_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// fakeOperators stands in for the OpenID Connect verifier (go-oidc, in
// services/operator): a token is the key of an operator. The integration
// test against the real development provider comes with that wiring.
type fakeOperators map[string]admin.Operator

func (f fakeOperators) Verify(_ context.Context, raw string) (admin.Operator, error) {
	op, ok := f[raw]
	if !ok {
		return admin.Operator{}, errors.New("signature: unknown token")
	}
	return op, nil
}

var operators = fakeOperators{
	"tok-alice": {Issuer: "https://idp.test", Subject: "u-alice", Name: "alice"},
	"tok-bob":   {Issuer: "https://idp.test", Subject: "u-bob", Name: "bob"},
	// The same subject at another issuer is another person (with an
	// account of the same name: it connects on alice's SVID).
	"tok-alice-2": {Issuer: "https://other.test", Subject: "u-alice", Name: "alice"},
}

// advisory is a class the policy set says is advisory; devenvtest.Fast
// is fenced; the default class has no facts (unknown, shown as advisory).
var advisory = class.Class{Name: "adv", TTL: 3 * time.Second, Tier: class.TierCoord}

// factsRegistry is a static registry that also reports the policy facts
// the force-release facts come from.
type factsRegistry struct {
	class.Static
	facts []admin.ClassFact
}

func (r factsRegistry) ClassFacts() []admin.ClassFact { return r.facts }

func forceEnv(t *testing.T, opts devenv.Options) *devenv.Env {
	t.Helper()
	opts.Operators = operators
	opts.Classes = forceEnvClasses()
	return devenvtest.Start(t, opts)
}

// forceEnvClasses are a fenced class and an advisory one.
func forceEnvClasses() factsRegistry {
	return factsRegistry{Static: class.NewStatic(devenvtest.Fast, advisory), facts: []admin.ClassFact{
		{Name: devenvtest.Fast.Name, Enforcement: "fenced"}, {Name: advisory.Name, Enforcement: "advisory"},
	}}
}

// as is ctx carrying an operator's ID token.
func as(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// adminOf is an Admin API client whose every call goes out on the SVID of
// the operator whose fake token it carries (alice's for any other), as
// each person connects with their own: the arbiter binds the token's
// account to the SVID.
func adminOf(t *testing.T, env *devenv.Env) adminv1.AdminServiceClient {
	return adminv1.NewAdminServiceClient(&ownConns{t: t, env: env, conns: map[string]*grpc.ClientConn{}})
}

// ownConns carries a call on the connection of its token's operator.
type ownConns struct {
	t     *testing.T
	env   *devenv.Env
	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

func (o *ownConns) of(ctx context.Context) *grpc.ClientConn {
	who := "alice"
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get("authorization"); len(v) == 1 {
		if op, ok := operators[strings.TrimPrefix(v[0], "Bearer ")]; ok {
			who = op.Name
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.conns[who] == nil {
		o.conns[who] = devenvtest.Client(o.t, o.env, who).Conn()
	}
	return o.conns[who]
}

func (o *ownConns) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	return o.of(ctx).Invoke(ctx, method, args, reply, opts...)
}

func (o *ownConns) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return o.of(ctx).NewStream(ctx, desc, method, opts...)
}

func wantCause(t *testing.T, err error, r lockv1.ErrorReason, cause string) {
	t.Helper()
	got, meta := reason.Info(err)
	if got != r || meta["cause"] != cause {
		t.Fatalf("error = %v (reason %s, cause %q), want reason %s cause %q", err, got, meta["cause"], r, cause)
	}
}

// holdRev is the revision of key's hold, 0 when it is not held.
func holdRev(t *testing.T, ctx context.Context, cl *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cl.Get(ctx, lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

func request(t *testing.T, ctx context.Context, admin adminv1.AdminServiceClient, tok, key string, revoke ...bool) *adminv1.Action {
	t.Helper()
	r, err := admin.RequestForceRelease(as(ctx, tok), &adminv1.RequestForceReleaseRequest{Key: key, Reason: "leaked by a stuck job", RevokeSession: len(revoke) > 0 && revoke[0]})
	if err != nil {
		t.Fatalf("request force-release of %s: %v", key, err)
	}
	return r.GetAction()
}

// sameOperator is the two-person scenario: the requester approving their
// own request. It returns the violation it sees, nil when the rule held.
func sameOperator(t *testing.T, ctx context.Context, env *devenv.Env, key string) error {
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", key)
	_, err := admin.ApproveAction(as(ctx, "tok-alice"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err == nil || holdRev(t, ctx, env.Etcd, key) == 0 {
		return fmt.Errorf("the requester approved their own request (err %v): the hold of %s was released by one person", err, key)
	}
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "same_operator")
	// Still pending: a second person may approve it.
	got, err := admin.GetAction(as(ctx, "tok-bob"), &adminv1.GetActionRequest{Id: act.GetId()})
	if err != nil || got.GetAction().GetState() != "pending" {
		return fmt.Errorf("after a refused self-approval the request is %q (err %v), want pending", got.GetAction().GetState(), err)
	}
	return nil
}

func TestForceReleaseRequesterCannotApprove(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	for _, key := range []string{"jobs/self-1"} {
		if _, err := s.TryLock(ctx, key, noFence); err != nil {
			t.Fatal(err)
		}
	}
	if err := sameOperator(t, ctx, env, "jobs/self-1"); err != nil {
		t.Fatal(err)
	}
	// The same subject at another issuer is another person: allowed.
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/self-1")
	if _, err := admin.ApproveAction(as(ctx, "tok-alice-2"), &adminv1.ApproveActionRequest{Id: act.GetId()}); err != nil {
		t.Fatalf("an operator of another issuer could not approve: %v", err)
	}
}

// changedHold is the revision scenario: the hold requested is released
// and granted again before the approval. It returns the violation it
// sees: the new hold deleted.
func changedHold(t *testing.T, ctx context.Context, env *devenv.Env, s *lockclient.Session, key string) error {
	admin := adminOf(t, env)
	h, err := s.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	act := request(t, ctx, admin, "tok-alice", key)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.TryLock(ctx, key, noFence); err != nil {
		t.Fatal(err)
	}
	again := holdRev(t, ctx, env.Etcd, key)
	_, err = admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if holdRev(t, ctx, env.Etcd, key) != again {
		return fmt.Errorf("the hold granted after the request (revision %d) was deleted by its approval (err %v)", again, err)
	}
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "hold_changed")
	got, gerr := admin.GetAction(as(ctx, "tok-bob"), &adminv1.GetActionRequest{Id: act.GetId()})
	if gerr != nil || got.GetAction().GetState() != "failed" {
		t.Fatalf("a stale approval left the request %q (err %v), want failed", got.GetAction().GetState(), gerr)
	}
	if fr, err := env.Etcd.Get(ctx, arbiter.ForceKey(act.GetId())); err != nil || len(fr.Kvs) != 0 {
		t.Fatalf("a refused approval left a force record (err %v)", err)
	}
	return nil
}

func TestForceReleaseRefusesAChangedHold(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if err := changedHold(t, ctx, env, s, "jobs/changed-1"); err != nil {
		t.Fatal(err)
	}
}

func TestForceReleaseExpiredRequestCannotBeApproved(t *testing.T) {
	env := forceEnv(t, devenv.Options{ActionTTL: 2 * time.Second})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/expiring", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/expiring")
	// Wait for etcd to end the request's lease: an event, not a sleep.
	get, err := env.Etcd.Get(ctx, arbiter.ActionKey(act.GetId()))
	if err != nil || len(get.Kvs) != 1 || get.Kvs[0].Lease == 0 {
		t.Fatalf("the request is not stored on a lease (err %v)", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	gone := false
	for wr := range env.Etcd.Watch(wctx, arbiter.ActionKey(act.GetId()), clientv3.WithRev(get.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			t.Logf("watch: %v", err)
		}
		for _, ev := range wr.Events {
			gone = gone || ev.Type == clientv3.EventTypeDelete
		}
		if gone {
			break
		}
	}
	if !gone {
		t.Fatal("the request outlived its TTL")
	}
	_, err = admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "action_expired")
	if holdRev(t, ctx, env.Etcd, "jobs/expiring") == 0 {
		t.Fatal("an expired request released the hold")
	}
}

func TestForceReleaseDeny(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	if _, err := s.TryLock(ctx, "jobs/denied", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/denied")
	if _, err := admin.DenyAction(as(ctx, "tok-bob"), &adminv1.DenyActionRequest{Id: act.GetId()}); reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT {
		t.Fatalf("a denial without a reason: %v, want INVALID_ARGUMENT", err)
	}
	d, err := admin.DenyAction(as(ctx, "tok-bob"), &adminv1.DenyActionRequest{Id: act.GetId(), Reason: "the job is draining by itself"})
	if err != nil {
		t.Fatal(err)
	}
	if d.GetAction().GetState() != "denied" || d.GetAction().GetDecidedBy().GetSubject() != "u-bob" {
		t.Fatalf("denied action = %v", d.GetAction())
	}
	_, err = admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "action_denied")
	if holdRev(t, ctx, env.Etcd, "jobs/denied") == 0 {
		t.Fatal("a denied request released the hold")
	}
	list, err := admin.ListActions(as(ctx, "tok-alice"), &adminv1.ListActionsRequest{Kind: "force_release"})
	if err != nil || len(list.GetActions()) != 1 || list.GetActions()[0].GetState() != "denied" {
		t.Fatalf("list = %v (err %v), want the one denied request", list, err)
	}
}

func TestForceReleaseNeedsSignedInOperators(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	// No verifier configured: refused, naming what is missing; the
	// direct epoch advance still serves SPIFFE operators.
	bare := devenvtest.Start(t, devenv.Options{})
	_, err := adminOf(t, bare).RequestForceRelease(as(ctx, "tok-alice"), &adminv1.RequestForceReleaseRequest{Key: "jobs/x", Reason: "r"})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "no_operator_verifier")
	if !strings.Contains(err.Error(), "verifier") {
		t.Fatalf("the refusal does not name the missing verifier: %v", err)
	}

	env := forceEnv(t, devenv.Options{})
	admin := adminOf(t, env)
	_, err = admin.RequestForceRelease(ctx, &adminv1.RequestForceReleaseRequest{Key: "jobs/x", Reason: "r"})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "no_operator_token")
	_, err = admin.RequestForceRelease(as(ctx, "tok-mallory"), &adminv1.RequestForceReleaseRequest{Key: "jobs/x", Reason: "r"})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "operator_token_refused")
	if strings.Contains(err.Error(), "tok-mallory") {
		t.Fatalf("the refusal quotes the ID token: %v", err)
	}
	// With sign-in configured the one-person advance is refused, naming the flow.
	_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: 1, Reason: "r"})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "two_person_required")
	if !strings.Contains(err.Error(), "epoch approve") {
		t.Fatalf("the refusal does not name the two-person flow: %v", err)
	}
}

// tokenless checks no marshalled message or error text holds tok's
// decimal (or its hex).
func tokenless(t *testing.T, tok uint64, what string, msgs []proto.Message, errs []error, raw ...string) {
	t.Helper()
	needles := []string{strconv.FormatUint(tok, 10), strconv.FormatUint(tok, 16)}
	var texts []string
	for _, m := range msgs {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		texts = append(texts, string(b))
	}
	for _, e := range errs {
		if e != nil {
			texts = append(texts, e.Error())
		}
	}
	texts = append(texts, raw...)
	for _, s := range texts {
		for _, n := range needles {
			if strings.Contains(s, n) {
				t.Fatalf("%s holds the token (%s): %s", what, n, s)
			}
		}
	}
}

func TestForceReleaseEndsOneHoldAndTellsTheHolder(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := make(chan time.Time, 2)
	onFence := func(*lockclient.Hold) { fenced <- time.Now() }
	h, err := s.TryLock(ctx, "jobs/leaked", onFence)
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.TryLock(ctx, "jobs/fine", onFence)
	if err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/leaked")
	hf := act.GetHold()
	if hf.GetKey() != "jobs/leaked" || hf.GetCluster() != "embedded" || !strings.HasSuffix(hf.GetIdentity(), "/demo") || hf.GetSession() != s.ID() ||
		hf.GetClass() != "fast" || hf.GetEnforcement() != "fenced" || !hf.GetFenced() || hf.GetRevision() != h.Token().Revision() {
		t.Fatalf("facts = %v", hf)
	}
	if len(act.GetWarnings()) != 0 {
		t.Fatalf("a fenced class's hold is warned about: %v", act.GetWarnings())
	}
	shown, err := admin.GetAction(as(ctx, "tok-bob"), &adminv1.GetActionRequest{Id: act.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	if approved.GetForceRelease().GetReleased()[0] != "jobs/leaked" || approved.GetAction().GetState() != "approved" {
		t.Fatalf("approve = %v", approved)
	}

	// The holder hears at its next keepalive (one period, TTL/3, after the
	// approval at most), not at its deadline: the session is renewed on, so
	// no deadline comes. A second period allows for one slow keepalive.
	period := devenvtest.Fast.TTL / 3
	select {
	case got := <-fenced:
		if d := got.Sub(at); d > 2*period {
			t.Fatalf("OnFence ran %v after the approval; a keepalive period is %v", d, period)
		} else {
			t.Logf("OnFence ran %v after the approval (keepalive period %v)", d, period)
		}
	case <-time.After(5 * period):
		t.Fatal("OnFence did not run")
	}
	if h.CanStart() {
		t.Fatal("CanStart is true for a force-released hold")
	}
	select {
	case <-h.Fenced():
	default:
		t.Fatal("Fenced() is not closed for a force-released hold")
	}
	// The session and its other hold live on. (Not CanStart: one slow
	// keepalive makes it false until the next answer.)
	select {
	case <-other.Fenced():
		t.Fatal("the other hold was fenced with the force-released one")
	default:
	}
	if left := s.RemainingTTL(); left <= 0 {
		t.Fatalf("the session ended with the force-released hold (%v left)", left)
	}
	select {
	case <-fenced:
		t.Fatal("OnFence ran for a hold that was not force-released")
	default:
	}
	if holdRev(t, ctx, env.Etcd, "jobs/fine") == 0 {
		t.Fatal("the other hold was deleted")
	}
	// The key can be taken again on the same session, and the old report
	// (repeated for a day) does not end the new grant.
	h2, err := s.TryLock(ctx, "jobs/leaked", onFence)
	if err != nil {
		t.Fatalf("re-acquire after a force-release: %v", err)
	}
	ka, err := raw(devenvtest.Client(t, env, "demo")).KeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Read the report as the holder's client does, on a stream of its own
	// identity.
	if err := ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()}); err != nil {
		t.Fatal(err)
	}
	kar, err := ka.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(kar.GetEnded()) != 1 || kar.GetEnded()[0].GetKey() != "jobs/leaked" || kar.GetEnded()[0].GetReason() != lockv1.EndReason_FORCE_RELEASED ||
		kar.GetEnded()[0].GetRevision() != h.Token().Revision() {
		t.Fatalf("keepalive ended = %v", kar.GetEnded())
	}
	for range 2 * int(devenvtest.Fast.TTL/period) {
		if !h2.CanStart() {
			t.Fatal("the old report ended the new grant of the key")
		}
		ka.Send(&lockv1.KeepAliveRequest{SessionId: s.ID()})
		if _, err := ka.Recv(); err != nil {
			t.Fatal(err)
		}
	}

	// The force record: on a lease of at most a day, with who and why.
	rec, err := env.Etcd.Get(ctx, arbiter.ForceKey(act.GetId()))
	if err != nil || len(rec.Kvs) != 1 {
		t.Fatalf("force record: %v (err %v)", rec, err)
	}
	ttl, err := env.Etcd.TimeToLive(ctx, clientv3.LeaseID(rec.Kvs[0].Lease))
	if err != nil || ttl.TTL <= 0 || ttl.TTL > int64((24*time.Hour).Seconds()) {
		t.Fatalf("force record lease TTL = %v (err %v), want in (0, 24h]", ttl, err)
	}
	for _, want := range []string{`"requester":"alice`, `"approver":"bob`, `"reason":"leaked by a stuck job"`, `"enforcement":"fenced"`, `"class":"fast"`} {
		if !strings.Contains(string(rec.Kvs[0].Value), want) {
			t.Fatalf("force record %s lacks %s", rec.Kvs[0].Value, want)
		}
	}
	req, err := env.Etcd.Get(ctx, arbiter.ActionKey(act.GetId()))
	if err != nil || len(req.Kvs) != 1 {
		t.Fatal(err)
	}

	// Nothing of a token in any response, error or record.
	_, err1 := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	list, _ := admin.ListActions(as(ctx, "tok-bob"), &adminv1.ListActionsRequest{})
	for _, tok := range []uint64{uint64(h.Token()), uint64(h2.Token())} {
		tokenless(t, tok, "a force-release response", []proto.Message{act, shown, approved, list, kar}, []error{err1},
			string(rec.Kvs[0].Value), string(req.Kvs[0].Value))
	}
}

func TestForceReleaseAdvisoryClassWarns(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	c := devenvtest.Client(t, env, "demo")
	if _, err := devenvtest.Session(t, c, advisory.Name).TryLock(ctx, "jobs/adv", noFence); err != nil {
		t.Fatal(err)
	}
	if _, err := devenvtest.Session(t, c, "").TryLock(ctx, "jobs/plain", noFence); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	for key, enf := range map[string]string{"jobs/adv": "advisory", "jobs/plain": ""} {
		act := request(t, ctx, admin, "tok-alice", key)
		if act.GetHold().GetEnforcement() != enf || act.GetHold().GetFenced() {
			t.Fatalf("%s: facts = %v, want enforcement %q, not fenced", key, act.GetHold(), enf)
		}
		if len(act.GetWarnings()) != 1 || !strings.Contains(act.GetWarnings()[0], "both write at once") {
			t.Fatalf("%s: warnings = %q, want the two-writers warning", key, act.GetWarnings())
		}
	}
}

func TestForceReleaseRevokeSession(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := make(chan string, 4)
	keys := []string{"jobs/s-1", "jobs/s-2", "jobs/s-3"}
	for _, k := range keys {
		if _, err := s.TryLock(ctx, k, func(h *lockclient.Hold) { fenced <- h.Key() }); err != nil {
			t.Fatal(err)
		}
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "jobs/s-2", true)
	if len(act.GetSessionHolds()) != len(keys) {
		t.Fatalf("session holds shown = %v, want %v", act.GetSessionHolds(), keys)
	}
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.GetForceRelease().GetReleased()) != len(keys) || !r.GetForceRelease().GetSessionRevoked() {
		t.Fatalf("result = %v", r.GetForceRelease())
	}
	for _, k := range keys {
		if holdRev(t, ctx, env.Etcd, k) != 0 {
			t.Fatalf("%s still held after its session was revoked", k)
		}
	}
	if ttl, err := env.Etcd.TimeToLive(ctx, clientv3.LeaseID(s.ID())); err != nil || ttl.TTL > 0 {
		t.Fatalf("the session's lease lives on: %v (err %v)", ttl, err)
	}
	got := map[string]bool{}
	for range keys {
		select {
		case k := <-fenced:
			got[k] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("OnFence ran for %v only", got)
		}
	}
	if s.CanStart() {
		t.Fatal("the session can start after it was revoked")
	}
}

func TestEpochAdvanceIsTwoPerson(t *testing.T) {
	env := forceEnv(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	admin := adminOf(t, env)
	st, req := requestAdvance(t, ctx, admin)
	if req.GetAction().GetKind() != "epoch_advance" || len(req.GetAction().GetWarnings()) == 0 {
		t.Fatalf("request = %v", req.GetAction())
	}
	_, err := admin.ApproveAction(as(ctx, "tok-alice"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "same_operator")
	r, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if r.GetEpochAdvance().GetEpoch() <= st.GetEpoch() || r.GetEpochAdvance().GetPreviousEpoch() != st.GetEpoch() {
		t.Fatalf("advance = %v from epoch %d", r.GetEpochAdvance(), st.GetEpoch())
	}
	// Approving it again does nothing: it is decided.
	_, err = admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	wantCause(t, err, lockv1.ErrorReason_ACTION_STALE, "action_approved")
}

// requestAdvance has alice request an advance of the coord cluster's
// epoch; it returns the status it read the expected epoch from.
func requestAdvance(t *testing.T, ctx context.Context, admin adminv1.AdminServiceClient) (*adminv1.StatusResponse, *adminv1.RequestEpochAdvanceResponse) {
	t.Helper()
	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	req, err := admin.RequestEpochAdvance(as(ctx, "tok-alice"), &adminv1.RequestEpochAdvanceRequest{
		Advance: &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "drill"}})
	if err != nil {
		t.Fatal(err)
	}
	return st, req
}

// On an entity shard behind a Router: the hold is found on its shard, the
// Txn runs there, and the Router's keepalive carries the shard's report.
func TestForceReleaseOnAShard(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: operators, Shards: []string{"a"}, Classes: class.NewStatic(devenvtest.Fast, entity)})
	ctx := ctxT(t, time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), entity.Name)
	fenced := make(chan time.Time, 1)
	if _, err := s.TryLock(ctx, "team-a/orders-sharded", func(*lockclient.Hold) { fenced <- time.Now() }); err != nil {
		t.Fatal(err)
	}
	admin := adminOf(t, env)
	act := request(t, ctx, admin, "tok-alice", "team-a/orders-sharded")
	if act.GetHold().GetCluster() != "a" {
		t.Fatalf("facts = %v, want the hold on shard a", act.GetHold())
	}
	if _, err := admin.ApproveAction(as(ctx, "tok-bob"), &adminv1.ApproveActionRequest{Id: act.GetId()}); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	select {
	case got := <-fenced:
		t.Logf("OnFence ran %v after the approval", got.Sub(at))
	case <-time.After(3 * entity.TTL):
		t.Fatal("OnFence did not run for a force-released hold on a shard")
	}
	if holdRev(t, ctx, env.ShardEtcd["a"], "team-a/orders-sharded") != 0 {
		t.Fatal("the shard's hold is still there")
	}
	if rec, err := env.ShardEtcd["a"].Get(ctx, arbiter.ForceKey(act.GetId())); err != nil || len(rec.Kvs) != 1 || rec.Kvs[0].Lease == 0 {
		t.Fatalf("no force record on a lease on the shard (err %v)", err)
	}
}
