// Package oidcauth verifies the OpenID Connect ID tokens operators (people)
// present to the Admin API, and decides whether two operators are different
// people.
//
// Verification is go-oidc's (coreos/go-oidc/v3): discovery, the issuer's
// JWKS fetched and cached by its remote key set (refetched when a token
// names an unknown key), signature, issuer, audience and expiry. On top of
// it this package requires a subject, a role in a configurable claim and a
// second factor (amr or acr).
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
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"

	"github.com/lockplane/lockplane/services/operator/issuertrust"
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

// Operator is a person whose ID token passed every rule.
type Operator struct {
	Issuer, Subject         string
	Name, PreferredUsername string
	Email                   string
	Roles, AMR              []string
	ACR                     string
	AuthTime, Expiry        time.Time
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
	AuthTime          int64    `json:"auth_time"`
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
	op := Operator{
		Issuer: idt.Issuer, Subject: idt.Subject,
		Name: c.Name, PreferredUsername: c.PreferredUsername, Email: c.Email,
		Roles: roles, AMR: c.AMR, ACR: c.ACR, Expiry: idt.Expiry,
	}
	if c.AuthTime != 0 {
		op.AuthTime = time.Unix(c.AuthTime, 0)
	}
	return op, nil
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

// unverified are the claims classify reads from a token go-oidc refused.
type unverified struct {
	Issuer    string          `json:"iss"`
	Audience  json.RawMessage `json:"aud"`
	NotBefore *float64        `json:"nbf"`
}

// classify names the rule go-oidc's refusal broke. The refusal stands
// whatever the label; the unverified claims only choose the label.
func (v *Verifier) classify(raw string, err error) *Error {
	var expired *oidc.TokenExpiredError
	if errors.As(err, &expired) {
		return &Error{Rule: RuleExpired, Err: err,
			Detail: fmt.Sprintf("claim exp %s is before now %s",
				expired.Expiry.UTC().Format(time.RFC3339), v.cfg.Now().UTC().Format(time.RFC3339))}
	}
	parts := strings.Split(raw, ".")
	payload, derr := base64.RawURLEncoding.DecodeString(parts[1])
	var u unverified
	if derr != nil || json.Unmarshal(payload, &u) != nil {
		return &Error{Rule: RuleMalformed, Detail: "payload is not base64url JSON", Err: err}
	}
	if u.Issuer != v.cfg.Issuer {
		return &Error{Rule: RuleIssuer, Err: err,
			Detail: fmt.Sprintf("claim iss is %q, want %q", u.Issuer, v.cfg.Issuer)}
	}
	var aud []string
	if json.Unmarshal(u.Audience, &aud) != nil {
		var one string
		if json.Unmarshal(u.Audience, &one) == nil {
			aud = []string{one}
		}
	}
	if !slices.Contains(aud, v.cfg.ClientID) {
		return &Error{Rule: RuleAudience, Err: err,
			Detail: fmt.Sprintf("claim aud %q does not hold %q", aud, v.cfg.ClientID)}
	}
	if u.NotBefore != nil && time.Unix(int64(*u.NotBefore), 0).After(v.cfg.Now()) {
		return &Error{Rule: RuleNotYetValid, Err: err, Detail: "claim nbf is in the future"}
	}
	// go-oidc's messages here name the failure (parse, algorithm, key
	// fetch, verification), never the token, so the detail carries them.
	if strings.Contains(err.Error(), "malformed jwt") || strings.Contains(err.Error(), "unmarshal claims") {
		return &Error{Rule: RuleMalformed, Err: err, Detail: "not a valid JWS: " + err.Error()}
	}
	return &Error{Rule: RuleSignature, Err: err,
		Detail: "not verified with the issuer's keys: " + err.Error()}
}

// stringsAt reads a list of strings at a dotted claim path. A missing claim
// is an empty list; a claim of another type is an error.
func stringsAt(all map[string]any, path string) ([]string, error) {
	var cur any = all
	for _, seg := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, errors.New("is not an object")
		}
		if cur, ok = m[seg]; !ok {
			return nil, nil
		}
	}
	list, ok := cur.([]any)
	if !ok {
		if s, isStr := cur.(string); isStr { // a single role as a string
			return []string{s}, nil
		}
		return nil, errors.New("is not a list of strings")
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		s, ok := x.(string)
		if !ok {
			return nil, errors.New("is not a list of strings")
		}
		out = append(out, s)
	}
	return out, nil
}
