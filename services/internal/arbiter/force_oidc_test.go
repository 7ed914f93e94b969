package arbiter_test

import (
	"strings"
	"testing"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

// The two-person force-release with the real parts: alice and bob sign in
// at a real OpenID provider (zitadel's op) with a password and a one-time
// code, the arbiter verifies their ID tokens with go-oidc, and the holder
// learns. Without the second factor, or as the same person, it is refused.
func TestForceReleaseWithOperatorsSignedInAtARealProvider(t *testing.T) {
	idp, err := devidp.Start(devidp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	verifier := admin.OIDCOperators(oidcauth.Config{Issuer: idp.Issuer(), ClientID: idp.ClientID(), Role: "lock-operator",
		RequireAMR: []string{"otp"}, CAPEM: idp.CAPEM()})
	env := devenvtest.Start(t, devenv.Options{Operators: verifier, Classes: forceEnvClasses()})
	ctx := ctxT(t, 2*time.Minute)
	admin := adminOf(t, env)

	alice, err := idp.SignInWithOTP(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	bob, err := idp.SignInWithOTP(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := idp.User("carol")
	carolNoOTP, err := idp.SignInIDToken(ctx, devidp.Credentials{User: u.Name, Password: u.Password})
	if err != nil {
		t.Fatal(err)
	}

	const key = "jobs/oidc-1"
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), devenvtest.Fast.Name)
	fenced := make(chan struct{})
	h, err := s.Lock(ctx, key, func(*lockclient.Hold) { close(fenced) })
	if err != nil {
		t.Fatal(err)
	}

	// carol has no role and no second factor: refused, naming the rule.
	_, err = admin.RequestForceRelease(as(ctx, carolNoOTP), &adminv1.RequestForceReleaseRequest{Key: key, Reason: "stuck"})
	if err == nil || !strings.Contains(err.Error(), "rule role") || strings.Contains(err.Error(), carolNoOTP) {
		t.Fatalf("carol (no role, no second factor) requesting: %v; want a refusal naming the rule, not quoting the token", err)
	}
	if _, meta := reason.Info(err); meta["rule"] != "role" {
		t.Fatalf("carol's refusal names rule %q in its metadata, want role", meta["rule"])
	}
	// alice's token on a workload's connection (a token stolen into a
	// workload) is refused: operators connect as operators.
	workload := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "demo").Conn())
	_, err = workload.RequestForceRelease(as(ctx, alice), &adminv1.RequestForceReleaseRequest{Key: key, Reason: "stuck"})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "not_an_operator_identity")

	act := request(t, ctx, admin, alice, key)
	_, err = admin.ApproveAction(as(ctx, alice), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "same_operator")
	// bob's token on alice's SVID (a token carried on another operator's
	// connection) is refused, and the request stays pending: the person
	// signed in must be the one the operator SVID names.
	_, err = admin.ApproveAction(as(ctx, bob), &adminv1.ApproveActionRequest{Id: act.GetId()})
	wantCause(t, err, lockv1.ErrorReason_PERMISSION_DENIED, "operator_svid_mismatch")
	if !strings.Contains(err.Error(), "/operator/alice") || !strings.Contains(err.Error(), `"bob"`) {
		t.Fatalf("the mismatch refusal %v does not name the SVID and the signed-in account", err)
	}
	if got, err := admin.GetAction(as(ctx, alice), &adminv1.GetActionRequest{Id: act.GetId()}); err != nil || got.GetAction().GetState() != "pending" {
		t.Fatalf("the action after a refused approval: %v (err %v), want pending", got.GetAction(), err)
	}
	bobs := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "bob").Conn())
	if _, err := bobs.ApproveAction(as(ctx, bob), &adminv1.ApproveActionRequest{Id: act.GetId()}); err != nil {
		t.Fatalf("bob's approval on his own SVID: %v", err)
	}
	select {
	case <-fenced:
	case <-ctx.Done():
		t.Fatal("the holder's OnFence never ran after the approval")
	}
	if h.CanStart() {
		t.Fatal("the force-released holder may still start work")
	}
	got, err := bobs.GetAction(as(ctx, bob), &adminv1.GetActionRequest{Id: act.GetId()})
	if err != nil || got.GetAction().GetState() != "approved" {
		t.Fatalf("the action after approval: %v (err %v)", got.GetAction(), err)
	}
}
