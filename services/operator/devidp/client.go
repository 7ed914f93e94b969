package devidp

import (
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// client is the provider's one OAuth client: public (a CLI cannot keep a
// secret), native, allowed the device code grant only. It mirrors the
// Keycloak client docs/operators.md describes.
type client struct {
	id          string
	idLifetime  time.Duration
	allowScopes map[string]bool
}

var _ op.Client = (*client)(nil)

func (c *client) GetID() string                       { return c.id }
func (c *client) RedirectURIs() []string              { return nil }
func (c *client) PostLogoutRedirectURIs() []string    { return nil }
func (c *client) ApplicationType() op.ApplicationType { return op.ApplicationTypeNative }
func (c *client) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodNone }
func (c *client) ResponseTypes() []oidc.ResponseType  { return nil }
func (c *client) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeDeviceCode}
}
func (c *client) LoginURL(string) string               { return "" }
func (c *client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c *client) IDTokenLifetime() time.Duration       { return c.idLifetime }
func (c *client) DevMode() bool                        { return false }
func (c *client) IsScopeAllowed(scope string) bool     { return c.allowScopes[scope] }
func (c *client) ClockSkew() time.Duration             { return 0 }
func (c *client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (c *client) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *client) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
