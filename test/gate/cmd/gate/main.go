// Command gate is the release gate (ADR-23): it runs fault-injected
// histories against real etcd, arbiter and client processes and checks
// each one. Any violation fails the gate, and its history is saved with
// Porcupine's visualisation under -artifacts.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/runner"
	"github.com/lockplane/lockplane/test/gate/traffic"
)

func main() {
	if v := os.Getenv(runner.ClientEnv); v != "" {
		os.Exit(client(v))
	}
	count := flag.Int("count", 200, "histories to run; the fault kinds take turns")
	each := flag.Int("each", 0, "when set, run this many histories of each fault kind instead of -count (gate-short: 1, so a kind added is never left out)")
	seed := flag.Uint64("seed", 1, "seed of the first history; history i uses seed+i")
	duration := flag.Duration("duration", 8*time.Second, "traffic time per history")
	clients := flag.Int("clients", 4, "client processes per history")
	keys := flag.Int("keys", 2, "keys (fenced records) per history")
	etcd := flag.String("etcd", "bin/etcd", "etcd binary")
	arbiter := flag.String("arbiter", "bin/arbiter", "arbiter binary")
	artifacts := flag.String("artifacts", "artifacts/gate", "where violating histories are saved")
	unsafe := flag.Bool("unsafe", false, "clients write without the fence: a negative control, which must fail")
	locker := flag.String("locker", traffic.LockerLockplane, "what clients lock with: lockplane, or watch-grant (an unsafe etcd recipe: a negative control, which must fail)")
	faultList := flag.String("faults", "all", "comma-separated fault kinds to cycle through (default every kind): "+kinds())
	asJSON := flag.Bool("json", false, "print the summary as JSON")
	keep := flag.Bool("keep", false, "keep each history's working directory (process logs, etcd data) and say where: for debugging a fault")
	flag.Parse()
	faults, err := runner.ParseFaults(*faultList)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate: -"+err.Error())
		os.Exit(2)
	}
	if *each > 0 {
		*count = *each * len(faults)
	}
	if *locker != traffic.LockerLockplane && *locker != traffic.LockerWatchGrant {
		fmt.Fprintf(os.Stderr, "gate: -locker %q: must be %s or %s\n", *locker, traffic.LockerLockplane, traffic.LockerWatchGrant)
		os.Exit(2)
	}
	os.Exit(run(options{count: *count, seed: *seed, duration: *duration, clients: *clients, keys: *keys, etcd: *etcd, arbiter: *arbiter,
		artifacts: *artifacts, unsafe: *unsafe, locker: *locker, faults: faults, asJSON: *asJSON, keep: *keep}))
}

func kinds() string {
	var names []string
	for _, f := range runner.Faults {
		names = append(names, string(f))
	}
	return strings.Join(names, ", ")
}

type options struct {
	count, clients, keys  int
	seed                  uint64
	duration              time.Duration
	etcd, arbiter, locker string
	artifacts             string
	unsafe, asJSON, keep  bool
	faults                []runner.Fault
}

func client(v string) int {
	var cfg traffic.Config
	if err := json.Unmarshal([]byte(v), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := traffic.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type row struct {
	Fault      runner.Fault `json:"fault"`
	Histories  int          `json:"histories"`
	Ops        int          `json:"ops"`
	Grants     int          `json:"grants"`
	Violations int          `json:"violations"`
	// Forced counts the overlaps excused as a force-release's; Late the
	// writes under force-released grants after their holders were told,
	// LateRefused those the fence refused.
	Forced      int `json:"forced"`
	Late        int `json:"late_writes"`
	LateRefused int `json:"late_refused"`
	// Checks counts the violations by the check that found them.
	Checks map[string]int `json:"checks,omitempty"`
}

// checks names the checks violated, with counts: "token-floor 1, token-order 3".
func checks(counts map[string]int) string {
	var names []string
	for c := range counts {
		names = append(names, c)
	}
	sort.Strings(names)
	var out []string
	for _, c := range names {
		out = append(out, fmt.Sprintf("%s %d", c, counts[c]))
	}
	return strings.Join(out, ", ")
}

func run(o options) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, b := range []string{o.etcd, o.arbiter} {
		if _, err := os.Stat(b); err != nil {
			fmt.Fprintf(os.Stderr, "gate: %s is missing: run `make build` first\n", b)
			return 2
		}
	}
	pg, err := resourcetest.NewPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "gate: PostgreSQL 15:", err)
		return 2
	}
	defer pg.Stop()
	work, err := os.MkdirTemp("", "lockplane-gate-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if o.keep {
		fmt.Fprintf(os.Stderr, "gate: keeping every history's directory under %s\n", work)
	} else {
		defer os.RemoveAll(work)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rows := map[runner.Fault]*row{}
	for _, f := range o.faults {
		rows[f] = &row{Fault: f}
	}
	failed, ran := 0, 0
	begin := time.Now()
	for i := 0; i < o.count && ctx.Err() == nil; i++ {
		f := o.faults[i%len(o.faults)]
		s := o.seed + uint64(i)
		t0 := time.Now()
		hdir := filepath.Join(work, fmt.Sprint(i))
		out, err := runner.Run(ctx, runner.Config{Etcd: o.etcd, Arbiter: o.arbiter, Client: []string{self}, Dir: hdir,
			Postgres: pg, Fault: f, Seed: s, Clients: o.clients, Keys: o.keys, Duration: o.duration, Unsafe: o.unsafe, Locker: o.locker})
		if ctx.Err() != nil {
			break // interrupted: this history is incomplete
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "gate: history %d (%s, seed %d) could not run: %v\n", i, f, s, err)
			return 2
		}
		ran++
		r := rows[f]
		r.Histories++
		r.Ops += out.Report.Ops
		r.Grants += out.Report.Grants
		r.Violations += len(out.Report.Violations)
		r.Forced += out.Report.Forced
		late, refused := runner.LateWrites(out.Ops)
		r.Late += late
		r.LateRefused += refused
		mine := map[string]int{}
		for _, v := range out.Report.Violations {
			mine[v.Check]++
			if r.Checks == nil {
				r.Checks = map[string]int{}
			}
			r.Checks[v.Check]++
		}
		verdict := "ok"
		if !out.Report.OK() {
			failed++
			dir, err := save(o.artifacts, i, out, hdir)
			verdict = fmt.Sprintf("%d VIOLATIONS (%s), saved to %s %v", len(out.Report.Violations), checks(mine), dir, errOrNil(err))
		}
		// A history's etcd data is hundreds of MB: a 200-history gate must
		// not keep them all (what a violation needs is saved above).
		if !o.keep {
			os.RemoveAll(hdir)
		}
		forced := ""
		if out.Report.Forced > 0 || late > 0 {
			forced = fmt.Sprintf("  %d forced overlap(s), %d of %d late write(s) refused", out.Report.Forced, refused, late)
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %-19s seed %-5d %5d ops %4d grants  %s%s  (%s)\n", i+1, o.count, f, s, out.Report.Ops, out.Report.Grants, verdict, forced, time.Since(t0).Round(100*time.Millisecond))
	}
	var table []row
	for _, f := range o.faults {
		table = append(table, *rows[f])
	}
	if o.asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": table, "histories": ran, "failed_histories": failed, "elapsed": time.Since(begin).String()})
	} else {
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "fault\thistories\toperations\tgrants\tviolations\tforced\t")
		all := map[string]int{}
		for _, r := range table {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", r.Fault, r.Histories, r.Ops, r.Grants, r.Violations, r.Forced)
			for c, n := range r.Checks {
				all[c] += n
			}
		}
		tw.Flush()
		fmt.Printf("%d of %d histories violated a property (%s)", failed, ran, time.Since(begin).Round(time.Second))
		if len(all) > 0 {
			fmt.Printf(": %s", checks(all))
		}
		fmt.Println()
	}
	if failed > 0 {
		return 1
	}
	if ran < o.count {
		fmt.Fprintf(os.Stderr, "gate: interrupted after %d of %d histories: not a pass\n", ran, o.count)
		return 2
	}
	return 0
}

func errOrNil(err error) string {
	if err != nil {
		return "(save failed: " + err.Error() + ")"
	}
	return ""
}

// save writes a violating history, its visualisation and the logs of its
// processes.
func save(root string, i int, out *runner.Outcome, hdir string) (string, error) {
	dir := filepath.Join(root, fmt.Sprintf("%03d-%s-seed%d", i, out.Fault, out.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, err
	}
	b, _ := json.MarshalIndent(map[string]any{"fault": out.Fault, "seed": out.Seed, "violations": out.Report.Violations, "final": out.Final,
		"holds_at_exit": out.Holds, "ops": out.Ops}, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return dir, err
	}
	logs, _ := filepath.Glob(filepath.Join(hdir, "*.log"))
	etcdLogs, _ := filepath.Glob(filepath.Join(hdir, "etcd", "*.log"))
	for _, l := range append(logs, etcdLogs...) {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	shardLogs, _ := filepath.Glob(filepath.Join(hdir, "shard-*", "*.log"))
	for _, l := range shardLogs {
		if b, err := os.ReadFile(l); err == nil {
			os.WriteFile(filepath.Join(dir, filepath.Base(filepath.Dir(l))+"-"+filepath.Base(l)), b, 0o644)
		}
	}
	return dir, out.Report.Visualize(filepath.Join(dir, "porcupine.html"))
}
