package arbiter_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// Another identity that names a holder's session and token (the session
// from Inspect, the token by any means) cannot end the hold, on the coord
// cluster or on an entity shard, where the Router has the session's shard
// lease cached: PERMISSION_DENIED, SESSION_NOT_OWNED, and the hold stays.
// Before, the release was accepted and the attacker was granted the key
// while the holder's client went on saying CanStart.
func TestOnlyTheSessionsOwnerMayReleaseItsHold(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Classes: class.NewStatic(devenvtest.Fast, records), Shards: []string{"a"}})
	ctx := ctxT(t, time.Minute)
	for _, c := range []struct{ key, class string }{
		{"team-a/owned/1", devenvtest.Fast.Name},
		{"team-a/records/owned-1", records.Name},
	} {
		victim := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), c.class)
		h, err := victim.TryLock(ctx, c.key, noFence)
		if err != nil {
			t.Fatal(err)
		}
		attacker := raw(devenvtest.Client(t, env, "other"))
		in, err := attacker.Inspect(ctx, &lockv1.InspectRequest{Key: c.key, Class: c.class})
		if err != nil || in.GetHolder().GetSessionId() != victim.ID() {
			t.Fatalf("%s: inspect names session %d (%v), want the victim's %d", c.key, in.GetHolder().GetSessionId(), err, victim.ID())
		}
		for _, req := range []*lockv1.ReleaseRequest{
			{Key: c.key, Class: c.class, SessionId: victim.ID(), Token: uint64(h.Token())},
			{Key: c.key, Class: c.class, SessionId: victim.ID(), AnyToken: true},
		} {
			resp, err := attacker.Release(ctx, req)
			if resp.GetReleased() {
				t.Fatalf("%s: another identity released the victim's hold (any_token %v)", c.key, req.GetAnyToken())
			}
			wantReason(t, err, lockv1.ErrorReason_SESSION_NOT_OWNED)
		}
		if on := heldOn(t, ctx, env, c.key); len(on) != 1 {
			t.Fatalf("%s: after the refused releases it is held on %v, want one cluster", c.key, on)
		}
		if !h.CanStart() {
			t.Fatalf("%s: the victim's hold was fenced", c.key)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("%s: the owner's own release: %v", c.key, err)
		}
	}
}

// ValidateToken tells a caller other than the holder's identity only
// whether a token is current: no state that orders it against the grant,
// no read revision. Before, SUPERSEDED against NOT_ISSUED and the read
// revision found the holder's token by bisection.
func TestValidateTokenIsNoOracleForOtherIdentities(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	const key = "team-a/oracle/1"
	victim := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	h, err := victim.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	below, _ := token.Mint(h.Token().Epoch(), h.Token().Revision()-1)
	above, _ := token.Mint(h.Token().Epoch(), h.Token().Revision()+1)
	ask := func(who string, tok token.Token) *lockv1.ValidateTokenResponse {
		t.Helper()
		resp, err := raw(devenvtest.Client(t, env, who)).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(tok)})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for _, tok := range []token.Token{below, above} {
		got := ask("other", tok)
		if got.GetValid() || got.GetState() != lockv1.TokenState_TOKEN_STATE_NOT_CURRENT || got.GetReadRevision() != 0 {
			t.Fatalf("another identity asking about a wrong token learns state %s, read revision %d; want NOT_CURRENT and none", got.GetState(), got.GetReadRevision())
		}
	}
	if got := ask("other", h.Token()); !got.GetValid() || got.GetReadRevision() != 0 {
		t.Fatalf("another identity asking about the current token: valid %v, read revision %d; want valid, no revision", got.GetValid(), got.GetReadRevision())
	}
	// The holder's own identity hears the whole answer.
	if got := ask("demo", above); got.GetState() != lockv1.TokenState_TOKEN_STATE_NOT_ISSUED || got.GetReadRevision() == 0 {
		t.Fatalf("the holder's identity: state %s, read revision %d; want NOT_ISSUED with the revision", got.GetState(), got.GetReadRevision())
	}
}
