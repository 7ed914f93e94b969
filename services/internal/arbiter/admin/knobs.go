package admin

import (
	"time"

	"github.com/lockplane/lockplane/services/internal/records"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Test knobs. The safety tests of the Admin API drive it through a whole
// arbiter (services/internal/arbiter's tests, via its export_test.go) and
// show that their checks catch these broken variants; nothing else may
// call them. Each returns the function that restores the real rule.

// BreakForceCompare swaps in a broken force-release Txn that deletes the
// holds without comparing them to the request's revision and value.
func BreakForceCompare() (restore func()) {
	orig := forceTxn
	forceTxn = func(c Cluster, rec actionRecord, holds []holdFact, fr records.Force, lease clientv3.LeaseID) ([]clientv3.Cmp, []clientv3.Op) {
		_, ops := orig(c, rec, holds, fr, lease)
		return nil, ops
	}
	return func() { forceTxn = orig }
}

// BreakTwoPersonRule lets anyone approve, the requester too.
func BreakTwoPersonRule() (restore func()) {
	orig := twoPersonRule
	twoPersonRule = func(Operator, Operator) bool { return true }
	return func() { twoPersonRule = orig }
}

// BreakClaimCompare swaps in a broken claim that puts a request's next
// state without comparing its revision: two decisions can both win.
func BreakClaimCompare() (restore func()) {
	orig := claimCompare
	claimCompare = func(string, int64) []clientv3.Cmp { return nil }
	return func() { claimCompare = orig }
}

// SetClaimBound sets how old an executing request's claim must be before
// reconcile, finding nothing done, puts it back to pending.
func SetClaimBound(d time.Duration) (restore func()) {
	orig := claimBound
	claimBound = func(*Server, string) time.Duration { return d }
	return func() { claimBound = orig }
}

// SetShardAddWait sets how long an approved shard add waits for the
// moving ranges' holders (and runs its steps) before it stops, leaving
// the request pending to be approved again.
func SetShardAddWait(d time.Duration) (restore func()) {
	orig := shardAddWait
	shardAddWait = func(*Server) time.Duration { return d }
	return func() { shardAddWait = orig }
}
