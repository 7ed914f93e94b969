package arbiter_test

import (
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestValidateTokenComparesWithTheCurrentGrant(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, 30*time.Second)
	holder := devenvtest.Client(t, env, "demo")
	resource := devenvtest.Client(t, env, "other") // the resource asks, not the holder
	a := devenvtest.Session(t, holder, "")
	alice := devenvtest.Client(t, env, "alice")
	b := devenvtest.Session(t, alice, "")
	key := "team-a/validate/1"
	// The resource hears whether a token is current; the holder's
	// identity (demo, then alice) hears which state it is in.
	check := func(asker *lockclient.Client, tk token.Token, want lockv1.TokenState) {
		t.Helper()
		r, err := raw(asker).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(tk)})
		if err != nil {
			t.Fatal(err)
		}
		if r.GetState() != want || r.GetValid() != (want == lockv1.TokenState_TOKEN_STATE_CURRENT) {
			t.Fatalf("validate: %v valid=%v, want %v", r.GetState(), r.GetValid(), want)
		}
	}
	ha, err := a.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	check(resource, ha.Token(), lockv1.TokenState_TOKEN_STATE_CURRENT)
	forged, _ := token.Mint(ha.Token().Epoch(), ha.Token().Revision()+1000)
	check(resource, forged, lockv1.TokenState_TOKEN_STATE_NOT_CURRENT)
	check(holder, forged, lockv1.TokenState_TOKEN_STATE_NOT_ISSUED)
	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	check(resource, ha.Token(), lockv1.TokenState_TOKEN_STATE_ENDED) // free: no token to hide
	hb, err := b.TryLock(ctx, key, noFence)
	if err != nil {
		t.Fatal(err)
	}
	check(resource, ha.Token(), lockv1.TokenState_TOKEN_STATE_NOT_CURRENT)
	check(alice, ha.Token(), lockv1.TokenState_TOKEN_STATE_SUPERSEDED)
	check(resource, hb.Token(), lockv1.TokenState_TOKEN_STATE_CURRENT)

	// After an epoch advance every earlier token is of an earlier epoch.
	admin := adminv1.NewAdminServiceClient(alice.Conn())
	if _, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: hb.Token().Epoch(), Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	check(resource, hb.Token(), lockv1.TokenState_TOKEN_STATE_EARLIER_EPOCH)
}

func TestValidateTokenIsRateLimitedPerNamespace(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{ValidateRate: 0.001, ValidateBurst: 3})
	ctx := ctxT(t, 30*time.Second)
	c := devenvtest.Client(t, env, "other")
	tk, _ := token.Mint(1, 1)
	call := func(key string) error {
		_, err := raw(c).ValidateToken(ctx, &lockv1.ValidateTokenRequest{Key: key, Token: uint64(tk)})
		return err
	}
	for i := 0; i < 3; i++ {
		if err := call("team-a/v/1"); err != nil {
			t.Fatalf("call %d within the burst: %v", i, err)
		}
	}
	err := call("team-a/v/1")
	wantReason(t, err, lockv1.ErrorReason_RATE_LIMITED)
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("code %s, want RESOURCE_EXHAUSTED", status.Code(err))
	}
	// Another namespace has its own budget, and grants are not limited.
	if err := call("team-b/v/1"); err != nil {
		t.Fatalf("other namespace: %v", err)
	}
	s := devenvtest.Session(t, c, "")
	if _, err := s.TryLock(ctx, "team-a/v/1", noFence); err != nil {
		t.Fatalf("grant while validations are limited: %v", err)
	}
	fams, _ := env.Registry.Gather()
	counted := map[string]float64{}
	for _, f := range fams {
		if f.GetName() == "lockplane_validations_total" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "namespace" {
						counted[l.GetValue()] += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if counted["team-a"] != 3 || counted["team-b"] != 1 {
		t.Fatalf("validations counted per namespace: %v, want team-a 3, team-b 1", counted)
	}
}
