package main_test

import (
	"strings"
	"testing"

	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
)

// Where the arbiter verifies operators' sign-in, lockctl shards add
// records a request (the one-person add is refused, and nothing moves);
// the requester cannot approve it, another operator's approval adds the
// shard and prints the new map.
func TestShardsAddIsTwoPersonWithSignIn(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Operators: fileOperators{}, Shards: []string{"a", "b"}, InitialShards: []string{"a"}})
	alice, bob := tokenFile(t, "alice"), tokenFile(t, "bob")
	out, err := cmd(env, "--identity", "alice", "--id-token-file", alice, "shards", "add", "b", "--reason", "more room").Output()
	if err != nil {
		t.Fatalf("shards add: %v\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	id := strings.TrimPrefix(first, "request ")
	if len(id) != 20 || !strings.Contains(string(out), "add shard") || !strings.Contains(string(out), "lockctl shards approve "+id) {
		t.Fatalf("shards add printed:\n%s", out)
	}
	if out, err := cmd(env, "shards").Output(); err != nil || !strings.Contains(string(out), "shards      a\n") {
		t.Fatalf("the map after a request alone: %v\n%s", err, out)
	}
	if out, err := combined(cmd(env, "--identity", "alice", "--id-token-file", alice, "shards", "approve", id)); err == nil || !strings.Contains(string(out), "different operator") {
		t.Fatalf("the requester approved their own shard add: %v %s", err, out)
	}
	out, err = cmd(env, "--identity", "bob", "--id-token-file", bob, "shards", "approve", id).Output()
	if err != nil || !strings.Contains(string(out), "shard map version 3 over a, b") {
		t.Fatalf("approve: %v\n%s", err, out)
	}
	if out, err := cmd(env, "--identity", "bob", "--id-token-file", bob, "shards", "show", id).Output(); err != nil ||
		!strings.Contains(string(out), "approved by bob") || !strings.Contains(string(out), "version 3 over a, b") {
		t.Fatalf("show: %v\n%s", err, out)
	}
}
