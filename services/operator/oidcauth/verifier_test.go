package oidcauth_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

// The tests run a real OpenID provider (devidp, zitadel's op package) and
// sign users in through the device flow and its sign-in form: no mocks.

func start(t *testing.T, cfg devidp.Config) *devidp.Provider {
	t.Helper()
	p, err := devidp.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// operatorConfig is the production shape: role lock-operator in "roles",
// a second factor in amr.
func operatorConfig(p *devidp.Provider) oidcauth.Config {
	return oidcauth.Config{
		Issuer: p.Issuer(), ClientID: p.ClientID(), CAPEM: p.CAPEM(),
		RoleClaim: "roles", Role: "lock-operator", RequireAMR: []string{"otp", "mfa", "hwk"},
	}
}

func verifier(t *testing.T, cfg oidcauth.Config) *oidcauth.Verifier {
	t.Helper()
	v, err := oidcauth.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func signIn(t *testing.T, p *devidp.Provider, user string, withOTP bool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var raw string
	var err error
	if withOTP {
		raw, err = p.SignInWithOTP(ctx, user)
	} else {
		u, _ := p.User(user)
		raw, err = p.SignInIDToken(ctx, devidp.Credentials{User: user, Password: u.Password})
	}
	if err != nil {
		t.Fatalf("sign in %s: %v", user, err)
	}
	return raw
}

// refusedFor returns nil if v refuses raw for rule, without echoing the
// token; otherwise an error saying what happened. Tests check it against
// the real verifier (must be nil) and against a broken variant (must not
// be nil), which shows the test can fail.
func refusedFor(v *oidcauth.Verifier, raw string, rule oidcauth.Rule) error {
	op, err := v.Verify(context.Background(), raw)
	if err == nil {
		return fmt.Errorf("accepted %s, want refusal by rule %s", op.Subject, rule)
	}
	if got := oidcauth.RuleOf(err); got != rule {
		return fmt.Errorf("refused by rule %q (%v), want %q", got, err, rule)
	}
	if sig := raw[strings.LastIndex(raw, ".")+1:]; len(sig) >= 16 && strings.Contains(err.Error(), sig) {
		return fmt.Errorf("error echoes the token: %v", err)
	}
	return nil
}

func TestAcceptsOperatorWithOTP(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{IDTokenLifetime: time.Minute})
	v := verifier(t, operatorConfig(p))
	before := time.Now()
	op, err := v.Verify(context.Background(), signIn(t, p, "alice", true))
	if err != nil {
		t.Fatal(err)
	}
	if op.Subject != "user-alice" || op.Issuer != p.Issuer() || op.Email != "alice@example.test" ||
		op.PreferredUsername != "alice" {
		t.Errorf("operator = %+v", op)
	}
	if !slices.Contains(op.AMR, "otp") || !slices.Contains(op.AMR, "pwd") || !slices.Contains(op.Roles, "lock-operator") {
		t.Errorf("amr %q roles %q", op.AMR, op.Roles)
	}
	if d := op.Expiry.Sub(before); d < 58*time.Second || d > 62*time.Second {
		t.Errorf("expiry %v after sign-in, want the configured minute", d)
	}
}

func TestRefusesWithoutSecondFactor(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	raw := signIn(t, p, "alice", false)
	if err := refusedFor(verifier(t, operatorConfig(p)), raw, oidcauth.RuleMFA); err != nil {
		t.Error(err)
	}
	broken := operatorConfig(p)
	broken.RequireAMR, broken.InsecureSingleFactor = nil, true
	if refusedFor(verifier(t, broken), raw, oidcauth.RuleMFA) == nil {
		t.Error("a verifier without the MFA requirement refused too: the test cannot tell it apart")
	}
}

func TestNewRequiresSecondFactorRule(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	cfg := operatorConfig(p)
	cfg.RequireAMR = nil
	if _, err := oidcauth.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "RequireAMR") {
		t.Fatalf("New with no MFA rule: %v", err)
	}
}

func TestACR(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{ACRMultiFactor: "gold", ACRSingleFactor: "bronze"})
	cfg := operatorConfig(p)
	cfg.RequireAMR, cfg.ACR = nil, "gold"
	v := verifier(t, cfg)
	op, err := v.Verify(context.Background(), signIn(t, p, "bob", true))
	if err != nil || op.ACR != "gold" {
		t.Fatalf("bob with OTP: %+v %v", op, err)
	}
	if err := refusedFor(v, signIn(t, p, "bob", false), oidcauth.RuleMFA); err != nil {
		t.Error(err)
	}
}

func TestRefusesUserWithoutRole(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	raw := signIn(t, p, "carol", true)
	if err := refusedFor(verifier(t, operatorConfig(p)), raw, oidcauth.RuleRole); err != nil {
		t.Error(err)
	}
	// Keycloak's built-in place for realm roles is realm_access.roles; a
	// verifier looking there finds nothing in this provider's tokens.
	nested := operatorConfig(p)
	nested.RoleClaim = "realm_access.roles"
	if err := refusedFor(verifier(t, nested), signIn(t, p, "alice", true), oidcauth.RuleRole); err != nil {
		t.Error(err)
	}
}

func TestRefusesExpired(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{IDTokenLifetime: 3 * time.Second})
	var skew atomic.Int64
	cfg := operatorConfig(p)
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	v := verifier(t, cfg)
	raw := signIn(t, p, "alice", true)
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Fatalf("fresh token: %v", err)
	}
	skew.Store(int64(4 * time.Second)) // the clock passes the 3 s lifetime
	if err := refusedFor(v, raw, oidcauth.RuleExpired); err != nil {
		t.Error(err)
	}
	// Broken variant: a verifier whose clock stands still accepts it.
	stopped := operatorConfig(p)
	frozen := time.Now()
	stopped.Now = func() time.Time { return frozen }
	if refusedFor(verifier(t, stopped), raw, oidcauth.RuleExpired) == nil {
		t.Error("a verifier with a stopped clock refused too: the test cannot tell it apart")
	}
}

func TestRefusesWrongAudience(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	cfg := operatorConfig(p)
	cfg.ClientID = "lockplane-admin-api"
	if err := refusedFor(verifier(t, cfg), signIn(t, p, "alice", true), oidcauth.RuleAudience); err != nil {
		t.Error(err)
	}
}

func TestRefusesOtherProvidersToken(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	other := start(t, devidp.Config{})
	v := verifier(t, operatorConfig(p))
	if err := refusedFor(v, signIn(t, other, "alice", true), oidcauth.RuleIssuer); err != nil {
		t.Error(err)
	}
}

// Not parallel: it runs while the parallel tests wait, so none of their
// providers can take the port between the close and the restart.
func TestRefusesTokenOfEarlierInstanceAtSameIssuer(t *testing.T) {
	first, err := devidp.Start(devidp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	v := verifier(t, operatorConfig(first))
	old := signIn(t, first, "alice", true)
	if _, err := v.Verify(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	first.Close()
	// Same address, same CA, so the same issuer: only the signing key differs.
	second := start(t, devidp.Config{Addr: first.Addr(), CA: first.CA()})
	if second.Issuer() != first.Issuer() {
		t.Fatalf("issuer %s, want %s", second.Issuer(), first.Issuer())
	}
	// The verifier refetches the JWKS for the new key (rotation works)...
	if _, err := v.Verify(context.Background(), signIn(t, second, "alice", true)); err != nil {
		t.Fatalf("token of the restarted provider: %v", err)
	}
	// ...and the old key is gone from it.
	if err := refusedFor(v, old, oidcauth.RuleSignature); err != nil {
		t.Error(err)
	}
}

func TestRefusesTamperedAndMalformed(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	v := verifier(t, operatorConfig(p))
	raw := signIn(t, p, "carol", true)
	parts := strings.Split(raw, ".")
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	claims["roles"] = []string{"lock-operator"} // carol grants herself the role
	forged, _ := json.Marshal(claims)
	parts[1] = base64.RawURLEncoding.EncodeToString(forged)
	if err := refusedFor(v, strings.Join(parts, "."), oidcauth.RuleSignature); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"", "not-a-jwt", "a.b.c", parts[0] + ".e30"} {
		if err := refusedFor(v, bad, oidcauth.RuleMalformed); err != nil {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// A force-release or epoch advance needs a recent sign-in with the second
// factor, not a token refreshed from a session opened days ago: a token
// whose auth_time is older than the maximum age (12 h unless configured)
// is refused by rule auth_time, though it has not expired.
func TestRefusesASignInOlderThanTheMaximumAge(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{IDTokenLifetime: 48 * time.Hour})
	var skew atomic.Int64
	cfg := operatorConfig(p)
	cfg.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	v := verifier(t, cfg)
	raw := signIn(t, p, "alice", true)
	op, err := v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatalf("fresh sign-in: %v", err)
	}
	if op.AuthTime.IsZero() || time.Since(op.AuthTime) > time.Minute {
		t.Fatalf("auth_time %v, want the sign-in's", op.AuthTime)
	}
	skew.Store(int64(13 * time.Hour)) // the token lives on; the sign-in is 13 h old
	if err := refusedFor(v, raw, oidcauth.Rule("auth_time")); err != nil {
		t.Error(err)
	}
	_, err = v.Verify(context.Background(), raw)
	if err == nil || !strings.Contains(err.Error(), "run lockctl login") {
		t.Errorf("refusal %v, want it to say to sign in again", err)
	}
}

// The maximum age is configurable: an hour refuses a sign-in of two hours
// ago that the default would take.
func TestMaxAuthAgeIsConfigurable(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{IDTokenLifetime: 48 * time.Hour})
	raw := signIn(t, p, "bob", true)
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	cfg := operatorConfig(p)
	cfg.Now = later
	if _, err := verifier(t, cfg).Verify(context.Background(), raw); err != nil {
		t.Fatalf("a sign-in 2 h old with the default maximum: %v", err)
	}
	cfg.MaxAuthAge = time.Hour
	if err := refusedFor(verifier(t, cfg), raw, oidcauth.RuleAuthTime); err != nil {
		t.Error(err)
	}
	cfg.MaxAuthAge = -time.Hour
	if _, err := oidcauth.New(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "MaxAuthAge") {
		t.Errorf("New with a negative MaxAuthAge: %v", err)
	}
}

// The account is the configured claim, and must be usable as the last
// segment of an operator SVID: an email address is not.
func TestAccountClaim(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	raw := signIn(t, p, "alice", true)
	op, err := verifier(t, operatorConfig(p)).Verify(context.Background(), raw)
	if err != nil || op.Account != "alice" {
		t.Fatalf("account %q (err %v), want preferred_username alice", op.Account, err)
	}
	cfg := operatorConfig(p)
	cfg.AccountClaim = "email"
	if err := refusedFor(verifier(t, cfg), raw, oidcauth.RuleAccount); err != nil {
		t.Error(err)
	}
	cfg.AccountClaim = "no_such_claim"
	if err := refusedFor(verifier(t, cfg), raw, oidcauth.RuleAccount); err != nil {
		t.Error(err)
	}
}
