package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/devidp"
	"github.com/lockplane/lockplane/services/operator/oidcauth"
)

// lockctl login as an operator runs it: the device flow against a real
// OpenID provider, approved in "a browser" (devidp's user agent) with a
// password and a one-time code; the cached token then authorises
// force-release commands at an arbiter that verifies it, and logout
// forgets it.
func TestLoginCachesATokenTheArbiterAccepts(t *testing.T) {
	idp, err := devidp.Start(devidp.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer idp.Close()
	ca := filepath.Join(t.TempDir(), "idp-ca.pem")
	os.WriteFile(ca, idp.CAPEM(), 0o644)
	env := devenvtest.Start(t, devenv.Options{Operators: admin.OIDCOperators(oidcauth.Config{Issuer: idp.Issuer(),
		ClientID: idp.ClientID(), Role: "lock-operator", RequireAMR: []string{"otp"}, CAPEM: idp.CAPEM()})})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cache := filepath.Join(t.TempDir(), "operator-token.json")

	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", cache, "force-release", "list")); err == nil || !strings.Contains(string(out), "run lockctl login") {
		t.Fatalf("force-release before login: %v: %s; want to be told to run lockctl login", err, out)
	}

	login := cmd(env, "--identity", "alice", "--id-token-file", cache, "login", "--issuer", idp.Issuer(), "--ca", ca, "-o", "json")
	login.Stderr = nil
	stderr, err := login.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stdout strings.Builder
	login.Stdout = &stdout
	if err := login.Start(); err != nil {
		t.Fatal(err)
	}
	defer login.Process.Kill()
	// "To sign in, open URL\nand enter the code: CODE"
	var uri, code string
	lines := bufio.NewScanner(stderr)
	for lines.Scan() && code == "" {
		if u, ok := strings.CutPrefix(lines.Text(), "To sign in, open "); ok {
			uri = u
		}
		if c, ok := strings.CutPrefix(lines.Text(), "and enter the code: "); ok {
			code = c
		}
	}
	go io.Copy(io.Discard, stderr)
	if uri == "" || code == "" {
		t.Fatalf("login printed no URL and code (uri %q code %q)", uri, code)
	}
	u, _ := idp.User("alice")
	otp, err := idp.OTP("alice")
	if err != nil {
		t.Fatal(err)
	}
	if err := devidp.Approve(ctx, idp.HTTPClient(), uri, code, devidp.Credentials{User: u.Name, Password: u.Password, OTP: otp}); err != nil {
		t.Fatal(err)
	}
	if err := login.Wait(); err != nil {
		t.Fatalf("login: %v", err)
	}
	var signedIn struct{ Subject, Cache string }
	if err := json.Unmarshal([]byte(stdout.String()), &signedIn); err != nil || signedIn.Subject == "" || signedIn.Cache != cache {
		t.Fatalf("login -o json: %q (%v)", stdout.String(), err)
	}
	if fi, err := os.Stat(cache); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token cache: %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", cache, "force-release", "list", "-o", "json")); err != nil {
		t.Fatalf("force-release list as the signed-in operator: %v: %s", err, out)
	}

	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", cache, "logout")); err != nil {
		t.Fatalf("logout: %v: %s", err, out)
	}
	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", cache, "force-release", "list")); err == nil || !strings.Contains(string(out), "run lockctl login") {
		t.Fatalf("force-release after logout: %v: %s", err, out)
	}
}
