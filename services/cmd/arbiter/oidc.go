package main

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

// oidcFlags are the operators' sign-in: the OpenID provider whose ID
// tokens the Admin API accepts for force-release and epoch advance.
type oidcFlags struct {
	issuer, clientID, ca string
	roleClaim, role      string
	amr, acr             string
	accountClaim         string
	maxAuthAge           time.Duration
}

func (o *oidcFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&o.issuer, "oidc-issuer", "", "the OpenID provider operators sign in with (e.g. https://keycloak.example/realms/lockplane): its ID tokens authorise force-release and epoch advance (two operators each); without it those are refused")
	fs.StringVar(&o.clientID, "oidc-client-id", "lockctl", "the client operators sign in with: it must be in the token's audience")
	fs.StringVar(&o.ca, "oidc-ca", "", "CA bundle (PEM) that signed the provider's TLS certificate; the system roots when empty")
	fs.StringVar(&o.roleClaim, "oidc-role-claim", "roles", "the ID token claim listing the operator's roles; dots walk into objects (Keycloak: realm_access.roles)")
	fs.StringVar(&o.role, "oidc-role", "lock-operator", "the role an operator's token must list")
	fs.StringVar(&o.amr, "oidc-amr", "otp,mfa,hwk", "comma-separated amr values, any of which proves a second factor")
	fs.StringVar(&o.acr, "oidc-acr", "", "an acr value that also proves a second factor (e.g. Keycloak's level for OTP)")
	fs.StringVar(&o.accountClaim, "oidc-account-claim", "preferred_username", "the ID token claim naming the operator's account: the last segment of the operator SVID they must connect with (alice signs in as alice on .../operator/alice)")
	fs.DurationVar(&o.maxAuthAge, "oidc-max-auth-age", oidcauth.DefaultMaxAuthAge, "how long ago an operator may have signed in (the token's auth_time) to request or approve a force-release or epoch advance; older, or without auth_time, is refused")
}

// verifier is the operators' verifier of the flags, nil without
// --oidc-issuer. It does not reach the provider: the first sign-in does.
func (o oidcFlags) verifier() (admin.OperatorVerifier, error) {
	if o.issuer == "" {
		if o.ca != "" || o.acr != "" {
			return nil, errors.New("--oidc-ca, --oidc-acr: given without --oidc-issuer")
		}
		return nil, nil
	}
	if u, err := url.Parse(o.issuer); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--oidc-issuer: want the provider's https URL, e.g. https://keycloak.example/realms/lockplane, got %q", o.issuer)
	}
	var amr []string
	for _, v := range strings.Split(o.amr, ",") {
		if v = strings.TrimSpace(v); v != "" {
			amr = append(amr, v)
		}
	}
	if err := oidcauth.CheckSecondFactor(amr, o.acr); err != nil {
		return nil, fmt.Errorf("--oidc-amr, --oidc-acr: %w (ADR-20: operators sign in with two factors)", err)
	}
	if o.clientID == "" || o.role == "" || o.roleClaim == "" || o.accountClaim == "" {
		return nil, errors.New("--oidc-client-id, --oidc-role, --oidc-role-claim, --oidc-account-claim: must not be empty")
	}
	if o.maxAuthAge < time.Minute || o.maxAuthAge > 7*24*time.Hour {
		return nil, fmt.Errorf("--oidc-max-auth-age %v: must be between 1m and 168h (ADR-20: a force-release needs a recent sign-in with a second factor)", o.maxAuthAge)
	}
	cfg := oidcauth.Config{Issuer: o.issuer, ClientID: o.clientID, RoleClaim: o.roleClaim, Role: o.role, RequireAMR: amr, ACR: o.acr,
		AccountClaim: o.accountClaim, MaxAuthAge: o.maxAuthAge}
	if o.ca != "" {
		pem, err := os.ReadFile(o.ca)
		if err != nil {
			return nil, fmt.Errorf("--oidc-ca: %w", err)
		}
		cfg.CAPEM = pem
	}
	return admin.OIDCOperators(cfg), nil
}
