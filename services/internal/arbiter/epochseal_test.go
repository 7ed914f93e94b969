package arbiter_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// sealCase is a cluster whose epoch record is lost while it serves: the
// coord cluster, or an entity shard behind a Router.
type sealCase struct {
	name    string
	cluster string // "" for the coord cluster
	class   string
	env     func(*testing.T) *devenv.Env
	etcd    func(*devenv.Env) *clientv3.Client
}

var sealCases = []sealCase{
	{name: "coord", class: "", env: func(t *testing.T) *devenv.Env { return devenvtest.Start(t, devenv.Options{Classes: quietClasses()}) },
		etcd: func(e *devenv.Env) *clientv3.Client { return e.Etcd }},
	{name: "shard", cluster: "a", class: "entity", env: func(t *testing.T) *devenv.Env {
		return devenvtest.Start(t, devenv.Options{Shards: []string{"a"}, Classes: quietClasses(
			class.Class{Name: "entity", TTL: devenvtest.Fast.TTL, Tier: class.TierEntity, Prefixes: []string{"team-a/"}})})
	}, etcd: func(e *devenv.Env) *clientv3.Client { return e.ShardEtcd["a"] }},
}

// quietClasses are the classes of a test that advances a cluster with
// live sessions: the default and Fast, both of Fast's TTL, and extra, so
// the quiet period the advance keeps (the registry's longest TTL plus a
// second) lasts a few seconds.
func quietClasses(extra ...class.Class) class.Registry {
	def := class.Class{Name: class.DefaultName, TTL: devenvtest.Fast.TTL, Tier: class.TierCoord}
	return class.NewStatic(append([]class.Class{def, devenvtest.Fast}, extra...)...)
}

// waitOutTheQuiet waits out the quiet period of the advance just made on
// cluster cl. While it lasts, a grant of key on s is refused UNAVAILABLE /
// EPOCH_CHANGED, saying when grants resume (retry_after); the wait is that
// retry_after. live says a session certainly lived as the advance
// committed, so the record must carry a quiet period; otherwise a record
// without one (no session lived) is waited for by nothing.
func waitOutTheQuiet(t *testing.T, cl *clientv3.Client, s *lockclient.Session, key string, live bool) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	st, _, err := epoch.Read(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if st.QuietUntil.IsZero() {
		if live {
			t.Fatalf("the advance to epoch %d ended a live session but keeps no quiet period", st.Epoch)
		}
		return
	}
	h, err := s.TryLock(ctx, key, noFence)
	if err == nil {
		// Only if the test was slower than the quiet period.
		if at := time.Now(); at.Before(st.QuietUntil) {
			t.Fatalf("%s granted at %s, during the quiet period of the advance to epoch %d (until %s)", key, at, st.Epoch, st.QuietUntil)
		}
		h.Release(ctx)
		return
	}
	wantReason(t, err, lockv1.ErrorReason_EPOCH_CHANGED)
	_, meta := reason.Info(err)
	wait, perr := time.ParseDuration(meta["retry_after"])
	if status.Code(err) != codes.Unavailable || perr != nil || wait <= 0 || wait > st.QuietUntil.Sub(st.Since)+time.Millisecond {
		t.Fatalf("the quiet period's refusal: %v (retry_after %q): want UNAVAILABLE and a retry_after within the quiet period of %s",
			err, meta["retry_after"], st.QuietUntil.Sub(st.Since))
	}
	select { // the event is the quiet period's end, a time
	case <-time.After(wait):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
}

// grantAll takes n fresh keys on s and returns the highest token.
func grantAll(t *testing.T, s *lockclient.Session, prefix string, n int) token.Token {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	var high token.Token
	for i := range n {
		h, err := s.TryLock(ctx, fmt.Sprintf("%s/%d", prefix, i), noFence)
		if err != nil {
			t.Fatal(err)
		}
		high = max(high, h.Token())
	}
	return high
}

// tryLockRetrying is TryLock retried on EPOCH_CHANGED, as callers do, so a
// record recreated behind the first attempt would be granted under.
func tryLockRetrying(t *testing.T, s *lockclient.Session, key string) (token.Token, error) {
	t.Helper()
	ctx := ctxT(t, 30*time.Second)
	// EPOCH_CHANGED: the cache caught up with the record; NO_QUORUM: a
	// cluster just rebuilt may still be electing its leader.
	for range 10 {
		h, err := s.TryLock(ctx, key, noFence)
		if err == nil {
			return h.Token(), nil
		}
		if r := reason.Of(err); r != lockv1.ErrorReason_EPOCH_CHANGED && r != lockv1.ErrorReason_NO_QUORUM {
			return 0, err
		}
	}
	return 0, fmt.Errorf("EPOCH_CHANGED or NO_QUORUM ten times")
}

// wantSealedNoRecord checks err is SEALED for a missing record, naming the
// way out.
func wantSealedNoRecord(t *testing.T, err error, tok token.Token) {
	t.Helper()
	if err == nil {
		t.Fatalf("granted epoch %d revision %d with no epoch record: the cluster recreated one instead of sealing", tok.Epoch(), tok.Revision())
	}
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	if _, meta := reason.Info(err); meta["cause"] != "no_epoch_record" || !strings.Contains(err.Error(), "--expected 0") {
		t.Fatalf("the seal does not say the record is missing (cause %q) and what ends it: %v", meta["cause"], err)
	}
}

// A deleted epoch record seals its cluster: no grant until an operator's
// advance, whose epoch comes from the coord cluster's allocation, so the
// next token exceeds every token issued before. An arbiter that recreated
// the record at epoch 1 would issue tokens below those.
func TestADeletedEpochRecordSealsUntilTheAdvance(t *testing.T) {
	for _, tc := range sealCases {
		t.Run(tc.name, func(t *testing.T) {
			env := tc.env(t)
			ctx := ctxT(t, time.Minute)
			admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
			// Start above epoch 1, so a record recreated at 1 regresses.
			st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: tc.cluster})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: tc.cluster, ExpectedEpoch: st.GetEpoch(), Reason: "test"}); err != nil {
				t.Fatal(err)
			}
			demo := devenvtest.Client(t, env, "demo")
			s := devenvtest.Session(t, demo, tc.class)
			high := grantAll(t, s, "team-a/before", 5)

			if _, err := tc.etcd(env).Delete(ctx, lockkey.EpochKey); err != nil {
				t.Fatal(err)
			}
			got, err := tryLockRetrying(t, s, "team-a/after/0")
			wantSealedNoRecord(t, err, got)
			// A restarted arbiter reads the cluster afresh (where the old
			// one recreated the record): still sealed, still no record.
			env.StopArbiter()
			if err := env.StartArbiter(); err != nil {
				t.Fatal(err)
			}
			demo = devenvtest.Client(t, env, "demo")
			admin = adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
			if tc.cluster == "" {
				// Sessions live on the coord cluster: none opens.
				_, err = demo.Session(ctx, tc.class)
				wantSealedNoRecord(t, err, 0)
			} else {
				got, err = tryLockRetrying(t, devenvtest.Session(t, demo, tc.class), "team-a/after/1")
				wantSealedNoRecord(t, err, got)
			}
			if get, err := tc.etcd(env).Get(ctx, lockkey.EpochKey); err != nil || len(get.Kvs) != 0 {
				t.Fatalf("after the arbiter restarted, %s holds %d records (err %v): it was recreated", lockkey.EpochKey, len(get.Kvs), err)
			}
			st, err = admin.Status(ctx, &adminv1.StatusRequest{Cluster: tc.cluster})
			if err != nil || !st.GetEpochMissing() || !st.GetSealed() {
				t.Fatalf("status with no record: %v (err %v), want epoch_missing and sealed", st, err)
			}

			adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: tc.cluster, ExpectedEpoch: 0, Reason: "record deleted"})
			if err != nil {
				t.Fatal(err)
			}
			if adv.GetPreviousEpoch() != 0 || adv.GetEpoch() <= high.Epoch() {
				t.Fatalf("advance from no record: %v, want a new epoch above %d", adv, high.Epoch())
			}
			// The sessions opened before the advance may have lived on: no
			// grant until their holders' last renewals have run out. A client
			// of its own: demo's lease may not have heard of the advance yet.
			s2 := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), tc.class)
			waitOutTheQuiet(t, tc.etcd(env), s2, "team-a/after/quiet", false)
			after := grantAll(t, s2, "team-a/after", 3)
			if after <= high {
				t.Fatalf("token after the advance (epoch %d) does not exceed the highest before (epoch %d)", after.Epoch(), high.Epoch())
			}
		})
	}
}

// An entity shard rebuilt empty behind the arbiter's back (new cluster ID,
// revisions from 1) is sealed, not given a new record, until the advance.
func TestAShardRebuiltEmptySealsUntilTheAdvance(t *testing.T) {
	env := sealCases[1].env(t) // a shard a of short TTLs: the advance's quiet period is short
	ctx := ctxT(t, 2*time.Minute)
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	demo := devenvtest.Client(t, env, "demo")
	high := grantAll(t, devenvtest.Session(t, demo, "entity"), "team-a/before", 10)

	if err := env.ShardClusters["a"].Rebuild(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	// The holds and the sessions' shard leases went with the data: a new
	// client's session (demo's own lease fences as its renewals fail).
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "entity")
	got, err := tryLockRetrying(t, s, "team-a/after/0")
	if err == nil {
		t.Fatalf("granted epoch %d revision %d (highest before: epoch %d revision %d) on a shard rebuilt empty",
			got.Epoch(), got.Revision(), high.Epoch(), high.Revision())
	}
	wantReason(t, err, lockv1.ErrorReason_SEALED)
	if get, err := env.ShardEtcd["a"].Get(ctx, lockkey.EpochKey); err != nil || len(get.Kvs) != 0 {
		t.Fatalf("the rebuilt shard holds %d epoch records (err %v): one was created", len(get.Kvs), err)
	}

	st, err := admin.Status(ctx, &adminv1.StatusRequest{Cluster: "a"})
	if err != nil || !st.GetEpochMissing() {
		t.Fatalf("status of the rebuilt shard: %v (err %v), want epoch_missing", st, err)
	}
	if _, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{Cluster: "a", ExpectedEpoch: 0, Reason: "rebuilt"}); err != nil {
		t.Fatal(err)
	}
	// demo's own lease may not have noticed its end yet: a new client,
	// once a session the rebuilt shard had may have run out.
	s2 := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "entity")
	waitOutTheQuiet(t, env.ShardEtcd["a"], s2, "team-a/after/quiet", false)
	after := grantAll(t, s2, "team-a/after", 3)
	if after <= high {
		t.Fatalf("token after the advance (epoch %d revision %d) does not exceed the highest before (epoch %d revision %d)",
			after.Epoch(), after.Revision(), high.Epoch(), high.Revision())
	}
}

// A coord cluster with no epoch records at all (new, or rebuilt empty) is
// initialised only with the operator's floor, and never below it.
func TestAnEmptyCoordClusterNeedsTheOperatorsFloor(t *testing.T) {
	env := devenvtest.Start(t, devenv.Options{})
	ctx := ctxT(t, time.Minute)
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())
	above := uint32(40)
	_, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: 1, Reason: "test", Above: &above})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	if !strings.Contains(err.Error(), "above") {
		t.Fatalf("the refusal does not name the field: %v", err)
	}
	// Everything the coord cluster recorded is gone, as after a rebuild.
	if _, err := env.Etcd.Delete(ctx, "/sys/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	_, err = admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: 0, Reason: "rebuilt"})
	wantReason(t, err, lockv1.ErrorReason_INVALID_ARGUMENT)
	if !strings.Contains(err.Error(), "fenced resource") {
		t.Fatalf("the refusal does not say where the floor comes from: %v", err)
	}
	adv, err := admin.AdvanceEpoch(ctx, &adminv1.AdvanceEpochRequest{ExpectedEpoch: 0, Reason: "rebuilt", Above: &above})
	if err != nil || adv.GetEpoch() != above+1 {
		t.Fatalf("advance above %d: %v (err %v)", above, adv, err)
	}
	h, err := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "").TryLock(ctx, "team-a/x", noFence)
	if err != nil || h.Token().Epoch() != above+1 {
		t.Fatalf("grant after initialising: %v, %v", h, reason.Of(err))
	}
}
