package arbiter_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// releaser ends the grant (key, session, token) however the variant under
// test does it.
type releaser func(ctx context.Context, key string, session int64, tok uint64) error

// staleReleaseViolation runs the scenario: A is granted and releases; B is
// granted; A's release is delivered again (a retry, or a late duplicate).
// It returns what went wrong, or "" if B's hold survived.
func staleReleaseViolation(t *testing.T, env *devenv.Env, key string, release releaser) string {
	ctx := ctxT(t, 30*time.Second)
	a := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	b := devenvtest.Session(t, devenvtest.Client(t, env, "other"), "")
	ha, err := a.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, key, a.ID(), uint64(ha.Token())); err != nil {
		t.Fatal(err)
	}
	hb, err := b.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	if err := release(ctx, key, a.ID(), uint64(ha.Token())); err != nil {
		t.Fatal(err)
	}
	resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 || resp.Kvs[0].ModRevision != hb.Token().Revision() {
		return fmt.Sprintf("the stale release deleted B's hold of %s", key)
	}
	return ""
}

func TestStaleReleaseNeverDeletesNewerHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	c := devenvtest.Client(t, env, "demo")
	var results []bool
	viaArbiter := func(ctx context.Context, key string, session int64, tok uint64) error {
		r, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: session, Token: tok})
		results = append(results, r.GetReleased())
		return err
	}
	if v := staleReleaseViolation(t, env, "team-a/stale/1", viaArbiter); v != "" {
		t.Fatal(v)
	}
	if len(results) != 2 || !results[0] || results[1] {
		t.Fatalf("released = %v, want [true false]: the first release ends the grant, the stale one reports it deleted nothing", results)
	}
}

// The scenario must catch a release that deletes by key alone.
func TestStaleReleaseCheckCatchesUnconditionalDelete(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	unconditional := func(ctx context.Context, key string, _ int64, _ uint64) error {
		_, err := env.Etcd.Delete(ctx, lockkey.HoldKey(key))
		return err
	}
	if v := staleReleaseViolation(t, env, "team-a/stale/2", unconditional); v == "" {
		t.Fatal("an unconditional delete passed the stale release check")
	}
}

// A release naming a token of an earlier epoch never ends a hold of the
// current one, even one last written at the same revision: the epoch is
// advanced for real (as an operator would), so the forged release is sent.
func TestReleaseOfAnEarlierEpochDeletesNothing(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: quietClasses()})
	ctx := ctxT(t, 30*time.Second)
	const key = "team-a/epoch/1"
	c := devenvtest.Client(t, env, "demo")
	// Kept alive; grants and releases are raw. The advance ends it, and
	// the session opened after it takes its place.
	s := devenvtest.Session(t, c, "")
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	acquire := func() token.Token {
		t.Helper()
		r, err := raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: s.ID(), Instance: s.Instance()})
		if err != nil {
			t.Fatal(err)
		}
		return token.Token(r.Token.Value)
	}
	release := func(tok token.Token) bool {
		t.Helper()
		r, err := raw(c).Release(ctx, &lockv1.ReleaseRequest{Key: key, SessionId: s.ID(), Token: uint64(tok)})
		if err != nil {
			t.Fatalf("release with token %v: %v", tok, err)
		}
		return r.GetReleased()
	}

	st, err := admin.Status(ctx, &adminv1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	old := acquire()
	if old.Epoch() != st.GetEpoch() {
		t.Fatalf("granted %v in epoch %d", old, st.GetEpoch())
	}
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "test: an earlier epoch's release"})
	if err != nil {
		t.Fatal(err)
	}
	if adv.GetEpoch() <= st.GetEpoch() || adv.GetDeletedHolds() != 1 {
		t.Fatalf("advance from epoch %d = %v, want a later epoch and the one hold deleted", st.GetEpoch(), adv)
	}
	// The advance ended the session (its record went with the holds), and
	// it was alive: no grant until its last renewal has run out; then the
	// old session grants nothing, and a new one takes its place.
	ended := s
	s = devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "") // a client of its own: c's lease may not have heard yet
	waitOutTheQuiet(t, env.Etcd, s, "team-a/epoch/quiet", true)
	_, err = raw(c).Acquire(ctx, &lockv1.AcquireRequest{Key: key, SessionId: ended.ID(), Instance: ended.Instance()})
	wantReason(t, err, lockv1.ErrorReason_SESSION_EXPIRED)
	cur := acquire()
	if cur.Epoch() != adv.GetEpoch() {
		t.Fatalf("granted %v after advancing to epoch %d", cur, adv.GetEpoch())
	}
	stillHeld := func(why string) {
		t.Helper()
		resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key))
		if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != cur.Revision() || resp.Kvs[0].Lease != s.ID() {
			t.Fatalf("%s deleted or changed the current hold (%v, err %v)", why, resp, err)
		}
	}

	// Same session, same revision as the current hold, earlier epoch: the
	// release Txn alone (hold revision, lease, epoch record) would match.
	forged, err := token.Mint(old.Epoch(), cur.Revision())
	if err != nil {
		t.Fatal(err)
	}
	if release(forged) {
		t.Fatalf("a release naming %v (an earlier epoch) ended the hold granted as %v", forged, cur)
	}
	stillHeld("a release with an earlier epoch's token")
	// The earlier epoch's real token, delivered late.
	if release(old) {
		t.Fatalf("a late release of %v ended the hold granted as %v", old, cur)
	}
	stillHeld("a late release of the earlier epoch's grant")
	// A token of another revision does not match either.
	if release(cur + 1) {
		t.Fatal("a release with a wrong revision ended the hold")
	}
	stillHeld("a release with a wrong revision")
	// The control: the current token does end it.
	if !release(cur) {
		t.Fatalf("the release of the current grant %v deleted nothing", cur)
	}
	if resp, err := env.Etcd.Get(ctx, lockkey.HoldKey(key), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
		t.Fatalf("the hold survived its own release (err %v)", err)
	}
}
