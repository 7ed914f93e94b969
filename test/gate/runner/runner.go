// Package runner runs one release-gate history: a 3-member etcd cluster of
// processes behind fault proxies (with two one-member entity shards for
// the shard-add fault), two arbiter processes that verify operators'
// sign-in at a development OpenID provider the runner starts (so epoch
// advances and force-releases are two-person: operators.go), a PostgreSQL
// database with the fenced records, and client processes running the
// traffic loop, while one fault is injected and healed. It returns the
// checker's report on the recorded history.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
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
	"github.com/lockplane/lockplane/services/childproc"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/profile"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devca"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/resourcetest"
	"github.com/lockplane/lockplane/test/gate/checker"
	"github.com/lockplane/lockplane/test/gate/cluster"
	"github.com/lockplane/lockplane/test/gate/faultproxy"
	ghistory "github.com/lockplane/lockplane/test/gate/history"
	"github.com/lockplane/lockplane/test/gate/traffic"
	"github.com/lockplane/lockplane/test/procflags"
	clientv3 "go.etcd.io/etcd/client/v3"
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
	// EpochDelete deletes the coord cluster's epoch record with a direct
	// etcd client, as an operator's mistake or a rogue tool would. Tokens
	// must not go back to a lower epoch; the heal is the operator's
	// advance.
	EpochDelete Fault = "epoch-delete"
	// ShardWipe rebuilds an entity shard empty behind the arbiters' backs
	// (members stopped, data removed, a new cluster with a new cluster ID
	// on the same endpoints) under traffic on the entity tier. The heal
	// is the operator's advance of that shard.
	ShardWipe Fault = "shard-wipe"
	// ShardRoll restarts an arbiter without the shard being added while
	// holders are on it (then with it): a keepalive it answers OK must
	// not outlive a shard lease it does not renew.
	ShardRoll Fault = "shard-roll"
	// HandoffDeadline runs every client on one hot key with short waits
	// whose deadlines end as a release hands the key over: no grant may
	// be made to a waiter whose caller was told it got none.
	HandoffDeadline Fault = "handoff-deadline"
	// ForceRelease: two operators (alice requests, bob approves, signed in
	// at an OpenID provider the runner starts) force-release a hold of the
	// gate class that a client still uses (force.go). The holder must
	// hear (OnFence, CanStart false) and the fence must refuse its late
	// write; the overlap of its window with the next holder's is excused
	// for that grant alone (checker.Overlaps).
	ForceRelease Fault = "force-release"
	// Restore replaces the entity shard every key is on with a restore of
	// a snapshot taken earlier in the history (restore.go): a new cluster
	// ID, its revisions back at the snapshot's. No grant may be made
	// while it is sealed, and no token after the operators' advance may
	// be below one granted before the restore.
	Restore Fault = "restore"
	// LeaderPause freezes the coord leader (SIGSTOP) past an election and
	// lets it go on at the heal with its memory intact: the grant and
	// release Txns it had taken commit late or never, after callers gave
	// up on them and asked again, and it comes back believing for a moment
	// that it leads, with its leases.
	LeaderPause Fault = "leader-pause"
)

// Faults lists every kind, in the order profiles cycle through them.
var Faults = []Fault{MemberKill, LeaderKill, LeaderIsolate, MinorityPartition, MajorityPartition, PeerDelay, ArbiterKill, ArbiterStop, HolderStop, ShardAdd,
	EpochDelete, ShardWipe, ShardRoll, HandoffDeadline, ForceRelease, Restore, LeaderPause, Steal, StealShard, TwoTier, LiveAdvance, NoSpace}

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

// Replicas is how many clients share an identity, as the replicas of one
// deployment share a SPIFFE ID: clients Replicas*k to Replicas*k+Replicas-1
// are identity k, each its own lockclient.Client (its own instance), so
// the service must treat them as contenders, not as one holder.
const Replicas = 2

// identityOf is the index of client i's identity.
func identityOf(i int) int { return i / Replicas }

// clientsOf lists the clients of identity k, of n clients in all.
func clientsOf(k, n int) []int {
	var out []int
	for i := k * Replicas; i < min(n, (k+1)*Replicas); i++ {
		out = append(out, i)
	}
	return out
}

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
	// GroupCommit is the arbiters' --group-commit (0: their default).
	GroupCommit int
	// Deaf makes clients blind to the service's report that a hold ended
	// (traffic.Config.Deaf): a holder that is not told, the negative
	// control of the force-release fault. Tests only.
	Deaf bool
}

// Outcome is a checked history.
type Outcome struct {
	Fault   Fault
	Seed    uint64
	Report  *checker.Report
	Ops     []ghistory.Op
	Final   map[string][]string
	Started time.Time
	// Holds are the holds found in etcd once every client had exited.
	Holds []checker.Hold
}

// history is one history's running state.
type history struct {
	cfg   Config
	rng   *rand.Rand
	cl    *cluster.Cluster
	coord *clientv3.Client
	// ops are the operators: their OpenID provider, sign-in and history.
	ops      *operators
	sh       *shards
	profiles []string
	keys     []string
	arbiters []*proc
	clients  []*proc
	// paths are the clients' history files, by client.
	paths []string
	// epochs are the epochs in force: those the runner bootstrapped and
	// those its operator advances and shard adds made.
	epochs []uint32
	// clusterOf names the cluster each key stays on ("" for a key that
	// moves), for the token floor.
	clusterOf map[string]string
	faultAt   int64
	// healedAt is when epoch-delete's, shard-wipe's or restore's operator advance
	// returned.
	healedAt int64
	// sealedFrom and sealedTo bound when epoch-delete's, shard-wipe's or restore's
	// cluster must grant nothing new: from the fault's end to the start of
	// the operator's advance.
	sealedFrom, sealedTo int64
	// restore is the restore fault's snapshot.
	restore *restored
	// endpoints are the coord cluster's endpoints as the arbiters reach
	// them: through the nospace fault's proxies in its histories.
	endpoints []string
	// nospace are the nospace fault's proxies.
	nospace []*faultproxy.NoSpace
	// advancedAt is when the live-advance fault's approval returned,
	// advancedTo the new epoch.
	advancedAt int64
	advancedTo uint32
}

// Run runs and checks one history.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	h := &history{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 7)), clusterOf: map[string]string{}}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	cl, err := cluster.Start(ctx, cluster.Config{Bin: cfg.Etcd, Dir: filepath.Join(cfg.Dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("etcd cluster: %w", err)
	}
	defer cl.Close()
	h.cl = cl
	if h.coord, err = cl.Client(); err != nil {
		return nil, err
	}
	defer h.coord.Close()
	h.endpoints = cl.Endpoints()
	if cfg.Fault == NoSpace {
		if h.endpoints, err = h.noSpaceProxies(h.endpoints); err != nil {
			return nil, fmt.Errorf("nospace proxies: %w", err)
		}
		defer h.closeNoSpace()
	}

	if h.profiles, err = writeTrust(cfg.Dir, cfg.Clients); err != nil {
		return nil, err
	}
	h.keys = gateKeys(cfg.Keys)
	// Every history's arbiters verify operators' sign-in, so an epoch
	// advance or a force-release takes two of them (ADR-03, ADR-20).
	if h.ops, err = startOperators(cfg.Dir); err != nil {
		return nil, err
	}
	defer h.ops.close()
	if cfg.Fault.operators() {
		if err := h.ops.signIn(ctx, requester, approver); err != nil {
			return nil, fmt.Errorf("operators: %w", err)
		}
	}
	if cfg.Fault.entity() {
		if h.sh, err = startShards(ctx, cfg); err != nil {
			return nil, err
		}
		defer h.sh.close()
	}
	var shardClients map[string]*clientv3.Client
	if h.sh != nil {
		shardClients = h.sh.etcd
	}
	startEpochs, err := bootstrapEpochs(ctx, h.coord, shardClients)
	if err != nil {
		return nil, fmt.Errorf("bootstrap epochs: %w", err)
	}
	for _, e := range startEpochs {
		h.addEpoch(e)
	}
	if h.sh != nil {
		if err := h.sh.init(ctx, h.coord, []string{shardFrom}); err != nil {
			return nil, err
		}
		h.keys = h.sh.keys(cfg.Keys)
		for _, k := range h.keys {
			h.clusterOf[k] = h.sh.stays(k)
			if !cfg.Fault.adds() {
				h.clusterOf[k] = shardFrom // no shard is added: every key stays
			}
		}
	} else {
		for _, k := range h.keys {
			h.clusterOf[k] = "coord"
		}
	}
	defer func() {
		for _, a := range h.arbiters {
			a.Kill()
		}
	}()
	for i := range 2 {
		a, err := startArbiter(cfg, h.profiles[i], h.endpoints, h.arbiterFlags(h.sh.names()...), i)
		if err != nil {
			return nil, err
		}
		h.arbiters = append(h.arbiters, a)
	}

	db := fmt.Sprintf("gate_%d_%d", time.Now().UnixNano(), cfg.Seed)
	if err := createDB(ctx, cfg.Postgres, db); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	defer dropDB(cfg.Postgres, db)
	if err := traffic.Prepare(ctx, cfg.Postgres.URL(db), h.keys); err != nil {
		return nil, fmt.Errorf("prepare records: %w", err)
	}

	started := time.Now()
	duration := cfg.Fault.duration(cfg.Duration)
	until := ghistory.Now() + int64(duration)
	paths := []string{h.ops.path}
	for i := range cfg.Clients {
		tc := traffic.Config{Client: i, Profile: h.profiles[i%2], Identity: fmt.Sprintf("c%d", identityOf(i)), Class: "gate",
			Keys: h.keys, Postgres: cfg.Postgres.URL(db), History: filepath.Join(cfg.Dir, fmt.Sprintf("client-%d.jsonl", i)),
			Until: until, Seed: cfg.Seed, Unsafe: cfg.Unsafe, Locker: cfg.Locker, Etcd: cl.Endpoints(), TTL: TTL, Deaf: cfg.Deaf}
		switch cfg.Fault {
		case HandoffDeadline:
			tc.Handoff = HandoffPeriod
		case ShardRoll:
			// Grants on the added shard (above the source's epoch) are
			// held past a lease's lapse.
			tc.LongHold, tc.LongHoldAbove = RollHold, startEpochs[shardFrom]
		case ForceRelease:
			tc.Linger = ForceLinger
		}
		h.workload(&tc)
		paths = append(paths, tc.History)
		c, err := startClient(cfg, tc, filepath.Join(cfg.Dir, fmt.Sprintf("client-%d.log", i)))
		if err != nil {
			return nil, err
		}
		h.clients = append(h.clients, c)
		if cfg.Fault.steals() && i == cfg.Clients-1 {
			t, path, err := h.startThief(tc)
			if err != nil {
				return nil, err
			}
			h.clients = append(h.clients, t)
			paths = append(paths, path)
		}
	}
	h.paths = paths

	// Inject at a quarter of the run, heal at two thirds. The restore
	// fault's snapshot is taken at an eighth, so the grants between it
	// and the fault are ones the restored shard could issue again.
	if cfg.Fault == Restore {
		sleep(ctx, duration/8)
		h.snapshotShard(ctx)
		sleep(ctx, duration/4-duration/8)
	} else {
		sleep(ctx, duration/4)
	}
	h.faultAt = ghistory.Now()
	heal := h.inject(ctx)
	// Heal at two thirds of the run, and never sooner than a second after
	// the fault is in place: an injection that is slow on a loaded machine
	// (a shard restored or wiped) must still leave time sealed before the
	// heal, and time after it.
	sleep(ctx, max(time.Until(started.Add(duration*2/3)), time.Second))
	healErr := heal()
	cl.Heal()

	for _, c := range h.clients {
		c.Wait(duration + 30*time.Second)
	}
	atExit, lapsed, err := h.stranded(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the holds left: %w", err)
	}
	final, err := traffic.Final(ctx, cfg.Postgres.URL(db))
	if err != nil {
		return nil, fmt.Errorf("read final records: %w", err)
	}
	ops, err := ghistory.Load(paths...)
	if err != nil {
		return nil, err
	}
	if healErr != nil {
		return nil, fmt.Errorf("%s: heal: %w", cfg.Fault, healErr)
	}
	if h.sh != nil && cfg.Fault.adds() {
		if err := h.sh.err(); err != nil {
			return nil, err
		}
		h.addEpoch(h.sh.addedEpoch)
		// The added shard's epoch is advanced above the source's.
		if !grantedIn(ops, h.sh.addedEpoch) {
			return nil, fmt.Errorf("%s: no grant on the added shard (epoch %d): the history proves nothing about the move", cfg.Fault, h.sh.addedEpoch)
		}
	}
	if cfg.Fault == EpochDelete && !h.grantedAfter(ops, h.healedAt, "coord") {
		return nil, fmt.Errorf("%s: no grant on the coord cluster after the operator's advance: the history proves nothing about its tokens", cfg.Fault)
	}
	if cfg.Fault == ShardWipe && !h.grantedAfter(ops, h.healedAt, shardFrom) {
		return nil, fmt.Errorf("%s: no grant on the wiped shard %s after the heal: the history proves nothing about its tokens", cfg.Fault, shardFrom)
	}
	if cfg.Fault == Restore {
		if !h.grantedAfter(ops, h.healedAt, shardFrom) {
			return nil, fmt.Errorf("%s: no grant on the restored shard %s after the heal: the history proves nothing about its tokens", cfg.Fault, shardFrom)
		}
		if err := h.restoreProves(ops); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Fault, err)
		}
	}
	if cfg.Fault == ForceRelease {
		if err := forceProves(ops); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.Fault, err)
		}
	}
	if err := h.adversaryProves(ops); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Fault, err)
	}
	report := checker.Check(ops, final, h.epochs, time.Minute)
	report.Add(checker.TokenFloor(ops, func(k string) string { return h.clusterOf[k] }, h.faultAt)...)
	switch cfg.Fault {
	case EpochDelete:
		report.Add(checker.GrantedWhileSealed(ops, func(k string) bool { return h.clusterOf[k] == "coord" }, h.sealedFrom, h.sealedTo)...)
	case ShardWipe, Restore:
		report.Add(checker.GrantedWhileSealed(ops, func(k string) bool { return h.clusterOf[k] == shardFrom }, h.sealedFrom, h.sealedTo)...)
	}
	report.Add(checker.ForceLearned(ops, ForceGrace)...)
	report.Add(h.adversaryChecks(ops)...)
	report.Add(checker.Stranded(ops, atExit, lapsed)...)
	return &Outcome{Fault: cfg.Fault, Seed: cfg.Seed, Ops: ops, Final: final, Started: started, Report: report,
		Holds: atExit}, nil
}

// The handoff-deadline workload's grid period and the shard-roll
// workload's hold on the added shard: past a restart, a lease's lapse and
// the next waiter's grant.
const (
	HandoffPeriod = 200 * time.Millisecond
	RollHold      = 6 * time.Second
)

// entity reports whether the fault runs the gate class on the entity tier
// over etcd process shards.
func (f Fault) entity() bool { return f.adds() || f == Restore || f == TwoTier || f == StealShard }

// replaces reports whether the fault replaces the keys' shard with a new
// cluster (wiped or restored) that operators must advance before it grants.
func (f Fault) replaces() bool { return f == ShardWipe || f == Restore }

// adds reports whether the fault's history adds the second shard.
func (f Fault) adds() bool { return f == ShardAdd || f == ShardWipe || f == ShardRoll }

// operators reports whether the fault needs the operators signed in: an
// epoch advance, a force-release or a shard add, each two-person.
func (f Fault) operators() bool {
	// A shard add is two operators' too (RequestShardAdd, ApproveAction).
	return f == EpochDelete || f == ShardWipe || f == ForceRelease || f == Restore || f == LiveAdvance || f == ShardAdd || f == ShardRoll
}

// duration is the traffic time of a history of f: shard-roll's restart
// must be followed by a lease's lapse and a grant before its heal,
// force-release's grants are kept ForceLinger each, a replaced shard
// must be started again, refuse grants sealed, and grant after its heal,
// and live-advance's quiet period must end with time left to grant.
func (f Fault) duration(d time.Duration) time.Duration {
	switch {
	case f == Restore || f == LiveAdvance:
		// Their advance ends live sessions: grants wait out a quiet
		// period (the longest TTL + 1 s, longer when the advance is slow),
		// and the history must still grant after it.
		return max(d, 12*time.Second) + 6*time.Second
	case f == ShardRoll || f == ForceRelease || f.replaces():
		return max(d, 8*time.Second) + 4*time.Second
	}
	return d
}

// arbiterFlags are an arbiter's flags beyond the common ones: the shards
// it serves and the operators' sign-in.
func (h *history) arbiterFlags(shards ...string) procflags.Arbiter {
	return procflags.Arbiter{Shards: h.sh.procShards(shards...), Extra: h.ops.flags()}
}

func (h *history) addEpoch(e uint32) {
	if e != 0 && !slices.Contains(h.epochs, e) {
		h.epochs = append(h.epochs, e)
	}
}

// StartEpoch is the lowest epoch a history's clusters start at: above 1,
// so an epoch record recreated from nothing (at 1) shows as tokens going
// back.
const StartEpoch = 3

// bootstrapEpochs takes the step lockplane up takes before any arbiter
// starts: it anchors the coord cluster's epoch allocation below StartEpoch
// and gives the coord cluster and every shard an epoch allocated from it.
// It returns each cluster's epoch ("coord" and the shards' names).
func bootstrapEpochs(ctx context.Context, coord *clientv3.Client, shards map[string]*clientv3.Client) (map[string]uint32, error) {
	bctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kvs := map[string]clientv3.KV{}
	for name, cl := range shards {
		kvs[name] = cl
	}
	return epoch.BootstrapRegion(bctx, coord, "coord", kvs, StartEpoch-1)
}

// grantedAfter reports whether a key of cluster was granted after t.
func (h *history) grantedAfter(ops []ghistory.Op, t int64, cluster string) bool {
	for _, op := range ops {
		if op.Kind == ghistory.Acquire && op.Result == ghistory.OK && op.Call > t && h.clusterOf[op.Key] == cluster {
			return true
		}
	}
	return false
}

// grantedIn reports whether some grant of ops carries epoch e.
func grantedIn(ops []ghistory.Op, e uint32) bool {
	for _, op := range ops {
		if op.Kind == ghistory.Acquire && op.Result == ghistory.OK && token.Token(op.Token).Epoch() == e {
			return true
		}
	}
	return false
}

// inject applies the fault and returns what undoes it.
func (h *history) inject(ctx context.Context) func() error {
	cl, arbiters, clients, rng := h.cl, h.arbiters, h.clients, h.rng
	leader := func() int {
		l, err := cl.Leader(ctx)
		if err != nil {
			return 0
		}
		return l
	}
	none := func() error { return nil }
	switch h.cfg.Fault {
	case MemberKill:
		i := rng.IntN(len(cl.Members))
		cl.Kill(i)
		return func() error { cl.Restart(i); return nil }
	case LeaderKill:
		i := leader()
		cl.Kill(i)
		return func() error { cl.Restart(i); return nil }
	case LeaderIsolate:
		cl.Isolate(leader())
		return none
	case LeaderPause:
		i := leader()
		cl.Pause(i)
		return func() error { return cl.Resume(i) }
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
		return none
	case MajorityPartition:
		// No side has a majority: nothing may be granted or renewed.
		cl.Partition([]int{0}, []int{1}, []int{2})
		return none
	case PeerDelay:
		cl.DelayPeers(time.Duration(20+rng.IntN(60)) * time.Millisecond)
		return none
	case ArbiterKill:
		a := arbiters[rng.IntN(len(arbiters))]
		a.Kill()
		return func() error { a.restart(); return nil }
	case ArbiterStop:
		a := arbiters[rng.IntN(len(arbiters))]
		a.Signal(syscall.SIGSTOP)
		return func() error { a.Signal(syscall.SIGCONT); return nil }
	case HolderStop:
		// A client that holds a key now, most likely mid-work, frozen past
		// the TTL so its lease expires while it is stopped.
		i := h.holderOf(ctx, h.keys)
		if i < 0 {
			i = rng.IntN(len(clients))
		}
		c := clients[i]
		c.Signal(syscall.SIGSTOP)
		return func() error { c.Signal(syscall.SIGCONT); return nil }
	case ShardAdd:
		wait := h.sh.add(ctx, h.twoPersonShardAdd)
		return func() error { wait(); return nil }
	case EpochDelete:
		return h.deleteEpoch(ctx)
	case ShardWipe:
		return h.wipeShard(ctx)
	case Restore:
		return h.restoreShard(ctx)
	case ShardRoll:
		return h.roll(ctx)
	case HandoffDeadline:
		// The fault is the workload's timing: waits that end as releases
		// hand the key over, all history long.
		return none
	case ForceRelease:
		return h.forceRelease(ctx)
	case LiveAdvance:
		return h.liveAdvance(ctx)
	case NoSpace:
		return h.armNoSpace()
	case Steal, StealShard, TwoTier:
		// The fault is the workload: an adversary all history long.
		return none
	}
	return none
}

// deleteEpoch deletes the coord cluster's epoch record straight in etcd.
// The heal is the operator's advance.
func (h *history) deleteEpoch(ctx context.Context) func() error {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := h.coord.Delete(dctx, lockkey.EpochKey)
	h.sealedFrom = ghistory.Now()
	return func() error {
		if err != nil {
			return fmt.Errorf("delete %s: %w", lockkey.EpochKey, err)
		}
		h.sealedTo = ghistory.Now()
		if err := h.operatorAdvance(ctx, ""); err != nil {
			return err
		}
		h.healedAt = ghistory.Now()
		return nil
	}
}

// wipeShard rebuilds the shard every key starts on empty, under traffic.
// The heal is what an operator does: the advance of that shard, the
// region's next map change (adding the second shard), which stamps every
// shard's epoch record with the new map version, and a second look at the
// wiped shard (Status, advancing if it needs it still). A grant routed by
// the map compares the stamp, so a record recreated without one refuses
// until a change stamps it; after that, whatever epoch it holds is served.
func (h *history) wipeShard(ctx context.Context) func() error {
	return h.replaceShard(ctx, "wipe", h.sh.clusters[shardFrom].Wipe, func() error {
		h.sh.add(ctx, h.twoPersonShardAdd)()
		if err := h.sh.err(); err != nil {
			return err
		}
		return h.operatorAdvance(ctx, shardFrom)
	})
}

// replaceShard replaces the shard every key is on with replace (a wipe or
// a restore) under traffic. The shard is sealed from the moment its old
// members are gone: a grant before the advance, even while the new one
// starts, counts. The heal is the operators' advance of that shard, then
// after when set.
func (h *history) replaceShard(ctx context.Context, what string, replace func(context.Context, func()) error, after func() error) func() error {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := replace(rctx, func() { h.sealedFrom = ghistory.Now() })
	return func() error {
		if err != nil {
			return fmt.Errorf("%s shard %s: %w", what, shardFrom, err)
		}
		h.sealedTo = ghistory.Now()
		if err := h.operatorAdvance(ctx, shardFrom); err != nil {
			return err
		}
		h.healedAt = ghistory.Now()
		if after == nil {
			return nil
		}
		return after()
	}
}

// roll adds the second shard and, once it holds keys, restarts the
// arbiter of a client holding one there without that shard (a rolling
// restart with the old shard list), then with it again.
func (h *history) roll(ctx context.Context) func() error {
	added := h.sh.add(ctx, h.twoPersonShardAdd)
	rolled := make(chan struct{})
	var (
		victim   int
		rolledAt time.Time
		rollErr  error
	)
	var moving []string
	for _, k := range h.keys {
		if h.clusterOf[k] == "" {
			moving = append(moving, k)
		}
	}
	go func() {
		defer close(rolled)
		added()
		if h.sh.err() != nil {
			return
		}
		// A holder on the added shard, through the arbiter to restart.
		victim = h.rng.IntN(len(h.arbiters))
		for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
			if i := h.holderOf(ctx, moving); i >= 0 {
				victim = i % 2
				break
			}
		}
		rollErr = h.restartArbiter(victim, shardFrom)
		rolledAt = time.Now()
	}()
	return func() error {
		<-rolled
		if rollErr != nil {
			return rollErr
		}
		if h.sh.err() != nil {
			return nil // Run reports the add's failure
		}
		// Long enough for the holder's shard lease to lapse and the key
		// to be granted again.
		sleep(ctx, time.Until(rolledAt.Add(TTL+3*time.Second)))
		return h.restartArbiter(victim, h.sh.names()...)
	}
}

// restartArbiter kills arbiter i and starts it again with the given
// shards, on the same address.
func (h *history) restartArbiter(i int, shards ...string) error {
	h.arbiters[i].Kill()
	a, err := startArbiter(h.cfg, h.profiles[i], h.endpoints, h.arbiterFlags(shards...), i)
	if err != nil {
		return err
	}
	h.arbiters[i] = a
	return nil
}

// operatorAdvance is what operators do about a cluster whose epoch record
// is missing or sealed: Status, then the two-person advance (alice
// requests, bob approves) from no record (expected 0) or from the sealed
// epoch; nothing when neither. On a coord cluster with no allocation
// record it names the highest epoch served (above). The new epoch is in
// force from then on, and so is the epoch Status reports unsealed (an
// advance whose answer was lost).
func (h *history) operatorAdvance(ctx context.Context, cluster string) error {
	c, err := operatorClient(h.profiles[0])
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	admin := adminv1.NewAdminServiceClient(c.Conn())
	var last error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(500 * time.Millisecond) {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := admin.Status(actx, &adminv1.StatusRequest{Cluster: cluster})
		cancel()
		if err == nil && !st.GetQuorum() {
			err = errors.New("status: no quorum")
		}
		if err != nil {
			last = err
			continue
		}
		var expected uint32
		switch {
		case st.GetEpochMissing():
		case st.GetSealed():
			expected = st.GetEpoch()
		default:
			h.addEpoch(st.GetEpoch())
			return nil
		}
		req := &adminv1.AdvanceEpochRequest{ExpectedEpoch: expected, Cluster: cluster, Reason: fmt.Sprintf("gate: %s heal", h.cfg.Fault)}
		if cluster == "" && st.GetHighestAllocated() == 0 {
			// A coord cluster with no allocation record: the operator
			// names the highest epoch the region has served.
			above := slices.Max(h.epochs)
			req.Above = &above
		}
		e, err := h.twoPersonAdvance(ctx, req)
		if err != nil {
			last = err
			continue
		}
		h.addEpoch(e)
		return nil
	}
	return fmt.Errorf("operator advance of cluster %q: %w", cluster, last)
}

// stranded reads the holds left in etcd once every client exited, and
// those still there once every lease could have lapsed: nothing renews a
// lease after its client exits.
func (h *history) stranded(ctx context.Context) (atExit, lapsed []checker.Hold, err error) {
	if atExit, err = h.holds(ctx); err != nil || len(atExit) == 0 {
		return atExit, nil, err
	}
	lapsed = atExit
	for deadline := time.Now().Add(2*TTL + 2*time.Second); len(lapsed) > 0 && time.Now().Before(deadline); {
		sleep(ctx, 500*time.Millisecond)
		if lapsed, err = h.holds(ctx); err != nil {
			return nil, nil, err
		}
	}
	return atExit, lapsed, nil
}

// holds lists the holds on the coord cluster and every shard.
func (h *history) holds(ctx context.Context) ([]checker.Hold, error) {
	clusters := map[string]*clientv3.Client{"coord": h.coord}
	if h.sh != nil {
		maps.Copy(clusters, h.sh.etcd)
	}
	// The hold record's time is the arbiter's wall clock.
	offset := time.Now().UnixNano() - ghistory.Now()
	var out []checker.Hold
	for name, kv := range clusters {
		var resp *clientv3.GetResponse
		var err error
		for try := 0; try < 10; try++ {
			gctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			resp, err = kv.Get(gctx, lockkey.HoldPrefix, clientv3.WithPrefix())
			cancel()
			if err == nil || ctx.Err() != nil {
				break
			}
			sleep(ctx, time.Second)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, e := range resp.Kvs {
			var rec struct {
				Identity string    `json:"identity"`
				Since    time.Time `json:"since"`
			}
			json.Unmarshal(e.Value, &rec)
			hold := checker.Hold{Cluster: name, Key: strings.TrimPrefix(string(e.Key), lockkey.HoldPrefix), Lease: e.Lease}
			var k int
			if _, err := fmt.Sscanf(rec.Identity, clientID+"%d", &k); err == nil {
				hold.Clients = clientsOf(k, h.cfg.Clients)
			}
			if !rec.Since.IsZero() {
				hold.Since = rec.Since.UnixNano() - offset
			}
			out = append(out, hold)
		}
	}
	return out, nil
}

// holderOf names a client that holds one of keys (-1 if none does), from
// the arbiter's Inspect: the holder's session, found among the sessions the
// clients recorded opening. Not its identity, which a client's replica
// shares.
func (h *history) holderOf(ctx context.Context, keys []string) int {
	p, err := profile.Load(h.profiles[0])
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
		r, err := c.Inspect(ictx, k, "gate") // the class picks the key's cluster
		if err != nil || !r.GetHeld() {
			continue
		}
		if i := h.clientOfSession(r.GetHolder().GetSessionId()); i >= 0 {
			return i
		}
	}
	return -1
}

// clientOfSession is the client whose history records opening session, or
// -1: the histories are flushed op by op, so they can be read mid-run.
func (h *history) clientOfSession(session int64) int {
	ops, err := ghistory.Load(h.paths...)
	if err != nil {
		return -1
	}
	for _, op := range ops {
		if op.Kind == ghistory.Session && op.Session == session {
			return op.Client
		}
	}
	return -1
}

// clientID prefixes a client identity's index in its SPIFFE ID.
const clientID = "spiffe://gate.lockplane.test/ns/gate/sa/client-"

// writeTrust writes a dev CA, SVIDs for the arbiters and each client
// identity (one per Replicas clients), and one profile per arbiter.
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
	// The operators who sign in (alice, bob) connect each with an
	// operator SVID of their own; "operator" reads status.
	names := map[string]string{"arbiter": "/arbiter", "operator": "/operator/gate", requester: "/operator/" + requester, approver: "/operator/" + approver,
		thiefIdentity: "/ns/gate/sa/" + thiefIdentity}
	for k := range identityOf(clients-1) + 1 {
		names[fmt.Sprintf("c%d", k)] = fmt.Sprintf("/ns/gate/sa/client-%d", k)
	}
	for n, p := range names {
		if _, err := ca.WriteSVID(filepath.Join(pki, n), p, 24*time.Hour); err != nil {
			return nil, err
		}
		ids[n] = profile.Identity{SPIFFEID: "spiffe://gate.lockplane.test" + p, Cert: filepath.Join(pki, n, "svid.pem"), Key: filepath.Join(pki, n, "key.pem")}
	}
	var paths []string
	ports, err := resourcetest.FreePorts(2)
	if err != nil {
		return nil, err
	}
	for i, port := range ports {
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

// startArbiter starts arbiter i with f's shards and extra flags and the
// gate's common ones.
func startArbiter(cfg Config, profilePath string, endpoints []string, f procflags.Arbiter, i int) (*proc, error) {
	p, err := profile.Load(profilePath)
	if err != nil {
		return nil, err
	}
	mport, err := resourcetest.FreePort()
	if err != nil {
		return nil, err
	}
	id := p.Identities["arbiter"]
	f.Listen, f.MetricsListen = p.Endpoint, fmt.Sprintf("127.0.0.1:%d", mport)
	f.EtcdEndpoints, f.SVIDCert, f.SVIDKey, f.Bundle, f.TrustDomain = endpoints, id.Cert, id.Key, p.Bundle, p.TrustDomain
	f.OpTimeout, f.AllowAnyWorkload = time.Second, true
	// The gate's clusters run without etcd users. Operators sign in
	// (Extra: --oidc-*), so epoch advances are two-person.
	f.EtcdWithoutAuth, f.Classes, f.GroupCommit = true, classes(cfg), cfg.GroupCommit
	a, err := start(append([]string{cfg.Arbiter}, f.Args()...), nil, filepath.Join(cfg.Dir, fmt.Sprintf("arbiter-%d.log", i)))
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
	a.Kill()
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

// proc is a child process that can be killed, stopped and restarted: its
// command and log, and the current run.
type proc struct {
	args, env []string
	log       string
	*childproc.Process
}

// startClient starts a client process running tc.
func startClient(cfg Config, tc traffic.Config, log string) (*proc, error) {
	env, _ := json.Marshal(tc)
	return start(cfg.Client, []string{ClientEnv + "=" + string(env)}, log)
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
	// SurviveParent: as the gate's children always ran; its cleanups kill
	// them.
	lp, err := childproc.Start(cmd, childproc.SurviveParent())
	f.Close() // the child has its own descriptor
	if err != nil {
		return err
	}
	p.Process = lp
	return nil
}

func (p *proc) restart() { p.run() }

// operatorClient dials the arbiter of a history's profile as its operator.
func operatorClient(profilePath string) (*lockclient.Client, error) {
	p, err := profile.Load(profilePath)
	if err != nil {
		return nil, err
	}
	return lockclient.DialProfile(p, "operator")
}
