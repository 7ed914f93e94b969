// Package runner runs one release-gate history: a 3-member etcd cluster of
// processes behind fault proxies (with two one-member entity shards for
// the shard-add fault), two arbiter processes, a PostgreSQL
// database with the fenced records, and client processes running the
// traffic loop, while one fault is injected and healed. It returns the
// checker's report on the recorded history.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/lockclient"
	"github.com/lockplane/lockplane/services/profile"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/services/token"
	"github.com/lockplane/lockplane/test/gate/checker"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/lockplane/lockplane/test/gate/history"
	"github.com/lockplane/lockplane/test/gate/traffic"
)

// Fault is one kind of fault; every profile injects each of them.
type Fault string

// The faults of the gate.
const (
	MemberKill        Fault = "member-kill"
	LeaderKill        Fault = "leader-kill"
	LeaderIsolate     Fault = "leader-isolate"
	MinorityPartition Fault = "minority-partition"
	MajorityPartition Fault = "majority-partition"
	PeerDelay         Fault = "peer-delay"
	ArbiterKill       Fault = "arbiter-kill"
	ArbiterStop       Fault = "arbiter-stop"
	HolderStop        Fault = "holder-stop"
	// ShardAdd runs the history on an entity class over entity shards
	// (etcd processes of their own) and adds a shard mid-run: half the
	// keys' ranges move, fenced by the destination's epoch advance.
	ShardAdd Fault = "shard-add"
)

// Faults lists every kind, in the order profiles cycle through them.
var Faults = []Fault{MemberKill, LeaderKill, LeaderIsolate, MinorityPartition, MajorityPartition, PeerDelay, ArbiterKill, ArbiterStop, HolderStop, ShardAdd}

// ParseFaults reads a comma-separated list of fault kinds; "" or "all" is
// every kind.
func ParseFaults(list string) ([]Fault, error) {
	if list == "" || list == "all" {
		return Faults, nil
	}
	var out []Fault
	for _, name := range strings.Split(list, ",") {
		f := Fault(strings.TrimSpace(name))
		if !slices.Contains(Faults, f) {
			names := make([]string, len(Faults))
			for i, k := range Faults {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("faults: %q is not a fault kind; the kinds are %s", f, strings.Join(names, ", "))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

// ClientEnv carries a traffic.Config to a client process.
const ClientEnv = "LOCKPLANE_GATE_CLIENT"

// TTL is the gate class's TTL: short, so expiries happen inside a history.
const TTL = 3 * time.Second

// Config is one history.
type Config struct {
	Etcd, Arbiter string   // binaries
	Client        []string // command that runs a client (ClientEnv is added)
	Dir           string
	Postgres      *resourcetest.Postgres
	Fault         Fault
	Seed          uint64
	Clients, Keys int
	Duration      time.Duration
	// Unsafe makes clients write without the fence: a negative control.
	Unsafe bool
	// Locker is what clients lock with: traffic.LockerLockplane (the
	// default) or traffic.LockerWatchGrant, the unsafe locker of the other
	// negative control.
	Locker string
}

// Outcome is a checked history.
type Outcome struct {
	Fault   Fault
	Seed    uint64
	Report  *checker.Report
	Ops     []history.Op
	Final   map[string][]string
	Started time.Time
}

// Run runs and checks one history.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	rng := rand.New(rand.NewPCG(cfg.Seed, 7))
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	cl, err := cluster.Start(ctx, cluster.Config{Bin: cfg.Etcd, Dir: filepath.Join(cfg.Dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("etcd cluster: %w", err)
	}
	defer cl.Close()

	profiles, err := writeTrust(cfg.Dir, cfg.Clients)
	if err != nil {
		return nil, err
	}
	keys := gateKeys(cfg.Keys)
	var sh *shards
	if cfg.Fault == ShardAdd {
		if sh, err = startShards(ctx, cfg, cl); err != nil {
			return nil, err
		}
		defer sh.close()
		keys = sh.keys(cfg.Keys)
	}
	var arbiters []*proc
	defer func() {
		for _, a := range arbiters {
			a.kill()
		}
	}()
	for i := range 2 {
		a, err := startArbiter(cfg, profiles[i], cl.Endpoints(), sh, i)
		if err != nil {
			return nil, err
		}
		arbiters = append(arbiters, a)
	}

	db := fmt.Sprintf("gate_%d_%d", time.Now().UnixNano(), cfg.Seed)
	if err := createDB(ctx, cfg.Postgres, db); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	defer dropDB(cfg.Postgres, db)
	if err := traffic.Prepare(ctx, cfg.Postgres.URL(db), keys); err != nil {
		return nil, fmt.Errorf("prepare records: %w", err)
	}

	started := time.Now()
	until := history.Now() + int64(cfg.Duration)
	var clients []*proc
	var paths []string
	for i := range cfg.Clients {
		tc := traffic.Config{Client: i, Profile: profiles[i%2], Identity: fmt.Sprintf("c%d", i), Class: "gate",
			Keys: keys, Postgres: cfg.Postgres.URL(db), History: filepath.Join(cfg.Dir, fmt.Sprintf("client-%d.jsonl", i)),
			Until: until, Seed: cfg.Seed, Unsafe: cfg.Unsafe, Locker: cfg.Locker, Etcd: cl.Endpoints(), TTL: TTL}
		paths = append(paths, tc.History)
		env, _ := json.Marshal(tc)
		c, err := start(cfg.Client, []string{ClientEnv + "=" + string(env)}, filepath.Join(cfg.Dir, fmt.Sprintf("client-%d.log", i)))
		if err != nil {
			return nil, err
		}
		clients = append(clients, c)
	}

	// Inject at a quarter of the run, heal at two thirds.
	sleep(ctx, cfg.Duration/4)
	heal := inject(ctx, cfg.Fault, cl, arbiters, clients, rng, holderOf(ctx, profiles[0], keys))
	if cfg.Fault == ShardAdd {
		heal = sh.add(ctx, profiles[0])
	}
	sleep(ctx, cfg.Duration*2/3-cfg.Duration/4)
	heal()
	cl.Heal()

	for _, c := range clients {
		c.wait(cfg.Duration + 30*time.Second)
	}
	final, err := traffic.Final(ctx, cfg.Postgres.URL(db))
	if err != nil {
		return nil, fmt.Errorf("read final records: %w", err)
	}
	ops, err := history.Load(paths...)
	if err != nil {
		return nil, err
	}
	epochs := []uint32{1}
	if sh != nil {
		if err := sh.err(); err != nil {
			return nil, err
		}
		// The new shard's epoch is advanced above the source's.
		epochs = append(epochs, 2)
		if !grantedIn(ops, 2) {
			return nil, fmt.Errorf("shard-add: no grant on the added shard (epoch 2): the history proves nothing about the move")
		}
	}
	return &Outcome{Fault: cfg.Fault, Seed: cfg.Seed, Ops: ops, Final: final, Started: started,
		Report: checker.Check(ops, final, epochs, time.Minute)}, nil
}

// grantedIn reports whether some grant of ops carries epoch e.
func grantedIn(ops []history.Op, e uint32) bool {
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Result == history.OK && token.Token(op.Token).Epoch() == e {
			return true
		}
	}
	return false
}

// inject applies the fault and returns what undoes it.
func inject(ctx context.Context, f Fault, cl *cluster.Cluster, arbiters, clients []*proc, rng *rand.Rand, holder func() int) func() {
	leader := func() int {
		l, err := cl.Leader(ctx)
		if err != nil {
			return 0
		}
		return l
	}
	switch f {
	case MemberKill:
		i := rng.IntN(len(cl.Members))
		cl.Kill(i)
		return func() { cl.Restart(i) }
	case LeaderKill:
		i := leader()
		cl.Kill(i)
		return func() { cl.Restart(i) }
	case LeaderIsolate:
		cl.Isolate(leader())
		return func() {}
	case MinorityPartition:
		l := leader()
		others := []int{}
		for i := range cl.Members {
			if i != l {
				others = append(others, i)
			}
		}
		// The leader keeps a majority; one follower is cut off.
		cl.Partition([]int{others[0]}, []int{l, others[1]})
		return func() {}
	case MajorityPartition:
		// No side has a majority: nothing may be granted or renewed.
		cl.Partition([]int{0}, []int{1}, []int{2})
		return func() {}
	case PeerDelay:
		cl.DelayPeers(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		return func() {}
	case ArbiterKill:
		a := arbiters[rng.IntN(len(arbiters))]
		a.kill()
		return func() { a.restart() }
	case ArbiterStop:
		a := arbiters[rng.IntN(len(arbiters))]
		a.signal(syscall.SIGSTOP)
		return func() { a.signal(syscall.SIGCONT) }
	case HolderStop:
		// A client that holds a key now, most likely mid-work, frozen past
		// the TTL so its lease expires while it is stopped.
		i := holder()
		if i < 0 {
			i = rng.IntN(len(clients))
		}
		c := clients[i]
		c.signal(syscall.SIGSTOP)
		return func() { c.signal(syscall.SIGCONT) }
	}
	return func() {}
}

// holderOf returns a function naming a client that holds one of keys, from
// the arbiter's Inspect (-1 if none does).
func holderOf(ctx context.Context, profilePath string, keys []string) func() int {
	return func() int {
		p, err := profile.Load(profilePath)
		if err != nil {
			return -1
		}
		c, err := lockclient.DialProfile(p, "c0")
		if err != nil {
			return -1
		}
		defer c.Close(context.Background())
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		for _, k := range keys {
			r, err := c.Inspect(ictx, k)
			if err != nil || !r.GetHeld() {
				continue
			}
			var i int
			if _, err := fmt.Sscanf(r.GetHolder().GetIdentity(), "spiffe://gate.lockplane.test/ns/gate/sa/client-%d", &i); err == nil {
				return i
			}
		}
		return -1
	}
}

// writeTrust writes a dev CA, SVIDs for the arbiters and each client, and
// one profile per arbiter.
func writeTrust(dir string, clients int) ([]string, error) {
	ca, err := devca.New("gate.lockplane.test", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pki := filepath.Join(dir, "pki")
	if _, err := ca.WriteBundle(pki); err != nil {
		return nil, err
	}
	ids := map[string]profile.Identity{}
	names := map[string]string{"arbiter": "/arbiter", "operator": "/operator/gate"}
	for i := range clients {
		names[fmt.Sprintf("c%d", i)] = fmt.Sprintf("/ns/gate/sa/client-%d", i)
	}
	for n, p := range names {
		if _, err := ca.WriteSVID(filepath.Join(pki, n), p, 24*time.Hour); err != nil {
			return nil, err
		}
		ids[n] = profile.Identity{SPIFFEID: "spiffe://gate.lockplane.test" + p, Cert: filepath.Join(pki, n, "svid.pem"), Key: filepath.Join(pki, n, "key.pem")}
	}
	var paths []string
	for i := range 2 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		p := &profile.Profile{Endpoint: fmt.Sprintf("127.0.0.1:%d", port), ServerID: "spiffe://gate.lockplane.test/arbiter",
			TrustDomain: "gate.lockplane.test", Bundle: filepath.Join(pki, "bundle.pem"), Identities: ids, DefaultIdentity: "c0"}
		path := filepath.Join(dir, fmt.Sprintf("profile-%d.json", i))
		if err := p.Save(path); err != nil {
			return nil, err
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func startArbiter(cfg Config, profilePath string, endpoints []string, sh *shards, i int) (*proc, error) {
	p, err := profile.Load(profilePath)
	if err != nil {
		return nil, err
	}
	mport, err := freePort()
	if err != nil {
		return nil, err
	}
	id := p.Identities["arbiter"]
	gate := fmt.Sprintf("gate=%s", TTL)
	if sh != nil {
		gate += ":entity"
	}
	args := []string{cfg.Arbiter, "--listen", p.Endpoint, "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", mport),
		"--etcd-endpoints", strings.Join(endpoints, ","), "--svid-cert", id.Cert, "--svid-key", id.Key,
		"--bundle", p.Bundle, "--trust-domain", p.TrustDomain, "--class", gate, "--op-timeout", "1s"}
	if sh != nil {
		args = append(args, sh.flags()...)
	}
	a, err := start(args, nil, filepath.Join(cfg.Dir, fmt.Sprintf("arbiter-%d.log", i)))
	if err != nil {
		return nil, err
	}
	// Serving once its port accepts.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", p.Endpoint); err == nil {
			c.Close()
			return a, nil
		}
	}
	a.kill()
	return nil, fmt.Errorf("arbiter %d did not listen on %s", i, p.Endpoint)
}

func createDB(ctx context.Context, pg *resourcetest.Postgres, name string) error {
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+name)
	return err
}

// dropDB removes a history's database once its final records are read.
func dropDB(pg *resourcetest.Postgres, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is a child process that can be killed, stopped and restarted.
type proc struct {
	args, env []string
	log       string
	cmd       *exec.Cmd
	done      chan struct{}
}

func start(args, env []string, log string) (*proc, error) {
	p := &proc{args: args, env: env, log: log}
	return p, p.run()
}

func (p *proc) run() error {
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func(done chan struct{}) { cmd.Wait(); f.Close(); close(done) }(p.done)
	return nil
}

func (p *proc) signal(s syscall.Signal) { p.cmd.Process.Signal(s) }

func (p *proc) kill() {
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Kill()
	<-p.done
}

func (p *proc) restart() { p.run() }

// wait waits for the process to exit by itself, killing it after d.
func (p *proc) wait(d time.Duration) {
	select {
	case <-p.done:
	case <-time.After(d):
		p.kill()
	}
}
