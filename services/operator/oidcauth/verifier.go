// Package oidcauth verifies operators' OpenID Connect ID tokens.
//
// Operators (people) present them to the Admin API; the package also
// decides whether two operators are different people.
//
// Verification is go-oidc's (coreos/go-oidc/v3): discovery, the issuer's
// JWKS fetched and cached by its remote key set (refetched when a token
// names an unknown key), signature, issuer, audience and expiry. On top of
// it this package requires a subject, a role in a configurable claim, a
// second factor (amr or acr), a sign-in no older than a maximum age
// (auth_time) and an account name (a configurable claim) that an operator
// SVID can carry as its last path segment.
//
// Guarantees:
//   - Verify accepts a token only if go-oidc accepted it and every rule
//     here holds; everything else is an *Error naming one Rule.
//   - When go-oidc refuses, the rule named is the first that fails in the
//     order go-oidc checks: issuer, audience, expiry, not-before, then
//     signature. A claim rule named for an unverified token does not mean
//     its signature was good: the token is refused either way.
//   - Errors never contain the token.
package oidcauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/lockplane/lockplane/services/operator/issuertrust"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Config says which tokens are operators' tokens.
type Config struct {
	// Issuer is the exact iss, e.g. https://keycloak.example/realms/lockplane.
	Issuer string
	// ClientID must be in aud: the client operators sign in with (lockctl).
	ClientID string
	// RoleClaim names the claim listing roles; default "roles". Dots walk
	// into objects: "realm_access.roles" is Keycloak's built-in place.
	RoleClaim string
	// Role must be in the role claim, e.g. "lock-operator". Required.
	Role string
	// RequireAMR: the token passes the MFA rule if its amr holds any of
	// these (e.g. "otp", "mfa", "hwk").
	RequireAMR []string
	// ACR: the token also passes the MFA rule if its acr equals this.
	ACR string
	// AccountClaim names the claim holding the person's account, the
	// last segment of the operator SVID they connect with; default
	// "preferred_username". Dots walk into objects.
	AccountClaim string
	// MaxAuthAge is how long ago the person may have signed in (auth_time)
	// for a token to authorise a force-release or an epoch advance;
	// default DefaultMaxAuthAge. A token without auth_time is refused.
	MaxAuthAge time.Duration
	// InsecureSingleFactor lets tokens without a second factor through.
	// New refuses a Config with no RequireAMR and no ACR unless this is set;
	// nothing in production sets it.
	InsecureSingleFactor bool
	// CAPEM, if set, is the only CA trusted for the issuer's TLS; empty
	// means the system roots.
	CAPEM []byte
	// DiscoveryTimeout bounds the discovery request in New; default 10 s.
	// HTTPTimeout bounds each later JWKS fetch; default 10 s.
	DiscoveryTimeout, HTTPTimeout time.Duration
	// Now is the clock for expiry; nil means time.Now.
	Now func() time.Time
}

// DefaultMaxAuthAge is the default Config.MaxAuthAge: a working day. An
// operator breaking a lock signed in with their second factor that day,
// whatever the provider's session and refresh lifetimes (ADR-20).
const DefaultMaxAuthAge = 12 * time.Hour

// authTimeSkew is how far in the future an auth_time may be, for the
// provider's clock running ahead of ours.
const authTimeSkew = 5 * time.Minute

// singleFactor are amr and acr values that prove no second factor:
// a password, a PIN, knowledge-based answers; Keycloak's levels 0 and 1.
var (
	singleFactorAMR = []string{"pwd", "pin", "kba"}
	singleFactorACR = []string{"0", "1"}
)

// CheckSecondFactor refuses a second-factor requirement that a single
// factor meets: any of amr from singleFactorAMR, or such an acr. The
// arbiter's flags and the stack's option are checked with it.
func CheckSecondFactor(amr []string, acr string) error {
	for _, v := range amr {
		if slices.Contains(singleFactorAMR, v) {
			return fmt.Errorf("amr %q: proves a single factor; name second factors (otp, mfa, hwk)", v)
		}
	}
	if slices.Contains(singleFactorACR, acr) {
		return fmt.Errorf("acr %q: a single-factor level; name the level your provider gives a second factor", acr)
	}
	if len(amr) == 0 && acr == "" {
		return errors.New("amr, acr: at least one must prove a second factor")
	}
	return nil
}

// Operator is a person whose ID token passed every rule.
type Operator struct {
	Issuer, Subject         string
	Name, PreferredUsername string
	// Account is the value of Config.AccountClaim.
	Account          string
	Email            string
	Roles, AMR       []string
	ACR              string
	AuthTime, Expiry time.Time
}

// Verifier checks operators' ID tokens. It is safe for concurrent use.
type Verifier struct {
	cfg      Config
	verifier *oidc.IDTokenVerifier
}

// New fetches the issuer's discovery document (within DiscoveryTimeout) and
// returns a Verifier. Keys are fetched on first use and cached.
func New(ctx context.Context, cfg Config) (*Verifier, error) {
	switch {
	case cfg.Issuer == "":
		return nil, errors.New("oidcauth: Config.Issuer is required")
	case cfg.ClientID == "":
		return nil, errors.New("oidcauth: Config.ClientID is required")
	case cfg.Role == "":
		return nil, errors.New("oidcauth: Config.Role is required")
	case len(cfg.RequireAMR) == 0 && cfg.ACR == "" && !cfg.InsecureSingleFactor:
		return nil, errors.New("oidcauth: Config.RequireAMR or Config.ACR is required (a second factor)")
	}
	if cfg.RoleClaim == "" {
		cfg.RoleClaim = "roles"
	}
	if cfg.AccountClaim == "" {
		cfg.AccountClaim = "preferred_username"
	}
	if cfg.MaxAuthAge < 0 {
		return nil, errors.New("oidcauth: Config.MaxAuthAge must not be negative (0: the default, 12h)")
	}
	if cfg.MaxAuthAge == 0 {
		cfg.MaxAuthAge = DefaultMaxAuthAge
	}
	if cfg.DiscoveryTimeout <= 0 {
		cfg.DiscoveryTimeout = 10 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	hc, err := issuertrust.HTTPClient(cfg.CAPEM, cfg.HTTPTimeout)
	if err != nil {
		return nil, fmt.Errorf("oidcauth: Config.CAPEM: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, cfg.DiscoveryTimeout)
	defer cancel()
	provider, err := oidc.NewProvider(oidc.ClientContext(dctx, hc), cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("oidcauth: discovery at %s: %w", cfg.Issuer, err)
	}
	return &Verifier{
		cfg:      cfg,
		verifier: provider.Verifier(&oidc.Config{ClientID: cfg.ClientID, Now: cfg.Now}),
	}, nil
}

// claims are the ID token claims beyond go-oidc's IDToken fields.
type claims struct {
	Name              string   `json:"name"`
	PreferredUsername string   `json:"preferred_username"`
	Email             string   `json:"email"`
	AMR               []string `json:"amr"`
	ACR               string   `json:"acr"`
	AuthTime          float64  `json:"auth_time"`
}

// Verify checks rawIDToken and returns the operator it names, or an *Error.
func (v *Verifier) Verify(ctx context.Context, rawIDToken string) (Operator, error) {
	if strings.Count(rawIDToken, ".") != 2 {
		return Operator{}, refuse(RuleMalformed, "not a compact JWS (three dot-separated parts)")
	}
	idt, err := v.verifier.Verify(ctx, rawIDToken)
	if err != nil {
		return Operator{}, v.classify(rawIDToken, err)
	}
	if idt.Subject == "" {
		return Operator{}, refuse(RuleSubject, "claim sub is empty")
	}
	var c claims
	var all map[string]any
	if err := idt.Claims(&c); err != nil {
		return Operator{}, &Error{Rule: RuleMalformed, Detail: "claims", Err: err}
	}
	if err := idt.Claims(&all); err != nil {
		return Operator{}, &Error{Rule: RuleMalformed, Detail: "claims", Err: err}
	}
	roles, err := stringsAt(all, v.cfg.RoleClaim)
	if err != nil {
		return Operator{}, refuse(RuleRole, "claim %s: %v", v.cfg.RoleClaim, err)
	}
	if !slices.Contains(roles, v.cfg.Role) {
		return Operator{}, refuse(RuleRole, "claim %s does not list role %q", v.cfg.RoleClaim, v.cfg.Role)
	}
	if !v.secondFactor(c) {
		return Operator{}, refuse(RuleMFA, "%s; got amr %q, acr %q", v.mfaWant(), c.AMR, c.ACR)
	}
	authTime, err := v.recentSignIn(c.AuthTime)
	if err != nil {
		return Operator{}, err
	}
	account, err := v.account(all)
	if err != nil {
		return Operator{}, err
	}
	return Operator{
		Issuer: idt.Issuer, Subject: idt.Subject,
		Name: c.Name, PreferredUsername: c.PreferredUsername, Account: account, Email: c.Email,
		Roles: roles, AMR: c.AMR, ACR: c.ACR, AuthTime: authTime, Expiry: idt.Expiry,
	}, nil
}

// recentSignIn refuses (RuleAuthTime) a token without auth_time, or whose
// sign-in is older than MaxAuthAge or in the future: a token must come
// from a recent sign-in with the second factor, not from a session kept
// alive (refreshed, silently re-issued) since long ago.
func (v *Verifier) recentSignIn(unix float64) (time.Time, error) {
	if unix <= 0 {
		return time.Time{}, refuse(RuleAuthTime, "claim auth_time is missing: the provider must say when the person signed in "+
			"(Keycloak always does; elsewhere request it with max_age or the auth_time claim)")
	}
	at, now := time.Unix(int64(unix), 0), v.cfg.Now()
	if age := now.Sub(at); age > v.cfg.MaxAuthAge {
		return time.Time{}, refuse(RuleAuthTime, "signed in %s ago (claim auth_time %s), more than the maximum %s: run lockctl login again",
			age.Truncate(time.Second), at.UTC().Format(time.RFC3339), v.cfg.MaxAuthAge)
	}
	if at.After(now.Add(authTimeSkew)) {
		return time.Time{}, refuse(RuleAuthTime, "claim auth_time %s is in the future (now %s): check the provider's clock",
			at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return at, nil
}

// account is the AccountClaim of the token: a single SPIFFE ID path
// segment, since the operator's SVID carries it as its last one.
func (v *Verifier) account(all map[string]any) (string, error) {
	names, err := stringsAt(all, v.cfg.AccountClaim)
	if err != nil || len(names) != 1 {
		return "", refuse(RuleAccount, "claim %s must be one string, the account an operator SVID names", v.cfg.AccountClaim)
	}
	name := names[0]
	if spiffeid.ValidatePathSegment(name) != nil { // also "", "." and ".."
		return "", refuse(RuleAccount, "claim %s %q is not usable as an SVID path segment (letters, digits, '.', '-', '_')", v.cfg.AccountClaim, name)
	}
	return name, nil
}

func (v *Verifier) secondFactor(c claims) bool {
	if v.cfg.InsecureSingleFactor {
		return true
	}
	if v.cfg.ACR != "" && c.ACR == v.cfg.ACR {
		return true
	}
	for _, m := range c.AMR {
		if slices.Contains(v.cfg.RequireAMR, m) {
			return true
		}
	}
	return false
}

func (v *Verifier) mfaWant() string {
	var want []string
	if len(v.cfg.RequireAMR) > 0 {
		want = append(want, fmt.Sprintf("claim amr must hold one of %q", v.cfg.RequireAMR))
	}
	if v.cfg.ACR != "" {
		want = append(want, fmt.Sprintf("claim acr must be %q", v.cfg.ACR))
	}
	return strings.Join(want, " or ")
}
