package devidp

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Credentials are what a person types into the sign-in form. An empty OTP
// signs in with the password alone (amr ["pwd"]).
type Credentials struct {
	User, Password, OTP string
}

// Approve is a programmatic user agent: it opens verificationURI with
// userCode, as a browser following verification_uri_complete would, then
// submits the sign-in form allowing the device. It talks to the provider
// over HTTP like a person's browser does, so the device flow a test runs is
// the real protocol. The error carries the form's message (wrong password,
// wrong one-time code, unknown code).
func Approve(ctx context.Context, hc *http.Client, verificationURI, userCode string, c Credentials) error {
	return decide(ctx, hc, verificationURI, userCode, c, "allow")
}

// Deny is Approve's opposite: the user signs in and denies the device.
func Deny(ctx context.Context, hc *http.Client, verificationURI, userCode string, c Credentials) error {
	return decide(ctx, hc, verificationURI, userCode, c, "deny")
}

var errorPara = regexp.MustCompile(`id="error">([^<]*)<`)

func decide(ctx context.Context, hc *http.Client, verificationURI, userCode string, c Credentials, action string) error {
	u, err := url.Parse(verificationURI)
	if err != nil {
		return fmt.Errorf("devidp: verification URI: %w", err)
	}
	q := u.Query()
	q.Set("user_code", userCode)
	u.RawQuery = q.Encode()
	if _, err := send(ctx, hc, http.MethodGet, u.String(), nil); err != nil {
		return err
	}
	u.RawQuery = ""
	form := url.Values{"user_code": {userCode}, "username": {c.User}, "password": {c.Password},
		"otp": {c.OTP}, "action": {action}}
	_, err = send(ctx, hc, http.MethodPost, u.String(), form)
	return err
}

func send(ctx context.Context, hc *http.Client, method, target string, form url.Values) (string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("devidp: %s sign-in form: %w", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		msg := resp.Status
		if m := errorPara.FindSubmatch(b); m != nil {
			msg = html.UnescapeString(string(m[1]))
		}
		return "", fmt.Errorf("devidp: sign-in form refused (%d): %s", resp.StatusCode, msg)
	}
	return string(b), nil
}

// SignIn runs the whole device authorization flow as lockctl would with a
// person at the browser: discovery, the device authorization request, the
// sign-in form (Approve) and polling the token endpoint. It returns the
// tokens; the ID token is IDToken(tok). scopes default to openid, profile
// and email.
func (p *Provider) SignIn(ctx context.Context, c Credentials, scopes ...string) (*oauth2.Token, error) {
	hc := p.HTTPClient()
	ctx = oidc.ClientContext(ctx, hc)
	disc, err := oidc.NewProvider(ctx, p.issuer)
	if err != nil {
		return nil, fmt.Errorf("devidp: discovery: %w", err)
	}
	if len(scopes) == 0 {
		scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	ep := disc.Endpoint()
	ep.AuthStyle = oauth2.AuthStyleInParams
	conf := &oauth2.Config{ClientID: p.cfg.ClientID, Endpoint: ep, Scopes: scopes}
	da, err := conf.DeviceAuth(ctx)
	if err != nil {
		return nil, fmt.Errorf("devidp: device authorization: %w", err)
	}
	if err := Approve(ctx, hc, da.VerificationURI, da.UserCode, c); err != nil {
		return nil, err
	}
	tok, err := conf.DeviceAccessToken(ctx, da)
	if err != nil {
		return nil, fmt.Errorf("devidp: token: %w", err)
	}
	return tok, nil
}

// SignInIDToken is SignIn returning the raw ID token alone.
func (p *Provider) SignInIDToken(ctx context.Context, c Credentials) (string, error) {
	tok, err := p.SignIn(ctx, c)
	if err != nil {
		return "", err
	}
	return IDToken(tok)
}

// SignInWithOTP signs user in with the password and the current TOTP code:
// the token an operator with a second factor holds.
func (p *Provider) SignInWithOTP(ctx context.Context, user string) (string, error) {
	u, ok := p.User(user)
	if !ok {
		return "", fmt.Errorf("devidp: no user %q", user)
	}
	code, err := p.OTP(user)
	if err != nil {
		return "", err
	}
	return p.SignInIDToken(ctx, Credentials{User: user, Password: u.Password, OTP: code})
}

// IDToken returns the id_token of a token response.
func IDToken(tok *oauth2.Token) (string, error) {
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", errors.New("devidp: the token response has no id_token")
	}
	return raw, nil
}
