package runner_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	// The group commit's negative control (TestABatchThatDropsACompareIsCaught).
	if out, err := exec.Command("go", "build", "-tags", "lockplane_broken_batch", "-o", filepath.Join(dir, "arbiter-broken-batch"),
		"github.com/lockplane/lockplane/services/cmd/arbiter").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("build the broken-batch arbiter: %v\n%s", err, out))
	}
	code := m.Run()
	resourcetest.StopPostgres()
	os.RemoveAll(dir)
	os.Exit(code)
}

// history runs one history; tweak, if given, changes its config.
func history(t *testing.T, f runner.Fault, seed uint64, tweak func(*runner.Config)) *runner.Outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := runner.Config{
		Etcd: filepath.Join(bins, "etcd"), Arbiter: filepath.Join(bins, "arbiter"), Client: []string{os.Args[0], "-test.run=^$"},
		Dir: t.TempDir(), Postgres: resourcetest.StartPostgres(t), Fault: f, Seed: seed,
		Clients: 4, Keys: 2, Duration: 8 * time.Second,
	}
	if tweak != nil {
		tweak(&cfg)
	}
	out, err := runner.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("history could not run: %v", err)
	}
	return out
}

func TestFencedClientsUnderAHolderPausePass(t *testing.T) {
	out := history(t, runner.HolderStop, 11, nil)
	if !out.Report.OK() {
		t.Fatalf("violations: %+v", out.Report.Violations)
	}
	if out.Report.Grants == 0 {
		t.Fatal("no grants: the history proves nothing")
	}
}

// A negative control: the same harness with clients that write without
// the fence (a lease with no token, Redlock-style) must be caught.
//
// Whether a history exposes the unfenced write depends on where the pause
// lands (the frozen holder must be between its check and its write), so
// the control runs until one history catches it. On a quiet machine the
// first does; under CI's load three once all missed. With eight, a miss
// of every one means the checks are broken, not the timing.
func TestUnfencedClientsAreCaught(t *testing.T) {
	const seeds = 8
	for seed := uint64(1); seed <= seeds; seed++ {
		out := history(t, runner.HolderStop, seed, func(c *runner.Config) { c.Unsafe = true })
		if !out.Report.OK() {
			t.Logf("caught on seed %d: %+v", seed, out.Report.Violations[0])
			return
		}
		t.Logf("seed %d: %d grants, no violation (the pause missed the holder's work)", seed, out.Report.Grants)
	}
	t.Fatalf("%d histories of unfenced writes under a holder pause passed every check", seeds)
}

// The other negative control: an unsafe locker in the same harness, the
// etcd recipe that takes a key with a blind Put when a watch reports it
// deleted, with fenced writes. The fence keeps the record consistent, so
// what must catch it is the check of the lock itself: two holders' work
// windows overlapping.
func TestWatchGrantLockerIsCaught(t *testing.T) {
	out := history(t, runner.MemberKill, 1, func(c *runner.Config) { c.Locker = traffic.LockerWatchGrant })
	if out.Report.Grants == 0 {
		t.Fatal("no grants: the history proves nothing")
	}
	for _, v := range out.Report.Violations {
		if v.Check == "no-overlap" {
			t.Logf("caught (%d violations), e.g. %+v", len(out.Report.Violations), v)
			return
		}
	}
	t.Fatalf("a locker that grants on a watch event passed the overlap check; violations: %+v", out.Report.Violations)
}

func TestParseFaults(t *testing.T) {
	all, err := runner.ParseFaults("")
	if err != nil || len(all) != len(runner.Faults) {
		t.Fatalf("empty list: %v, %v", all, err)
	}
	two, err := runner.ParseFaults("leader-kill, holder-stop,leader-kill")
	if err != nil || len(two) != 2 || two[0] != runner.LeaderKill || two[1] != runner.HolderStop {
		t.Fatalf("two kinds: %v, %v", two, err)
	}
	if _, err := runner.ParseFaults("leader-kil"); err == nil || !strings.Contains(err.Error(), `"leader-kil" is not a fault kind`) {
		t.Fatalf("a misspelt kind: %v", err)
	}
}

// The force-release fault: two operators signed in at a real OpenID
// provider end a hold its client still uses. The history passes: the
// holder is told, the next holder's overlap with it is excused as the
// force-release's, and the fence refuses the deposed holder's late write.
func TestForceReleaseHistoryPasses(t *testing.T) {
	out := history(t, runner.ForceRelease, 1, func(c *runner.Config) { c.Duration = runner.ForceLinger })
	if !out.Report.OK() {
		t.Fatalf("violations: %+v", out.Report.Violations)
	}
	made, refused := runner.LateWrites(out.Ops)
	if made == 0 || refused != made {
		t.Fatalf("the deposed holder's late writes: %d made, %d refused by the fence", made, refused)
	}
	t.Logf("%d grants, %d forced overlap(s) excused, %d late write(s) refused", out.Report.Grants, out.Report.Forced, refused)
}

// The force-release fault's negative controls, each of which must fail
// it: a fenced resource that does not check tokens (the deposed holder's
// late write lands below the record's mark: Porcupine), and a holder
// that is not told its hold ended (it goes on starting work: force-untold).
func TestForceReleaseNegativeControlsAreCaught(t *testing.T) {
	for _, c := range []struct {
		name, check string
		tweak       func(*runner.Config)
	}{
		{"the resource does not check tokens", "linearizable", func(c *runner.Config) { c.Unsafe = true }},
		{"the holder is not told", "force-untold", func(c *runner.Config) { c.Deaf = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := history(t, runner.ForceRelease, 1, func(cfg *runner.Config) { cfg.Duration = runner.ForceLinger; c.tweak(cfg) })
			for _, v := range out.Report.Violations {
				if v.Check == c.check {
					t.Logf("caught (%d violations), e.g. %+v", len(out.Report.Violations), v)
					return
				}
			}
			t.Fatalf("not caught by %s; violations: %+v", c.check, out.Report.Violations)
		})
	}
}

// The restore fault: the shard every key is on is replaced by a restore of
// a snapshot taken earlier in the history. The history must show grants
// above the snapshot's revision before the restore (tokens the restored
// shard could issue again) and grants after the operators' advance, and
// pass: nothing granted while sealed, no token below one granted before.
// (An arbiter that does not seal a cluster whose ID differs from its
// epoch record's fails this history with granted-while-sealed and
// token-floor: docs/dr.md.)
func TestRestoreHistoryPasses(t *testing.T) {
	out := history(t, runner.Restore, 1, nil)
	if !out.Report.OK() {
		t.Fatalf("violations: %+v", out.Report.Violations)
	}
	t.Logf("%d grants", out.Report.Grants)
}

// The group commit's negative control: an arbiter whose batched Txns drop
// the compare that the key is free from every request after the first (built with the tag
// lockplane_broken_batch) grants keys that are held. The gate, run with
// group commit on as released, must catch it.
//
// A held key is granted only when a batch carries, after another request,
// an attempt on a key the other arbiter's client holds. With 16 clients on
// 8 keys most batches carry several keys and most attempts find the key
// held: histories on this box showed 37 to 60 overlaps each, against 3 or
// 4 with 2 keys, where one CI run passed three seeds. Up to three seeds
// still run: a correct arbiter passes every one (TestEveryFaultKindPasses
// and the gate), so one caught is enough.
func TestABatchThatDropsACompareIsCaught(t *testing.T) {
	var out *runner.Outcome
	grants := 0
	for seed := uint64(5); seed < 8; seed++ {
		out = history(t, runner.MemberKill, seed, func(cfg *runner.Config) {
			cfg.Arbiter = filepath.Join(bins, "arbiter-broken-batch")
			cfg.Clients, cfg.Keys = 16, 8
		})
		grants += out.Report.Grants
		if !out.Report.OK() {
			break
		}
	}
	if out.Report.OK() {
		t.Fatalf("a batch without the key-free compare passed the gate in three histories (%d grants)", grants)
	}
	checks := map[string]int{}
	for _, v := range out.Report.Violations {
		checks[v.Check]++
	}
	t.Logf("caught: %v; e.g. %+v", checks, out.Report.Violations[0])
}
