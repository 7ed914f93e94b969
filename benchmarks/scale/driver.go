package main

// The driver: starts the services, the client workers, and measures.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockplane/lockplane/services/childproc"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/latency"
	"github.com/lockplane/lockplane/services/lockkey"
)

type config struct {
	Sessions, Identities, Holds, TotalHolds, Workers, Parallel int
	Duration, TTL, ProbeEvery, OpTimeout                       time.Duration
	// Processes runs etcd (EtcdBin) and the arbiter (ArbiterBin) as
	// processes of their own; CoordMembers is then the coord cluster's
	// size.
	Processes           bool
	EtcdBin, ArbiterBin string
	CoordMembers        int
	// CPUProfile, when set, is where this process's CPU profile over the
	// measured window goes.
	CPUProfile string
	// MemProfile, when set, is where this process's heap profile goes at
	// the end of the measured window, the workers' sessions still open.
	MemProfile string
}

// shard is the one entity shard the holds live on.
const shard = "entity-0"

// workerProc is one running client worker.
type workerProc struct {
	*childproc.Process
	stdin  io.WriteCloser
	stdout *os.File
	lines  *bufio.Scanner
}

// expect reads the worker's next line, which must be phase (or its result
// with an error), within d.
func (w *workerProc) expect(phase string, d time.Duration) error {
	got := make(chan error, 1)
	go func() {
		if !w.lines.Scan() {
			got <- fmt.Errorf("worker %d ended before %q", w.Pid(), phase)
			return
		}
		var m struct{ Phase, Error string }
		if err := json.Unmarshal(w.lines.Bytes(), &m); err != nil || m.Error != "" || m.Phase != phase {
			got <- fmt.Errorf("worker %d: wanted %q, said %s", w.Pid(), phase, w.lines.Text())
			return
		}
		got <- nil
	}()
	select {
	case err := <-got:
		return err
	case <-time.After(d):
		return fmt.Errorf("worker %d: no %q within %s", w.Pid(), phase, d)
	}
}

func run(cfg config) (*report, error) {
	// An interrupt ends the measuring early and still runs every cleanup:
	// no etcd, arbiter or worker process outlives the driver.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "lockplane-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// The probe (demo) and the workers' identities, as devenv names them.
	spiffeIDs := []string{"spiffe://" + devenv.TrustDomain + devenv.Identities["demo"]}
	for i := range cfg.Identities {
		spiffeIDs = append(spiffeIDs, fmt.Sprintf("spiffe://%s/ns/bench/sa/worker-%d", devenv.TrustDomain, i))
	}
	policies := filepath.Join(dir, "policies")
	if err := writePolicy(policies, cfg.TTL, spiffeIDs, cfg.Sessions, cfg.TotalHolds); err != nil {
		return nil, err
	}
	var svc services
	if cfg.Processes {
		logf("starting the coord cluster (%d members) and a 3-member entity shard as %s processes, and %s...", cfg.CoordMembers, cfg.EtcdBin, cfg.ArbiterBin)
		svc, err = startProcesses(ctx, cfg, dir, policies)
	} else {
		logf("starting the coord cluster, a 3-member entity shard and the arbiter (embedded, in this process)...")
		svc, err = startEmbedded(ctx, cfg, dir, policies)
	}
	if err != nil {
		return nil, err
	}
	defer svc.close()
	self := svc.arbiterPID()
	rep := &report{Sessions: cfg.Sessions, Identities: cfg.Identities, Holds: cfg.TotalHolds, Workers: cfg.Workers,
		TTLSeconds: cfg.TTL.Seconds(), DurationSeconds: cfg.Duration.Seconds(), ServicesInOneProcess: svc.embedded()}

	rss0, err := settledRSS(self)
	if err != nil {
		return nil, err
	}
	ids := make([]string, cfg.Identities)
	for i := range ids {
		ids[i] = fmt.Sprintf("worker-%d", i)
	}
	logf("opening %d sessions across %d identities in %d worker processes...", cfg.Sessions, cfg.Identities, cfg.Workers)
	var workers []*workerProc
	defer func() {
		for _, w := range workers {
			w.stdin.Close()
			w.Kill()
			w.stdout.Close()
		}
	}()
	setup := cfg.OpTimeout + time.Duration(cfg.TotalHolds/max(1, cfg.Parallel*cfg.Workers)+cfg.Sessions)*cfg.OpTimeout/10
	for i := range cfg.Workers {
		n, h := share(cfg.Sessions, cfg.Workers, i), share(cfg.TotalHolds, cfg.Workers, i)
		if n == 0 {
			continue
		}
		// Each worker starts at a different identity, so that the
		// identities' sessions spread evenly over the workers.
		mine := append(append([]string{}, ids[i%len(ids):]...), ids[:i%len(ids)]...)
		w, err := startWorker(svc.profilePath(), mine, n, h, cfg, fmt.Sprintf("scale/w%d", i))
		if err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	for _, w := range workers {
		if err := w.expect("opened", setup); err != nil {
			return nil, err
		}
	}
	rss1, err := settledRSS(self)
	if err != nil {
		return nil, err
	}
	logf("taking %d holds...", cfg.TotalHolds)
	for _, w := range workers {
		fmt.Fprintln(w.stdin, "hold")
	}
	for _, w := range workers {
		if err := w.expect("held", setup); err != nil {
			return nil, err
		}
	}
	rss2, err := settledRSS(self)
	if err != nil {
		return nil, err
	}
	rep.RSSBaselineBytes, rep.RSSSessionsBytes, rep.RSSHoldsBytes = rss0, rss1, rss2
	rep.RSSPerSessionBytes = float64(rss1-rss0) / float64(cfg.Sessions)
	rep.RSSPerHoldBytes = float64(rss2-rss1) / float64(max(1, cfg.TotalHolds))

	logf("holding for %s, measuring fresh acquires every %s...", cfg.Duration, cfg.ProbeEvery)
	// CPU: the arbiter (or everything, embedded) first, then the etcd
	// processes, then the workers.
	pids := append([]int{self}, svc.etcdPIDs()...)
	for _, w := range workers {
		pids = append(pids, w.Pid())
	}
	cpu0, err := cpuTimes(pids)
	if err != nil {
		return nil, err
	}
	renew0, err := svc.renewed(ctx)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	stopProfile, err := startCPUProfile(cfg.CPUProfile)
	if err != nil {
		return nil, err
	}
	grants, failed, err := probe(ctx, svc.profilePath(), cfg)
	stopProfile()
	if err != nil {
		return nil, err
	}
	renew1, err := svc.renewed(ctx)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(t0)
	cpu1, err := cpuTimes(pids)
	if err != nil {
		return nil, err
	}
	periods := elapsed.Seconds() / cfg.TTL.Seconds()
	rep.MeasuredSeconds = elapsed.Seconds()
	rep.KeepalivesByCluster = map[string]float64{}
	for cluster, n := range renew1 {
		rep.KeepalivesByCluster[cluster] = (n - renew0[cluster]) / periods
		rep.KeepalivesToEtcd += n - renew0[cluster]
	}
	rep.KeepalivesPerTTL = rep.KeepalivesToEtcd / periods
	// The probe's session renews too: count it.
	rep.KeepalivesPerTTLPerSession = rep.KeepalivesPerTTL / float64(cfg.Sessions+1)
	rep.KeepalivesPerRenewalPerSession = rep.KeepalivesPerTTLPerSession / lockclient.RenewalsPerTTL
	rep.Grant = latency.Summarize(grants)
	rep.GrantFailures = failed
	rep.CPUServicesSeconds = (cpu1[0] - cpu0[0]).Seconds()
	etcdProcs := len(svc.etcdPIDs())
	for i := 1; i < len(pids); i++ {
		if i <= etcdProcs {
			rep.CPUEtcdSeconds += (cpu1[i] - cpu0[i]).Seconds()
		} else {
			rep.CPUWorkersSeconds += (cpu1[i] - cpu0[i]).Seconds()
		}
	}
	rep.CPUCoresServices = rep.CPUServicesSeconds / elapsed.Seconds()
	if rep.ShardDBBytes, rep.ShardDBInUseBytes, err = dbSizes(ctx, svc.shard(), cfg.OpTimeout); err != nil {
		return nil, err
	}
	if rep.CoordDBBytes, rep.CoordDBInUseBytes, err = dbSizes(ctx, svc.coord(), cfg.OpTimeout); err != nil {
		return nil, err
	}

	if err := writeHeapProfile(cfg.MemProfile); err != nil {
		return nil, err
	}

	// The holds as etcd has them, read before the workers stop: every one
	// taken must still be there, whatever the clients believe.
	if rep.HoldsInEtcd, err = countHolds(ctx, svc.shard(), lockkey.HoldKey("scale/w"), cfg.OpTimeout); err != nil {
		return nil, err
	}

	logf("stopping the workers...")
	for _, w := range workers {
		fmt.Fprintln(w.stdin, "stop")
	}
	for _, w := range workers {
		r, err := w.result(setup)
		if err != nil {
			return nil, err
		}
		rep.FencedAtClients += r.Fenced
	}
	// A hold is falsely expired if its client saw it fenced, or if etcd
	// lost it while the client still believed it held.
	rep.FalseExpiries = max(rep.FencedAtClients, cfg.TotalHolds-int(rep.HoldsInEtcd))
	return rep, nil
}

// share is worker i's part of total split over n workers.
func share(total, n, i int) int {
	s := total / n
	if i < total%n {
		s++
	}
	return s
}

func startWorker(profile string, ids []string, sessions, holds int, cfg config, prefix string) (*workerProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-worker", "-worker-profile", profile, "-worker-identities", strings.Join(ids, ","),
		"-sessions", strconv.Itoa(sessions), "-worker-holds", strconv.Itoa(holds), "-worker-prefix", prefix,
		"-parallel", strconv.Itoa(cfg.Parallel), "-worker-class", className, "-op-timeout", cfg.OpTimeout.String())
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// An os.Pipe, not StdoutPipe: the Process reaps the worker as it
	// exits, and Wait would close a StdoutPipe before its result is read.
	out, w, err := os.Pipe()
	if err != nil {
		in.Close()
		return nil, err
	}
	cmd.Stdout = w
	// Start's parent-death signal: no worker outlives a driver that dies
	// without its cleanups (a SIGKILL, a crash).
	p, err := childproc.Start(cmd)
	w.Close() // the child has its own descriptor
	if err != nil {
		in.Close()
		out.Close()
		return nil, err
	}
	return &workerProc{Process: p, stdin: in, stdout: out, lines: bufio.NewScanner(out)}, nil
}

// result reads the worker's last line, within d.
func (w *workerProc) result(d time.Duration) (workerResult, error) {
	got := make(chan workerResult, 1)
	go func() {
		var r workerResult
		if !w.lines.Scan() {
			r.Err = "ended without a result"
		} else if err := json.Unmarshal(w.lines.Bytes(), &r); err != nil {
			r.Err = err.Error()
		}
		got <- r
	}()
	select {
	case r := <-got:
		if r.Err != "" {
			return r, fmt.Errorf("worker %d: %s", w.Pid(), r.Err)
		}
		return r, nil
	case <-time.After(d):
		return workerResult{}, fmt.Errorf("worker %d: no result within %s", w.Pid(), d)
	}
}

// probe acquires and releases a fresh key every cfg.ProbeEvery for
// cfg.Duration on its own session, and returns the acquires' latencies and
// how many failed.
func probe(ctx context.Context, profilePath string, cfg config) ([]time.Duration, int, error) {
	p, err := profile.Load(profilePath)
	if err != nil {
		return nil, 0, err
	}
	c, err := lockclient.DialProfile(p, "demo")
	if err != nil {
		return nil, 0, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		defer cancel()
		c.Close(cctx)
	}()
	sctx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
	s, err := c.Session(sctx, className)
	cancel()
	if err != nil {
		return nil, 0, err
	}
	// Bounded: one sample per tick.
	lat := make([]time.Duration, 0, int(cfg.Duration/cfg.ProbeEvery)+1)
	failed := 0
	tick := time.NewTicker(cfg.ProbeEvery)
	defer tick.Stop()
	end := time.After(cfg.Duration)
	for i := 0; ; i++ {
		select {
		case <-end:
			return lat, failed, nil
		case <-ctx.Done():
			return nil, failed, ctx.Err()
		case <-tick.C:
		}
		actx, cancel := context.WithTimeout(ctx, cfg.OpTimeout)
		t := time.Now()
		h, err := s.TryLock(actx, fmt.Sprintf("scale/probe/%d", i), func(*lockclient.Hold) {})
		d := time.Since(t)
		if err == nil {
			lat = append(lat, d)
			err = h.Release(actx)
		}
		cancel()
		if err != nil {
			failed++
			if errors.Is(err, lockclient.ErrFenced) {
				return nil, failed, fmt.Errorf("the probe's session was fenced: %w", err)
			}
		}
	}
}

// settledRSS reads pid's RSS; when pid is this process, it first frees
// what the Go heap can give back, so the steps between samples are live
// memory, not garbage. Another process (the arbiter run apart) returns
// freed memory by its own scavenger only, so its steps include garbage
// not yet returned.
func settledRSS(pid int) (int64, error) {
	if pid == os.Getpid() {
		debug.FreeOSMemory()
	}
	return rssBytes(pid)
}

func cpuTimes(pids []int) ([]time.Duration, error) {
	out := make([]time.Duration, len(pids))
	for i, p := range pids {
		var err error
		if out[i], err = cpuTime(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// startCPUProfile profiles this process into path until the returned
// function is called; nothing when path is empty.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// writeHeapProfile writes this process's live heap, after a GC, to path;
// nothing when path is empty.
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	logf("heap in use %.1f MiB, stacks %.1f MiB, %d goroutines", float64(ms.HeapInuse)/(1<<20), float64(ms.StackInuse)/(1<<20), runtime.NumGoroutine())
	return pprof.WriteHeapProfile(f)
}

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
