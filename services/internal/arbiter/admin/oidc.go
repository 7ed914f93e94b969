package admin

import (
	"context"
	"fmt"
	"sync"

	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

// OIDCOperators verifies operators' ID tokens with the go-oidc verifier
// of cfg (services/operator/oidcauth). The issuer's discovery document is
// fetched on the first call, and again on each call until it has been: an
// issuer that is down when the arbiter starts delays sign-in, never the
// lock service.
func OIDCOperators(cfg oidcauth.Config) OperatorVerifier { return &oidcOperators{cfg: cfg} }

type oidcOperators struct {
	cfg oidcauth.Config
	mu  sync.Mutex
	v   *oidcauth.Verifier
}

func (o *oidcOperators) verifier(ctx context.Context) (*oidcauth.Verifier, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.v == nil {
		v, err := oidcauth.New(ctx, o.cfg)
		if err != nil {
			return nil, fmt.Errorf("the OpenID provider %s is not reachable or not valid: %w", o.cfg.Issuer, err)
		}
		o.v = v
	}
	return o.v, nil
}

func (o *oidcOperators) Verify(ctx context.Context, raw string) (Operator, error) {
	v, err := o.verifier(ctx)
	if err != nil {
		return Operator{}, err
	}
	op, err := v.Verify(ctx, raw)
	if err != nil {
		return Operator{}, err
	}
	// The account, never the display name: it binds the person to their
	// operator SVID, and a display name is neither unique nor fixed.
	return Operator{Issuer: op.Issuer, Subject: op.Subject, Name: op.Account}, nil
}
