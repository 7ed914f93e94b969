//go:build lockplane_broken_rules

package admin

import (
	"github.com/lockplane/lockplane/services/lockkey/records"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Rule-breaking switches, for the negative controls of the Admin API's
// safety tests (services/internal/arbiter/brokenrules_test.go): each
// swaps in a broken rule and returns the function that restores the
// real one. Built only with the lockplane_broken_rules tag, so no shipped
// arbiter has them (services/cmd/arbiter checks its symbols).

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
