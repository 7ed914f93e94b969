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
	seed := flag.Uint64("seed", 1, "seed of the first history; history i uses seed+i")
	duration := flag.Duration("duration", 8*time.Second, "traffic time per history")
	clients := flag.Int("clients", 4, "client processes per history")
	keys := flag.Int("keys", 2, "keys (fenced records) per history")
	etcd := flag.String("etcd", "bin/etcd", "etcd binary")
	arbiter := flag.String("arbiter", "bin/arbiter", "arbiter binary")
	artifacts := flag.String("artifacts", "artifacts/gate", "where violating histories are saved")
	unsafe := flag.Bool("unsafe", false, "clients write without the fence: the negative control, which must fail")
	asJSON := flag.Bool("json", false, "print the summary as JSON")
	flag.Parse()
	os.Exit(run(*count, *seed, *duration, *clients, *keys, *etcd, *arbiter, *artifacts, *unsafe, *asJSON))
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
}

func run(count int, seed uint64, duration time.Duration, clients, keys int, etcd, arbiter, artifacts string, unsafe, asJSON bool) int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, b := range []string{etcd, arbiter} {
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
	defer os.RemoveAll(work)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rows := map[runner.Fault]*row{}
	for _, f := range runner.Faults {
		rows[f] = &row{Fault: f}
	}
	failed := 0
	begin := time.Now()
	for i := 0; i < count && ctx.Err() == nil; i++ {
		f := runner.Faults[i%len(runner.Faults)]
		s := seed + uint64(i)
		t0 := time.Now()
		out, err := runner.Run(ctx, runner.Config{Etcd: etcd, Arbiter: arbiter, Client: []string{self}, Dir: filepath.Join(work, fmt.Sprint(i)),
			Postgres: pg, Fault: f, Seed: s, Clients: clients, Keys: keys, Duration: duration, Unsafe: unsafe})
		if err != nil {
			fmt.Fprintf(os.Stderr, "gate: history %d (%s, seed %d) could not run: %v\n", i, f, s, err)
			return 2
		}
		r := rows[f]
		r.Histories++
		r.Ops += out.Report.Ops
		r.Grants += out.Report.Grants
		r.Violations += len(out.Report.Violations)
		verdict := "ok"
		if !out.Report.OK() {
			failed++
			dir, err := save(artifacts, i, out)
			verdict = fmt.Sprintf("%d VIOLATIONS, saved to %s %v", len(out.Report.Violations), dir, errOrNil(err))
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %-19s seed %-5d %5d ops %4d grants  %s  (%s)\n", i+1, count, f, s, out.Report.Ops, out.Report.Grants, verdict, time.Since(t0).Round(100*time.Millisecond))
	}
	var table []row
	for _, f := range runner.Faults {
		table = append(table, *rows[f])
	}
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"rows": table, "failed_histories": failed, "elapsed": time.Since(begin).String()})
	} else {
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "fault\thistories\toperations\tgrants\tviolations\t")
		for _, r := range table {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", r.Fault, r.Histories, r.Ops, r.Grants, r.Violations)
		}
		tw.Flush()
		fmt.Printf("%d of %d histories violated a property (%s)\n", failed, count, time.Since(begin).Round(time.Second))
	}
	if failed > 0 {
		return 1
	}
	return 0
}

func errOrNil(err error) string {
	if err != nil {
		return "(save failed: " + err.Error() + ")"
	}
	return ""
}

// save writes a violating history and its visualisation.
func save(root string, i int, out *runner.Outcome) (string, error) {
	dir := filepath.Join(root, fmt.Sprintf("%03d-%s-seed%d", i, out.Fault, out.Seed))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return dir, err
	}
	b, _ := json.MarshalIndent(map[string]any{"fault": out.Fault, "seed": out.Seed, "violations": out.Report.Violations, "final": out.Final, "ops": out.Ops}, "", " ")
	if err := os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644); err != nil {
		return dir, err
	}
	return dir, out.Report.Visualize(filepath.Join(dir, "porcupine.html"))
}
