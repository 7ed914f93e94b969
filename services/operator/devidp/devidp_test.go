package devidp_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/lockplane/lockplane/services/operator/devidp"
)

func start(t *testing.T, cfg devidp.Config) *devidp.Provider {
	t.Helper()
	p, err := devidp.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// claimsOf decodes an ID token's payload. The signature is checked by the
// oidcauth tests; here only what the provider put in matters.
func claimsOf(t *testing.T, raw string) map[string]any {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("ID token has %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, x := range l {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func password(p *devidp.Provider, name string) string {
	u, _ := p.User(name)
	return u.Password
}

func TestDiscoveryOffersDeviceGrantOverHTTPS(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	if !strings.HasPrefix(p.Issuer(), "https://127.0.0.1:") {
		t.Fatalf("issuer %s", p.Issuer())
	}
	var disc struct {
		Issuer     string   `json:"issuer"`
		DeviceAuth string   `json:"device_authorization_endpoint"`
		Grants     []string `json:"grant_types_supported"`
	}
	resp, err := p.HTTPClient().Get(p.Issuer() + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&disc); err != nil {
		t.Fatal(err)
	}
	if disc.Issuer != p.Issuer() || disc.DeviceAuth == "" ||
		!slices.Contains(disc.Grants, "urn:ietf:params:oauth:grant-type:device_code") {
		t.Errorf("discovery %+v", disc)
	}
	// A client that does not trust the dev CA cannot talk to it.
	if _, err := http.Get(p.Issuer() + "/.well-known/openid-configuration"); err == nil {
		t.Error("system roots trusted the dev CA")
	}
}

func TestAMRShowsSecondFactorOnlyWithValidOTP(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{ACRMultiFactor: "2", ACRSingleFactor: "1"})
	withOTP, err := p.SignInWithOTP(ctx(t), "alice")
	if err != nil {
		t.Fatal(err)
	}
	c := claimsOf(t, withOTP)
	if amr := strs(c["amr"]); !slices.Equal(amr, devidp.AMRPasswordOTP) || c["acr"] != "2" {
		t.Errorf("with OTP: amr %q acr %v", amr, c["acr"])
	}
	if r := strs(c["roles"]); !slices.Equal(r, []string{"lock-operator"}) || c["sub"] != "user-alice" || c["aud"] == nil {
		t.Errorf("with OTP: claims %v", c)
	}
	pwdOnly, err := p.SignInIDToken(ctx(t), devidp.Credentials{User: "alice", Password: password(p, "alice")})
	if err != nil {
		t.Fatal(err)
	}
	c = claimsOf(t, pwdOnly)
	if amr := strs(c["amr"]); !slices.Equal(amr, devidp.AMRPassword) || c["acr"] != "1" {
		t.Errorf("password only: amr %q acr %v", amr, c["acr"])
	}
}

func TestUserWithoutRoleHasNoRoleClaim(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{RoleClaim: "groups"})
	raw, err := p.SignInWithOTP(ctx(t), "carol")
	if err != nil {
		t.Fatal(err)
	}
	if c := claimsOf(t, raw); c["groups"] != nil || c["roles"] != nil {
		t.Errorf("carol's claims %v", c)
	}
	raw, err = p.SignInWithOTP(ctx(t), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if c := claimsOf(t, raw); !slices.Equal(strs(c["groups"]), []string{"lock-operator"}) {
		t.Errorf("bob's claims %v", c)
	}
}

func TestFormRefusesBadCredentials(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	cases := []struct {
		name string
		c    devidp.Credentials
		want string
	}{
		{"wrong password", devidp.Credentials{User: "alice", Password: "nope"}, "wrong user name or password"},
		{"unknown user", devidp.Credentials{User: "mallory", Password: "x"}, "wrong user name or password"},
		{"wrong OTP", devidp.Credentials{User: "alice", Password: password(p, "alice"), OTP: "000000"}, "wrong one-time code"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.SignIn(ctx(t), tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
	if err := devidp.Approve(ctx(t), p.HTTPClient(), p.Issuer()+devidp.DeviceFormPath, "BCDF-GHJK",
		devidp.Credentials{User: "alice", Password: password(p, "alice")}); err == nil ||
		!strings.Contains(err.Error(), "unknown or expired user code") {
		t.Errorf("unknown user code: %v", err)
	}
}

// deviceFlow starts a device authorization as a CLI would.
func deviceFlow(t *testing.T, p *devidp.Provider) (*oauth2.Config, *oauth2.DeviceAuthResponse, context.Context) {
	t.Helper()
	c := oidc.ClientContext(ctx(t), p.HTTPClient())
	disc, err := oidc.NewProvider(c, p.Issuer())
	if err != nil {
		t.Fatal(err)
	}
	ep := disc.Endpoint()
	ep.AuthStyle = oauth2.AuthStyleInParams
	conf := &oauth2.Config{ClientID: p.ClientID(), Endpoint: ep, Scopes: []string{"openid"}}
	da, err := conf.DeviceAuth(c)
	if err != nil {
		t.Fatal(err)
	}
	return conf, da, c
}

func TestDeniedDeviceGetsNoToken(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	conf, da, c := deviceFlow(t, p)
	if err := devidp.Deny(c, p.HTTPClient(), da.VerificationURI, da.UserCode,
		devidp.Credentials{User: "bob", Password: password(p, "bob")}); err != nil {
		t.Fatal(err)
	}
	_, err := conf.DeviceAccessToken(c, da)
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.ErrorCode != "access_denied" {
		t.Fatalf("token after deny: %v", err)
	}
}

func TestUserCodeIsUsedOnce(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	conf, da, c := deviceFlow(t, p)
	creds := devidp.Credentials{User: "bob", Password: password(p, "bob")}
	if err := devidp.Approve(c, p.HTTPClient(), da.VerificationURI, da.UserCode, creds); err != nil {
		t.Fatal(err)
	}
	if err := devidp.Approve(c, p.HTTPClient(), da.VerificationURI, da.UserCode, creds); err == nil {
		t.Error("a user code was approved twice")
	}
	if _, err := conf.DeviceAccessToken(c, da); err != nil {
		t.Fatal(err)
	}
	if _, err := conf.DeviceAccessToken(c, da); err == nil {
		t.Error("a device code was redeemed twice")
	}
}

func TestExpiredDeviceCode(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{DeviceCodeLifetime: time.Second})
	conf, da, c := deviceFlow(t, p)
	time.Sleep(1100 * time.Millisecond)
	if err := devidp.Approve(c, p.HTTPClient(), da.VerificationURI, da.UserCode,
		devidp.Credentials{User: "bob", Password: password(p, "bob")}); err == nil {
		t.Error("an expired user code was approved")
	}
	_, err := conf.DeviceAccessToken(c, da)
	if err == nil {
		t.Fatal("token for an expired device code")
	}
}

// The provider serves on loopback, or a private address when told to:
// never a public one.
func TestTheProviderServesOnlyOnLoopbackOrAPrivateAddressWhenTold(t *testing.T) {
	for _, c := range []struct {
		cfg  devidp.Config
		want string
	}{
		{devidp.Config{Addr: "10.231.0.1:0"}, "not a loopback address"},
		{devidp.Config{Addr: "8.8.8.8:0", Private: true}, "not a loopback address"},
		{devidp.Config{Addr: "localhost:0"}, "not a loopback address"},
	} {
		p, err := devidp.Start(c.cfg)
		if err == nil {
			p.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.cfg.Addr, err, c.want)
		}
	}
}
