// Package login is the client side of operator sign-in, for `lockctl
// login`: the OAuth 2.0 device authorization grant (RFC 8628) against the
// operators' OpenID provider (Keycloak in production), and a file cache of
// the resulting ID token for its lifetime.
//
// Guarantees:
//   - The provider is reached over the HTTP client of issuertrust: only the
//     configured CA (or the system roots) is trusted, every request bounded.
//   - Login stores a token only after checking its signature, issuer,
//     audience and expiry against the provider (go-oidc). It does not check
//     role or second factor: the Admin API does, and says which rule failed.
//   - The cache file is written atomically with mode 0600 (its directory
//     made 0700 if missing); Cached refuses a file others can read or write.
//   - Cached never returns an expired token: it returns ErrExpired, whose
//     message tells the operator to run lockctl login.
package login

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/lockplane/lockplane/services/operator/issuertrust"
)

// Config says where and how to sign in.
type Config struct {
	// Issuer, e.g. https://keycloak.example/realms/lockplane.
	Issuer string
	// ClientID of the public client with the device grant (e.g. lockctl).
	ClientID string
	// Scopes; default openid, profile, email.
	Scopes []string
	// CAPEM, if set, is the only CA trusted for the issuer's TLS.
	CAPEM []byte
	// CachePath is the token file; default DefaultCachePath().
	CachePath string
	// Prompt shows the operator where to go; default prints to Out.
	Prompt func(Prompt)
	// Out receives the default prompt; default os.Stderr.
	Out io.Writer
	// HTTPTimeout bounds each request; default issuertrust.DefaultTimeout.
	HTTPTimeout time.Duration
}

// Prompt is what the operator needs to approve the sign-in in a browser.
type Prompt struct {
	VerificationURI, VerificationURIComplete, UserCode string
	Expiry                                             time.Time
}

// Token is a cached operator ID token.
type Token struct {
	Issuer   string    `json:"issuer"`
	ClientID string    `json:"client_id"`
	Subject  string    `json:"subject"`
	IDToken  string    `json:"id_token"`
	Expiry   time.Time `json:"expiry"`
}

// ErrDenied is returned by Login when the operator denied the sign-in.
var ErrDenied = errors.New("login: the sign-in was denied at the provider")

// Login runs the device flow: it asks the provider for a device code,
// shows the verification URI and user code through Prompt, polls the token
// endpoint at the interval the provider sets until the operator approves,
// denies, the code expires or ctx ends, verifies the ID token and caches
// it. It returns the cached token.
func Login(ctx context.Context, cfg Config) (Token, error) {
	if cfg.Issuer == "" || cfg.ClientID == "" {
		return Token{}, errors.New("login: Config.Issuer and Config.ClientID are required")
	}
	// The device code and the ID token cross this connection: never in
	// clear, as the arbiter refuses a non-https issuer too.
	if u, err := url.Parse(cfg.Issuer); err != nil || u.Scheme != "https" || u.Host == "" {
		return Token{}, fmt.Errorf("login: issuer %q: must be an https URL", cfg.Issuer)
	}
	path := cfg.CachePath
	if path == "" {
		var err error
		if path, err = DefaultCachePath(); err != nil {
			return Token{}, err
		}
	}
	hc, err := issuertrust.HTTPClient(cfg.CAPEM, cfg.HTTPTimeout)
	if err != nil {
		return Token{}, fmt.Errorf("login: Config.CAPEM: %w", err)
	}
	ctx = oidc.ClientContext(ctx, hc)
	provider, err := oidc.NewProvider(ctx, cfg.Issuer)
	if err != nil {
		return Token{}, fmt.Errorf("login: discovery at %s: %w", cfg.Issuer, err)
	}
	ep := provider.Endpoint()
	if ep.DeviceAuthURL == "" {
		return Token{}, fmt.Errorf("login: %s offers no device authorization endpoint", cfg.Issuer)
	}
	ep.AuthStyle = oauth2.AuthStyleInParams // a public client: client_id in the body, no secret
	scopes := cfg.Scopes
	if len(scopes) == 0 {
		scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	conf := &oauth2.Config{ClientID: cfg.ClientID, Endpoint: ep, Scopes: scopes}
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return Token{}, fmt.Errorf("login: device authorization: %w", err)
	}
	pr := Prompt{VerificationURI: da.VerificationURI, VerificationURIComplete: da.VerificationURIComplete,
		UserCode: da.UserCode, Expiry: da.Expiry}
	if cfg.Prompt != nil {
		cfg.Prompt(pr)
	} else {
		out := cfg.Out
		if out == nil {
			out = os.Stderr
		}
		printPrompt(out, pr)
	}
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && re.ErrorCode == "access_denied" {
			return Token{}, ErrDenied
		}
		if errors.As(err, &re) && re.ErrorCode == "expired_token" {
			return Token{}, errors.New("login: the user code expired before it was approved; run lockctl login again")
		}
		return Token{}, fmt.Errorf("login: waiting for approval: %w", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return Token{}, errors.New("login: the provider returned no ID token (is the openid scope allowed?)")
	}
	idt, err := provider.Verifier(&oidc.Config{ClientID: cfg.ClientID}).Verify(ctx, raw)
	if err != nil {
		return Token{}, fmt.Errorf("login: the provider's ID token does not verify: %w", err)
	}
	t := Token{Issuer: idt.Issuer, ClientID: cfg.ClientID, Subject: idt.Subject, IDToken: raw, Expiry: idt.Expiry}
	if err := store(path, t); err != nil {
		return Token{}, err
	}
	return t, nil
}

func printPrompt(w io.Writer, p Prompt) {
	fmt.Fprintf(w, "To sign in, open %s\nand enter the code: %s\n", p.VerificationURI, p.UserCode)
	if p.VerificationURIComplete != "" {
		fmt.Fprintf(w, "(or open %s)\n", p.VerificationURIComplete)
	}
	if !p.Expiry.IsZero() {
		fmt.Fprintf(w, "The code expires at %s. Waiting for approval...\n", p.Expiry.Local().Format(time.Kitchen))
	}
}
