package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/resourcetest"
	clientv3 "go.etcd.io/etcd/client/v3"
)

var lockctl string

// TestMain builds the real lockctl binary: these tests run it as a user does.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "lockctl-test-")
	if err != nil {
		panic(err)
	}
	lockctl = filepath.Join(dir, "lockctl")
	if out, err := exec.Command("go", "build", "-o", lockctl, ".").CombinedOutput(); err != nil {
		panic("build lockctl: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	resourcetest.StopPostgres()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

func cmd(env *devenv.Env, args ...string) *exec.Cmd {
	c := exec.Command(lockctl, append([]string{"--profile", env.ProfilePath}, args...)...)
	c.Stderr = os.Stderr
	return c
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestRunPassesTokenAndReleasesOnExit(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	out, err := cmd(env, "run", "team-a/orders/42", "--", "sh", "-c", `echo "$LOCKPLANE_KEY $LOCKPLANE_TOKEN"; exit 7`).Output()
	if exitCode(err) != 7 {
		t.Fatalf("exit %d (%v), want the command's 7", exitCode(err), err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] != "team-a/orders/42" {
		t.Fatalf("command saw %q", out)
	}
	v, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil || token.Token(v).Epoch() != 1 || token.Token(v).Revision() <= 0 {
		t.Fatalf("LOCKPLANE_TOKEN %q is not a token of epoch 1", f[1])
	}
	resp, err := env.Etcd.Get(context.Background(), lockkey.HoldKey("team-a/orders/42"), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("key still held after the command exited (count %d, err %v)", resp.Count, err)
	}
}

func TestRunTerminatesCommandWhenLockIsLostBeforeEtcdExpiry(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "team-a/orders/43"
	c := cmd(env, "run", "--class", devenvtest.Fast.Name, key, "--",
		"sh", "-c", `trap 'echo TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "started" {
		t.Fatalf("command did not start: %q", lines.Text())
	}
	expired := devenvtest.Released(t, ctx, env, key)
	env.StopArbiter() // keepalives now fail; the lease runs out at etcd
	cut := time.Now()
	if !lines.Scan() || lines.Text() != "TERM" {
		t.Fatalf("command did not get SIGTERM: %q", lines.Text())
	}
	termAt := time.Now()
	if code := exitCode(c.Wait()); code != 4 {
		t.Fatalf("lockctl exit %d, want 4 (lock lost)", code)
	}
	expireAt := <-expired
	if !termAt.Before(expireAt) {
		t.Fatalf("SIGTERM at +%s, lease expired at +%s", termAt.Sub(cut), expireAt.Sub(cut))
	}
	t.Logf("SIGTERM at +%s, etcd expiry at +%s", termAt.Sub(cut).Round(time.Millisecond), expireAt.Sub(cut).Round(time.Millisecond))
}

func TestAcquireContendedInspectAndStatusJSON(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	key := "team-a/orders/44"
	holder := cmd(env, "acquire", key, "-o", "json")
	stdout, _ := holder.StdoutPipe()
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Process.Kill()
	var acq struct {
		Key   string `json:"key"`
		Token struct {
			Value uint64 `json:"value"`
		} `json:"token"`
	}
	if err := json.NewDecoder(stdout).Decode(&acq); err != nil || acq.Key != key || acq.Token.Value == 0 {
		t.Fatalf("acquire -o json: %+v, %v", acq, err)
	}

	// Another identity, try once: refused with exit 3.
	err := cmd(env, "--identity", "other", "acquire", key).Run()
	if exitCode(err) != 3 {
		t.Fatalf("contended acquire exit %d, want 3", exitCode(err))
	}
	// And waiting a little: still refused, still 3.
	err = cmd(env, "--identity", "other", "acquire", key, "--wait", "1s").Run()
	if exitCode(err) != 3 {
		t.Fatalf("contended acquire --wait exit %d, want 3", exitCode(err))
	}

	out, err := cmd(env, "inspect", key, "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), strconv.FormatUint(acq.Token.Value, 10)) {
		t.Fatal("inspect printed the token")
	}
	var insp struct {
		Held   bool `json:"held"`
		Holder struct {
			Identity string `json:"identity"`
		} `json:"holder"`
	}
	if err := json.Unmarshal(out, &insp); err != nil || !insp.Held || insp.Holder.Identity != env.Profile.Identities["demo"].SPIFFEID {
		t.Fatalf("inspect: %s (%v)", out, err)
	}

	out, err = cmd(env, "status", "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Epoch   int    `json:"epoch"`
		Cluster string `json:"clusterId"`
		Sealed  bool   `json:"sealed"`
		Quorum  bool   `json:"quorum"`
		Members []any  `json:"members"`
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Epoch != 1 || st.Sealed || !st.Quorum || len(st.Members) != 3 {
		t.Fatalf("status: %s (%v)", out, err)
	}

	// Bad input names the field and the rule.
	out, _ = cmd(env, "inspect", "team-a/../x", "-o", "json").Output()
	if !strings.Contains(string(out), `"INVALID_KEY"`) || !strings.Contains(string(out), `"no-dot-segment"`) {
		t.Fatalf("bad key: %s", out)
	}
}

// inspect names the holder's process (its instance), in text and JSON: a
// user tells a replica's hold from a leak of their own by it.
func TestInspectPrintsTheHoldersInstance(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := "team-a/orders/46"
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	if _, err := s.TryLock(ctx, key, func(*lockclient.Hold) {}); err != nil {
		t.Fatal(err)
	}
	if s.Instance() == "" {
		t.Fatal("the client drew no instance")
	}
	out, err := cmd(env, "inspect", key).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^\s*instance\s+` + regexp.QuoteMeta(s.Instance()) + `$`).Match(out) {
		t.Fatalf("inspect does not name the holder's instance %s:\n%s", s.Instance(), out)
	}
	out, err = cmd(env, "inspect", key, "-o", "json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var insp struct {
		Holder struct {
			Instance string `json:"instance"`
		} `json:"holder"`
	}
	if err := json.Unmarshal(out, &insp); err != nil || insp.Holder.Instance != s.Instance() {
		t.Fatalf("inspect -o json: %s (%v), want holder instance %s", out, err, s.Instance())
	}
}

func TestPausetestAgainstPostgresWritesAResult(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	_, url := resourcetest.StartPostgres(t).Database(t)
	out := filepath.Join(t.TempDir(), "result.yaml")
	c := cmd(env, "pausetest", "--kind", "postgres", "--target", url, "--class", devenvtest.Fast.Name,
		"--schema-version", "orders-v7", "--out", out, "-o", "json")
	stdout, err := c.Output()
	if err != nil {
		t.Fatalf("pausetest: %v", err)
	}
	var res struct {
		Kind   string `json:"kind"`
		Status struct {
			Outcome string `json:"outcome"`
			Cases   []struct {
				Name string `json:"name"`
			} `json:"cases"`
		} `json:"status"`
	}
	if err := json.Unmarshal(stdout, &res); err != nil || res.Kind != "PauseTestResult" || res.Status.Outcome != "Passed" || len(res.Status.Cases) < 3 {
		t.Fatalf("result %s (%v)", stdout, err)
	}
	doc, err := os.ReadFile(out)
	if err != nil || !strings.Contains(string(doc), "kind: PauseTestResult") || !strings.Contains(string(doc), "schemaVersion: orders-v7") {
		t.Fatalf("--out document:\n%s (%v)", doc, err)
	}
	if strings.Contains(string(doc)+string(stdout), "postgres@") {
		t.Fatal("the result carries the target's user part")
	}
}

// policy check is what a class repository's CI runs: exit 0 on the
// shipped set, exit 1 with every problem located on a broken one, and
// JSON for machines.
func TestPolicyCheckCostAndRegister(t *testing.T) {
	out, err := exec.Command(lockctl, "policy", "check", "../../../policies", "-o", "json").Output()
	var ok struct {
		Valid   bool     `json:"valid"`
		Classes int      `json:"classes"`
		Homed   int      `json:"namespaces_homed"`
		Owned   int      `json:"namespaces_owned"`
		Unowned []string `json:"unowned"`
	}
	if err != nil || json.Unmarshal(out, &ok) != nil || !ok.Valid || ok.Classes != 3 || ok.Homed != 2 || ok.Owned != 1 || !slices.Equal(ok.Unowned, []string{"search"}) {
		t.Fatalf("check of the shipped set: %v %s", err, out)
	}
	// A namespace without an owner is a warning, not a refusal.
	cmd := exec.Command(lockctl, "policy", "check", "../../../policies")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || !strings.Contains(stderr.String(), "warning: no LockNamespace names an owner for search") {
		t.Fatalf("check of the shipped set: %v, stderr %q", err, stderr.String())
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "c.yaml"), []byte("apiVersion: lockplane.io/v1\nkind: LockClass\nmetadata: {name: x}\n"+
		"spec: {namespace: a, purpose: efficiency, enforcement: advisory, ttl: 10s, tier: coord}\n"), 0o644)
	out, err = exec.Command(lockctl, "policy", "check", dir, "-o", "json").Output()
	var bad struct {
		Valid    bool `json:"valid"`
		Problems []struct {
			Field, Rule string
		} `json:"problems"`
	}
	if exitCode(err) != 1 || json.Unmarshal(out, &bad) != nil || bad.Valid || len(bad.Problems) != 1 || bad.Problems[0].Field != "spec.ttl" {
		t.Fatalf("check of a broken set: exit %d, %s", exitCode(err), out)
	}
	// A key reachable through two tiers: the ledger's prefix also claimed
	// by a coord class. Both documents and lines are named.
	twoTiers := t.TempDir()
	os.WriteFile(filepath.Join(twoTiers, "c.yaml"), []byte("apiVersion: lockplane.io/v1\nkind: LockClass\nmetadata: {name: ledger}\n"+
		"spec: {namespace: a, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: entity, prefixes: [a/ledger/]}\n---\n"+
		"apiVersion: lockplane.io/v1\nkind: LockClass\nmetadata: {name: close}\n"+
		"spec: {namespace: a, purpose: efficiency, enforcement: advisory, ttl: 30s, tier: coord, prefixes: [a/ledger/]}\n"), 0o644)
	out, err = exec.Command(lockctl, "policy", "check", twoTiers).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "line 4, document 1 (LockClass ledger): spec.prefixes[0]: a/ledger/ is also served by class close") ||
		!strings.Contains(string(out), "c.yaml, line 9)") {
		t.Fatalf("check of a set with a key on two tiers: exit %d, %s", exitCode(err), out)
	}
	// A change that moves held keys to another tier, against the set it
	// replaces: refused as a rehome.
	// In a folder named after the namespace, as its LockNamespace, which
	// names an owner, must be.
	moved := filepath.Join(t.TempDir(), "payments")
	os.MkdirAll(moved, 0o755)
	os.WriteFile(filepath.Join(moved, "c.yaml"), []byte(strings.Replace(string(must(os.ReadFile(filepath.Join("../../../policies", "payments", "classes.yaml")))),
		"tier: entity", "tier: coord", 1)), 0o644)
	for _, f := range []string{"grants.yaml", "namespace.yaml", "pausetest-ledger.yaml"} {
		os.WriteFile(filepath.Join(moved, f), must(os.ReadFile(filepath.Join("../../../policies", "payments", f))), 0o644)
	}
	out, err = exec.Command(lockctl, "policy", "check", moved, "--previous", "../../../policies/payments").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "keys under payments/ledger/ would move to another tier") {
		t.Fatalf("check of a rehome against --previous: exit %d, %s", exitCode(err), out)
	}

	out, err = exec.Command(lockctl, "policy", "cost", "../../../policies", "--sessions", "3000", "-o", "json").Output()
	var costs []struct {
		Class      string  `json:"class"`
		Keepalives float64 `json:"keepalives_per_second"`
		Writes     int     `json:"consensus_writes_per_waiter"`
	}
	if err != nil || json.Unmarshal(out, &costs) != nil || len(costs) != 3 {
		t.Fatalf("cost: %v %s", err, out)
	}
	for _, c := range costs {
		// 3000 sessions renewing every TTL/3: ledger 10 s -> 900/s and two
		// writes per durable waiter.
		if c.Class == "payments-ledger" && (c.Keepalives != 900 || c.Writes != 2) {
			t.Fatalf("payments-ledger cost: %+v", c)
		}
	}

	out, err = exec.Command(lockctl, "policy", "register", "../../../policies", "-o", "json").Output()
	var reg []struct {
		Class   string `json:"class"`
		Expired bool   `json:"expired"`
	}
	if err != nil || json.Unmarshal(out, &reg) != nil || len(reg) != 1 || reg[0].Class != "payments-settlement-leader" {
		t.Fatalf("register: %v %s", err, out)
	}
}

func TestShardsShowAndAddWithProgress(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{Shards: []string{"a", "b", "c"}, InitialShards: []string{"a", "b"}})
	out, err := cmd(env, "shards").Output()
	if err != nil || !strings.Contains(string(out), "shards      a, b") || !strings.Contains(string(out), "not in map  c") {
		t.Fatalf("lockctl shards: %v\n%s", err, out)
	}
	// Not an operator: refused, nothing changes.
	if err := cmd(env, "shards", "add", "c").Run(); exitCode(err) != 1 {
		t.Fatalf("a workload added a shard: exit %d", exitCode(err))
	}
	out, err = cmd(env, "--identity", "alice", "shards", "add", "c", "--reason", "more room", "-o", "json").Output()
	if err != nil {
		t.Fatalf("shards add: %v\n%s", err, out)
	}
	var phases []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var step struct{ Phase, Detail string }
		if err := json.Unmarshal([]byte(line), &step); err != nil {
			t.Fatalf("a progress line is not JSON: %q", line)
		}
		phases = append(phases, step.Phase)
	}
	if want := []string{"adding", "fenced", "drained", "drained", "advanced", "stored", "stamped"}; !slices.Equal(phases, want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	out, err = cmd(env, "shards", "-o", "json").Output()
	var m struct {
		Version string
		Shards  []string
	}
	if json.Unmarshal(out, &m); err != nil || m.Version != "3" || !slices.Equal(m.Shards, []string{"a", "b", "c"}) {
		t.Fatalf("after the add: %s (err %v)", out, err)
	}
	// The added shard's own status: an epoch allocated above every other (coord 1, a 2, b 3), on the new map.
	out, err = cmd(env, "status", "--cluster", "c").Output()
	if err != nil || !strings.Contains(string(out), "cluster   c (serving shard map version 3)") || !strings.Contains(string(out), "epoch     4 (highest allocated in the region: 4)") {
		t.Fatalf("status --cluster c: %v\n%s", err, out)
	}
}

// With nothing listening at the profile's address, lockctl names the
// address, the profile it came from, and what starts an arbiter.
func TestNothingListeningSaysWhereAndWhatToRun(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := lis.Addr().String()
	lis.Close()
	p := *env.Profile
	p.Endpoint = closed
	path := filepath.Join(filepath.Dir(env.ProfilePath), "stopped.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	c := exec.Command(lockctl, "--profile", path, "status")
	var stderr strings.Builder
	c.Stderr = &stderr
	err = c.Run()
	msg := stderr.String()
	if exitCode(err) != 1 || !strings.Contains(msg, "no arbiter is listening at "+closed+" (from profile "+path+")") || !strings.Contains(msg, "make dev") {
		t.Fatalf("status with nothing listening: exit %d, stderr %q", exitCode(err), msg)
	}
}

// Two `lockctl run` processes of one identity on one key: the second waits
// its turn and runs after the first, as with etcdctl lock; with --wait 0 it
// is not acquired (exit 3), not an error.
func TestTwoRunsOfOneIdentityTakeTurns(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	const key = "team-a/orders/turns"
	first := cmd(env, "run", key, "--", "sh", "-c", "echo held; read done")
	in, err := first.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("first run: %q, %v", line, err)
	}
	if err := cmd(env, "run", "--wait", "0s", key, "--", "true").Run(); exitCode(err) != 3 {
		t.Fatalf("a second run with --wait 0 while the first holds: exit %d (%v), want 3 (not acquired)", exitCode(err), err)
	}
	second := cmd(env, "run", "--wait", "30s", key, "--", "sh", "-c", "echo second")
	second.Stderr = nil
	stderr, err := second.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var secondOut []byte
	var secondErr error
	go func() { secondOut, secondErr = second.Output(); close(done) }()
	// The second finds the key held by the first and says it waits.
	if line, err := bufio.NewReader(stderr).ReadString('\n'); err != nil || !strings.Contains(line, key+" is held by "+env.Profile.Identities[env.Profile.DefaultIdentity].SPIFFEID) || !strings.Contains(line, "waiting up to 30s") {
		t.Fatalf("second run's stderr: %q, %v; want it to say who holds the key and that it waits", line, err)
	}
	// The first command ends, and with it the first hold.
	if _, err := in.Write([]byte("done\n")); err != nil {
		t.Fatal(err)
	}
	in.Close()
	if err := first.Wait(); err != nil {
		t.Fatalf("first run: %v", err)
	}
	<-done
	if secondErr != nil || string(secondOut) != "second\n" {
		t.Fatalf("second run of the same identity: %q, %v; want it to wait its turn and exit 0", secondOut, secondErr)
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
