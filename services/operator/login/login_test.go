package login

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
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

// approver returns a Prompt that plays the operator at the browser: it
// signs in with user's password and (if withOTP) current TOTP code.
func approver(t *testing.T, p *devidp.Provider, user string, withOTP, deny bool) (func(Prompt), <-chan error) {
	done := make(chan error, 1)
	return func(pr Prompt) {
		go func() {
			u, _ := p.User(user)
			c := devidp.Credentials{User: user, Password: u.Password}
			if withOTP {
				c.OTP, _ = p.OTP(user)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			decide := devidp.Approve
			if deny {
				decide = devidp.Deny
			}
			done <- decide(ctx, p.HTTPClient(), pr.VerificationURI, pr.UserCode, c)
		}()
	}, done
}

func loginConfig(p *devidp.Provider, path string, prompt func(Prompt)) Config {
	return Config{Issuer: p.Issuer(), ClientID: p.ClientID(), CAPEM: p.CAPEM(), CachePath: path, Prompt: prompt}
}

func TestLoginCachesAVerifiableToken(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	path := filepath.Join(t.TempDir(), "new-dir", "token.json")
	prompt, approved := approver(t, p, "alice", true, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := Login(ctx, loginConfig(p, path, prompt))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-approved; err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("cache file: %v %v", fi.Mode(), err)
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("cache dir mode %v", di.Mode())
	}
	cached, err := Cached(path)
	if err != nil {
		t.Fatal(err)
	}
	if cached.IDToken != tok.IDToken || !cached.Expiry.Equal(tok.Expiry) || cached.Subject != "user-alice" ||
		cached.Issuer != p.Issuer() || cached.ClientID != p.ClientID() {
		t.Fatalf("cached token (sub %q iss %q exp %v) is not the one logged in (exp %v)",
			cached.Subject, cached.Issuer, cached.Expiry, tok.Expiry)
	}
	// What the Admin API will do with it.
	v, err := oidcauth.New(ctx, oidcauth.Config{Issuer: p.Issuer(), ClientID: p.ClientID(), CAPEM: p.CAPEM(),
		Role: "lock-operator", RequireAMR: []string{"otp"}})
	if err != nil {
		t.Fatal(err)
	}
	if op, err := v.Verify(ctx, cached.IDToken); err != nil || op.Subject != "user-alice" {
		t.Fatalf("verify cached token: %+v %v", op, err)
	}
	if err := Logout(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Cached(path); !errors.Is(err, ErrNoToken) || !strings.Contains(err.Error(), "run lockctl login") {
		t.Errorf("after logout: %v", err)
	}
}

func TestCachedTokenExpires(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{IDTokenLifetime: 2 * time.Second})
	path := filepath.Join(t.TempDir(), "token.json")
	prompt, _ := approver(t, p, "bob", true, false)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tok, err := Login(ctx, loginConfig(p, path, prompt))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cachedAt(path, tok.Expiry.Add(-time.Second)); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	_, err = cachedAt(path, tok.Expiry)
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), "expired: run lockctl login") {
		t.Fatalf("at expiry: %v", err)
	}
}

func TestLoginDenied(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	path := filepath.Join(t.TempDir(), "token.json")
	prompt, _ := approver(t, p, "bob", false, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := Login(ctx, loginConfig(p, path, prompt)); !errors.Is(err, ErrDenied) {
		t.Fatalf("denied login: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a denied login left a cache file: %v", err)
	}
}

func TestLoginRefusesUntrustedIssuer(t *testing.T) {
	t.Parallel()
	p := start(t, devidp.Config{})
	other := start(t, devidp.Config{})
	cfg := loginConfig(p, filepath.Join(t.TempDir(), "t.json"), func(Prompt) { t.Error("prompted") })
	cfg.CAPEM = other.CAPEM() // the wrong CA
	if _, err := Login(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("login with the wrong CA: %v", err)
	}
}

func TestDefaultPromptShowsURIAndCode(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	printPrompt(&out, Prompt{VerificationURI: "https://idp/device", UserCode: "BCDF-GHJK",
		VerificationURIComplete: "https://idp/device?user_code=BCDF-GHJK", Expiry: time.Now().Add(time.Minute)})
	for _, want := range []string{"https://idp/device\n", "BCDF-GHJK", "user_code=BCDF-GHJK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("prompt %q lacks %q", out.String(), want)
		}
	}
}

func TestCachedRefusesBadFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open.json")
	good := Token{Issuer: "https://idp", IDToken: "x.y.z", Expiry: time.Now().Add(time.Hour)}
	if err := store(open, good); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Cached(open); err == nil || !strings.Contains(err.Error(), "by others") {
		t.Errorf("world-readable cache: %v", err)
	}
	junk := filepath.Join(dir, "junk.json")
	if err := os.WriteFile(junk, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Cached(junk); err == nil || !strings.Contains(err.Error(), "not a token cache file") {
		t.Errorf("junk cache: %v", err)
	}
}

// The device code and the ID token never cross a plain connection.
func TestLoginRefusesAnHTTPIssuer(t *testing.T) {
	_, err := Login(context.Background(), Config{Issuer: "http://idp.test/realms/x", ClientID: "lockctl", CachePath: filepath.Join(t.TempDir(), "t")})
	if err == nil || !strings.Contains(err.Error(), "must be an https URL") {
		t.Fatalf("login at an http issuer: %v", err)
	}
}
