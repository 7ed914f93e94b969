package runner

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/test/gate/checker"
	"github.com/lockplane/lockplane/test/gate/faultproxy"
	ghistory "github.com/lockplane/lockplane/test/gate/history"
	"github.com/lockplane/lockplane/test/gate/traffic"
)

// The adversarial faults: clients and operators that are not polite.
// Each broke mutual exclusion on an arbiter the polite gate passed
// (issue 31), and each must find its hole again if it comes back. Any new
// write path of the service gets its adversary here in the same change
// (CONTRIBUTING.md).
//
//   - steal: a thief identity ends other identities' holds with their
//     session and the token it learns through the public API (Inspect,
//     Admin.Status, ValidateToken), then takes the key (traffic's thief).
//     Holders linger, CanStart sampled, so a stolen hold shows as two
//     holders' work at once. Expected answers of a correct service:
//     PERMISSION_DENIED / SESSION_NOT_OWNED, and a ValidateToken that
//     tells a non-holder no revisions.
//   - steal-shard: steal with the gate class on the entity tier, where a
//     release goes to the key's shard through a session's shard lease
//     (cached by the arbiter): the ownership check on that path too.
//   - two-tier: the gate class on the entity tier and a second class,
//     gatecoord, on coord, both reaching the same keys; every client asks
//     for each key through both. Expected: WRONG_CLASS for the class
//     that is not the key's.
//   - live-advance: the operators' two-person epoch advance of the coord
//     cluster while clients hold keys there (lingering, CanStart
//     sampled). The old holders must stop believing within a TTL and
//     before anyone is granted their keys. Expected: SESSION_EXPIRED for
//     sessions of the old epoch, EPOCH_CHANGED for grants in the quiet
//     period after it.
//   - nospace: the arbiters reach etcd through gRPC proxies that answer
//     one applied grant Txn in NoSpaceEvery with etcd's NOSPACE error
//     (faultproxy.NoSpace). Clients probe after each definite refusal
//     (traffic.Config.Probe): a refused session found holding the key is
//     a hold nobody knows of (orphaned-grant). Expected: an answer of
//     unknown outcome (the client's cleanup ends the hold) or a refusal
//     after the hold is removed.
const (
	Steal       Fault = "steal"
	StealShard  Fault = "steal-shard"
	TwoTier     Fault = "two-tier"
	LiveAdvance Fault = "live-advance"
	NoSpace     Fault = "nospace"
)

// AdversaryLinger is how long the steal and live-advance workloads keep
// each grant after its write, sampling CanStart: a holder still at work
// when its hold is stolen or advanced away.
const AdversaryLinger = 3 * time.Second

// NoSpaceEvery: one applied grant Txn in this many is answered NOSPACE
// while the nospace fault is in place.
const NoSpaceEvery = 3

// CoordClass is the two-tier fault's second class, on the coord tier.
const CoordClass = "gatecoord"

// thiefIdentity is the steal fault's adversary's identity: its own, so
// every hold it ends is another identity's.
const thiefIdentity = "thief"

// steals reports whether the fault's history runs the thief.
func (f Fault) steals() bool { return f == Steal || f == StealShard }

// workload sets the adversarial faults' client modes on tc.
func (h *history) workload(tc *traffic.Config) {
	switch h.cfg.Fault {
	case Steal, StealShard, LiveAdvance:
		tc.Linger = AdversaryLinger
	case TwoTier:
		tc.Classes = []string{"gate", CoordClass}
	case NoSpace:
		tc.Probe = true
	}
}

// startThief starts the steal faults' adversary: the client after the
// workload's clients, identity thiefIdentity, its releases tried through
// every arbiter.
func (h *history) startThief(base traffic.Config) (*proc, string, error) {
	tc := base
	tc.Client, tc.Identity, tc.Thief = h.cfg.Clients, thiefIdentity, true
	for _, p := range h.profiles {
		if p != tc.Profile {
			tc.ThiefVia = append(tc.ThiefVia, p)
		}
	}
	tc.Linger = 0
	tc.History = filepath.Join(h.cfg.Dir, "client-thief.jsonl")
	p, err := startClient(h.cfg, tc, filepath.Join(h.cfg.Dir, "client-thief.log"))
	return p, tc.History, err
}

// classes are the arbiter's --class values: the gate class (on the
// entity tier for the shard faults) and, for two-tier, gatecoord on coord
// over the same keys. An arbiter that routes keys by class prefixes is
// given the gate class's prefix, so the keys are the gate class's and
// gatecoord serves none of them.
func classes(cfg Config) []string {
	gate := fmt.Sprintf("gate=%s", TTL)
	if cfg.Fault.entity() {
		gate += ":entity"
		if prefixes(cfg.Arbiter) {
			gate += ":gate/"
		}
	}
	out := []string{gate}
	switch cfg.Fault {
	case TwoTier:
		out = append(out, fmt.Sprintf("%s=%s", CoordClass, TTL))
	case LiveAdvance:
		// An advance's quiet period is the longest class TTL: the default
		// class's too, so it is the gate's, and the history sees grants
		// after it.
		out = append(out, fmt.Sprintf("%s=%s", class.DefaultName, TTL))
	}
	return out
}

// prefixes reports whether the arbiter's --class takes key prefixes
// (NAME=TTL[:TIER[:PREFIX,...]]), from its usage: an arbiter that routes
// keys by class refuses an entity class without them, and an older one
// refuses them, so the gate can run against either (to show an adversary
// finding the hole in an old build).
func prefixes(arbiter string) bool {
	if v, ok := takesPrefixes.Load(arbiter); ok {
		return v.(bool)
	}
	out, _ := exec.Command(arbiter, "-h").CombinedOutput()
	v := strings.Contains(string(out), "[:PREFIX")
	takesPrefixes.Store(arbiter, v)
	return v
}

var takesPrefixes sync.Map

// classCluster names the cluster a class's grants live on, for
// checker.OneCluster: two-tier's two classes, on an arbiter that lets the
// request's class pick.
func classCluster(class string) string {
	switch class {
	case "gate":
		return shardFrom
	case CoordClass:
		return "coord"
	}
	return ""
}

// noSpaceProxies puts a faultproxy.NoSpace in front of each etcd endpoint
// and returns the proxies' endpoints, which the arbiters use.
func (h *history) noSpaceProxies(endpoints []string) ([]string, error) {
	var out []string
	for _, ep := range endpoints {
		p, err := faultproxy.NewNoSpace("127.0.0.1:0", strings.TrimPrefix(ep, "http://"), lockkey.HoldPrefix)
		if err != nil {
			h.closeNoSpace()
			return nil, err
		}
		h.nospace = append(h.nospace, p)
		out = append(out, "http://"+p.Addr())
	}
	return out, nil
}

func (h *history) closeNoSpace() {
	for _, p := range h.nospace {
		p.Close()
	}
}

// armNoSpace is the nospace fault: applied grants answered NOSPACE until
// the heal.
func (h *history) armNoSpace() func() error {
	for _, p := range h.nospace {
		p.Arm(NoSpaceEvery)
	}
	return func() error {
		for _, p := range h.nospace {
			p.Arm(0)
		}
		return nil
	}
}

// injected counts the applied grants answered NOSPACE.
func (h *history) injected() int {
	n := 0
	for _, p := range h.nospace {
		n += p.Injected()
	}
	return n
}

// liveAdvance is the live-advance fault: once a client holds a key, the
// operators advance the coord cluster's epoch, live and unsealed, as
// lockctl epoch advance does. The heal waits for its outcome.
func (h *history) liveAdvance(ctx context.Context) func() error {
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(100 * time.Millisecond) {
			if h.holderOf(ctx, h.keys) >= 0 {
				break
			}
		}
		err = h.advanceLive(ctx)
	}()
	return func() error { <-done; return err }
}

// advanceLive reads the coord cluster's epoch and advances it from there.
func (h *history) advanceLive(ctx context.Context) error {
	c, err := operatorClient(h.profiles[0])
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	admin := adminv1.NewAdminServiceClient(c.Conn())
	var last error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(300 * time.Millisecond) {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		st, err := admin.Status(sctx, &adminv1.StatusRequest{})
		cancel()
		if err == nil && (!st.GetQuorum() || st.GetSealed() || st.GetEpochMissing()) {
			err = fmt.Errorf("status: quorum %t, sealed %t, epoch missing %t", st.GetQuorum(), st.GetSealed(), st.GetEpochMissing())
		}
		if err != nil {
			last = err
			continue
		}
		e, err := h.twoPersonAdvance(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: st.GetEpoch(), Reason: "gate: live-advance"})
		if err != nil {
			last = err
			continue
		}
		h.advancedAt, h.advancedTo = ghistory.Now(), e
		h.addEpoch(e)
		return nil
	}
	return fmt.Errorf("live advance of the coord cluster: %w", last)
}

// adversaryProves refuses a history whose adversary never acted: it would
// prove nothing about its hole.
func (h *history) adversaryProves(ops []ghistory.Op) error {
	count := func(kind ghistory.Kind) int {
		n := 0
		for _, op := range ops {
			if op.Kind == kind {
				n++
			}
		}
		return n
	}
	switch h.cfg.Fault {
	case Steal, StealShard:
		if count(ghistory.Steal) == 0 {
			return errors.New("the thief tried no release of another identity's hold")
		}
	case TwoTier:
		classes := map[string]bool{}
		for _, op := range ops {
			if op.Kind == ghistory.Acquire {
				classes[op.Class] = true
			}
		}
		if !classes["gate"] || !classes[CoordClass] {
			return fmt.Errorf("the keys were not asked for through both classes (%v)", classes)
		}
	case LiveAdvance:
		if h.advancedAt == 0 {
			return errors.New("the epoch was not advanced")
		}
		if !grantedIn(ops, h.advancedTo) {
			return fmt.Errorf("no grant in the advanced epoch %d: the history proves nothing about who holds after the advance", h.advancedTo)
		}
	case NoSpace:
		if h.injected() == 0 {
			return errors.New("no applied grant was answered NOSPACE")
		}
	}
	return nil
}

// adversaryChecks are the adversarial faults' checks beyond every
// history's.
func (h *history) adversaryChecks(ops []ghistory.Op) []checker.Violation {
	vs := checker.ForeignRelease(ops)
	switch h.cfg.Fault {
	case TwoTier:
		vs = append(vs, checker.OneCluster(ops, classCluster)...)
	case LiveAdvance:
		vs = append(vs, checker.AdvanceLearned(ops, func(k string) bool { return h.clusterOf[k] == "coord" }, h.advancedTo, h.advancedAt, TTL)...)
	}
	return vs
}
