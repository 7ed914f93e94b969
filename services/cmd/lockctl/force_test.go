package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/operator/login"
)

// fileOperators stands in for the OpenID Connect verifier: the ID token is
// the operator's name, as the token file holds it. The integration test
// against the real provider comes with its wiring (services/operator).
type fileOperators struct{}

func (fileOperators) Verify(_ context.Context, raw string) (admin.Operator, error) {
	switch raw {
	case "alice", "bob":
		return admin.Operator{Issuer: "https://idp.test", Subject: "u-" + raw, Name: raw}, nil
	}
	return admin.Operator{}, errors.New("unknown token")
}

// tokenFile writes who's cached ID token as lockctl login does (the
// fake verifier above takes the name for the token).
func tokenFile(t *testing.T, who string) string {
	p := filepath.Join(t.TempDir(), "operator-token.json")
	b, _ := json.Marshal(login.Token{Issuer: "https://idp.test", ClientID: "lockctl", Subject: "u-" + who, IDToken: who,
		Expiry: time.Now().Add(time.Hour)})
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// A leaked hold of lockctl run, force-released by two operators: the
// request prints its ID and the facts first, approval by the requester is
// refused, approval by another ends the hold, and run sends its command
// SIGTERM and exits 4.
func TestForceReleaseEndsARunWithSIGTERM(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: fileOperators{}})
	alice, bob := tokenFile(t, "alice"), tokenFile(t, "bob")
	key := "team-a/orders/leaked"
	run := cmd(env, "run", "--class", devenvtest.Fast.Name, key, "--", "sh", "-c", `trap 'echo TERM; exit 0' TERM; echo started; while :; do sleep 0.1; done`)
	stdout, _ := run.StdoutPipe()
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	defer run.Process.Kill()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "started" {
		t.Fatalf("command did not start: %q", lines.Text())
	}

	// Not signed in: says what to do.
	out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", filepath.Join(t.TempDir(), "none"), "force-release", "list"))
	if err == nil || !strings.Contains(string(out), "run lockctl login") {
		t.Fatalf("without a token: %v %s", err, out)
	}

	// The request: its ID, then the facts before who asked.
	out, err = cmd(env, "--identity", "alice", "--id-token-file", alice, "force-release", "request", key, "--reason", "stuck job").Output()
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	text := string(out)
	first, _, _ := strings.Cut(text, "\n")
	id := strings.TrimPrefix(first, "request ")
	if len(id) != 20 {
		t.Fatalf("request printed %q first, want its ID", first)
	}
	for _, want := range []string{"key", key, "holder", "/demo", "class", "fast", "enforcement", "WARNING", "both write at once"} {
		if !strings.Contains(text, want) {
			t.Fatalf("request output lacks %q:\n%s", want, text)
		}
	}
	if strings.Index(text, "enforcement") > strings.Index(text, "requested by") {
		t.Fatalf("the facts do not come first:\n%s", text)
	}

	out, err = cmd(env, "--identity", "bob", "--id-token-file", bob, "force-release", "show", id, "-o", "json").Output()
	var shown struct {
		Action struct {
			State string `json:"state"`
			Hold  struct {
				Key string `json:"key"`
			} `json:"hold"`
		} `json:"action"`
	}
	if err != nil || json.Unmarshal(out, &shown) != nil || shown.Action.State != "pending" || shown.Action.Hold.Key != key {
		t.Fatalf("show -o json: %s (%v)", out, err)
	}
	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", alice, "force-release", "approve", id)); err == nil || !strings.Contains(string(out), "different operator") {
		t.Fatalf("the requester approved their own request: %v %s", err, out)
	}
	out, err = cmd(env, "--identity", "bob", "--id-token-file", bob, "force-release", "approve", id).Output()
	if err != nil || !strings.Contains(string(out), "released "+key) || !strings.Contains(string(out), "enforcement") {
		t.Fatalf("approve: %v\n%s", err, out)
	}

	// The holder hears at its next keepalive: SIGTERM, exit 4.
	if !lines.Scan() || lines.Text() != "TERM" {
		t.Fatalf("command did not get SIGTERM: %q", lines.Text())
	}
	done := make(chan error, 1)
	go func() { done <- run.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 4 {
			t.Fatalf("lockctl run exit %d, want 4 (lock lost)", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("lockctl run did not exit")
	}

	out, err = cmd(env, "--identity", "bob", "--id-token-file", bob, "force-release", "list", "-o", "json").Output()
	var list struct {
		Actions []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"actions"`
	}
	if err != nil || json.Unmarshal(out, &list) != nil || len(list.Actions) != 1 || list.Actions[0].State != "approved" {
		t.Fatalf("list -o json: %s (%v)", out, err)
	}
}

// combined runs c for its stdout and stderr together.
func combined(c *exec.Cmd) ([]byte, error) {
	c.Stderr = nil
	return c.CombinedOutput()
}
