package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/runner"
	"github.com/lockplane/lockplane/test/gate/traffic"
)

var bins string

// TestMain builds etcd and the arbiter, and doubles as the client process.
func TestMain(m *testing.M) {
	if v := os.Getenv(runner.ClientEnv); v != "" {
		var cfg traffic.Config
		if err := json.Unmarshal([]byte(v), &cfg); err != nil {
			os.Exit(2)
		}
		if err := traffic.Run(context.Background(), cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "gate-bins-")
	if err != nil {
		panic(err)
	}
	bins = dir
	for _, pkg := range []string{"etcd", "arbiter"} {
		if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "github.com/lockplane/lockplane/services/cmd/"+pkg).CombinedOutput(); err != nil {
			panic(fmt.Sprintf("build %s: %v\n%s", pkg, err, out))
		}
	}
	code := m.Run()
	resourcetest.StopPostgres()
	os.RemoveAll(dir)
	os.Exit(code)
}

func history(t *testing.T, f runner.Fault, seed uint64, unsafe bool) *runner.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := runner.Run(ctx, runner.Config{
		Etcd: filepath.Join(bins, "etcd"), Arbiter: filepath.Join(bins, "arbiter"), Client: []string{os.Args[0], "-test.run=^$"},
		Dir: t.TempDir(), Postgres: resourcetest.StartPostgres(t), Fault: f, Seed: seed,
		Clients: 4, Keys: 2, Duration: 8 * time.Second, Unsafe: unsafe,
	})
	if err != nil {
		t.Fatalf("history could not run: %v", err)
	}
	return out
}

func TestFencedClientsUnderAHolderPausePass(t *testing.T) {
	out := history(t, runner.HolderStop, 11, false)
	if !out.Report.OK() {
		t.Fatalf("violations: %+v", out.Report.Violations)
	}
	if out.Report.Grants == 0 {
		t.Fatal("no grants: the history proves nothing")
	}
}

// The negative control: the same harness with clients that write without
// the fence (a lease with no token, Redlock-style) must be caught.
func TestUnfencedClientsAreCaught(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		out := history(t, runner.HolderStop, seed, true)
		if !out.Report.OK() {
			t.Logf("caught on seed %d: %+v", seed, out.Report.Violations[0])
			return
		}
	}
	t.Fatal("three histories of unfenced writes under a holder pause passed every check")
}
