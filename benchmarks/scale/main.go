// Command scale holds N sessions across M identities, each holding H locks
// on one 3-member entity shard (plus coord), renewing through the real
// client library in separate worker processes, for a while; and prints what
// that costs: keepalives that reached etcd per TTL period (ADR-10: one per
// session, whatever its holds), false expiries, the service's RSS per
// session and per hold, etcd's database size, grant p50/p99 of fresh
// acquires under that background, and CPU used.
//
// The driver starts the services (driver.go), re-executes itself as client
// workers (worker.go), reads /proc and etcd (metrics.go), and prints a
// table or JSON (report.go).
package main

import (
	"flag"
	"log"
	"os"
	"strings"
	"time"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.Sessions, "sessions", 300, "sessions (N), each its own lease")
	flag.IntVar(&cfg.Identities, "identities", 10, "identities (M) the sessions are spread across")
	flag.IntVar(&cfg.Holds, "holds", 3, "locks held per session (H)")
	flag.DurationVar(&cfg.Duration, "duration", time.Minute, "how long the holds are kept renewing while measured (D)")
	flag.IntVar(&cfg.Workers, "workers", 2, "client worker processes")
	flag.DurationVar(&cfg.TTL, "ttl", 30*time.Second, "the benchmark class's session TTL: an advisory class, so 30s at least (ADR-11)")
	flag.DurationVar(&cfg.ProbeEvery, "probe-every", 50*time.Millisecond, "one fresh acquire + release every this often, measured")
	flag.DurationVar(&cfg.OpTimeout, "op-timeout", 10*time.Second, "deadline of every client and etcd call")
	flag.IntVar(&cfg.Parallel, "parallel", 16, "concurrent opens and acquires per worker while setting up")
	flag.BoolVar(&cfg.Processes, "processes", false, "run etcd and the arbiter as processes of their own (-etcd, -arbiter), so RSS and CPU are the arbiter's alone and renewals are counted per cluster")
	flag.StringVar(&cfg.EtcdBin, "etcd", "bin/etcd", "with -processes: the etcd binary")
	flag.StringVar(&cfg.ArbiterBin, "arbiter", "bin/arbiter", "with -processes: the arbiter binary")
	flag.IntVar(&cfg.CoordMembers, "coord-members", 3, "with -processes: the coord cluster's members")
	full := flag.Bool("full", false, "the issue's full size: 40,000 sessions, 250,000 holds, 10 minutes")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	flag.StringVar(&cfg.CPUProfile, "cpuprofile", "", "write a CPU profile of this process over the measured window to this file (embedded: the arbiter and etcd together)")

	// Worker mode: the driver runs this binary again with these.
	flag.StringVar(&cfg.MemProfile, "memprofile", "", "write a heap profile of this process at the end of the measured window to this file (embedded: the arbiter and etcd together)")
	worker := flag.Bool("worker", false, "internal: run as a client worker")
	var w workerArgs
	flag.IntVar(&w.Holds, "worker-holds", 0, "internal: the worker's holds in all")
	ids := flag.String("worker-identities", "", "internal: the worker's identities, comma-separated")
	flag.StringVar(&w.Profile, "worker-profile", "", "internal: the profile to dial with")
	flag.StringVar(&w.Class, "worker-class", className, "internal: the class to lock")
	flag.StringVar(&w.Prefix, "worker-prefix", "scale/w", "internal: key prefix")
	flag.Parse()

	if *worker {
		w.Identities = strings.Split(*ids, ",")
		w.Sessions, w.Parallel, w.OpTimeout = cfg.Sessions, cfg.Parallel, cfg.OpTimeout
		runWorker(w)
		return
	}
	if *full {
		// 250,000 holds over 40,000 sessions: 6.25 each on average,
		// spread round-robin (a quarter of the sessions hold 7).
		cfg.Sessions, cfg.Identities, cfg.TotalHolds, cfg.Duration = 40000, 100, 250000, 10*time.Minute
		cfg.Workers = 4
	}
	if cfg.Processes && (!exists(cfg.EtcdBin) || !exists(cfg.ArbiterBin)) {
		log.Fatalf("-processes: %s and %s must be binaries (make bench-scale PROCESSES=1 builds them)", cfg.EtcdBin, cfg.ArbiterBin)
	}
	if cfg.TotalHolds == 0 {
		cfg.TotalHolds = cfg.Sessions * cfg.Holds
	}
	rep, err := run(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if *asJSON {
		rep.writeJSON(os.Stdout)
		return
	}
	rep.writeTable(os.Stdout)
}
