package checker_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/checker"
	"github.com/lockplane/lockplane/test/gate/history"
)

func TestForeignReleaseCatchesAReleaseOrRenewalByAnotherIdentity(t *testing.T) {
	k := "team-a/gate/1"
	refused := []history.Op{
		{Client: 4, Session: 100, Key: k, Kind: history.Steal, Result: history.Refused, Reason: "SESSION_NOT_OWNED", Token: tk(10)},
		{Client: 4, Session: 100, Key: k, Kind: history.StealRenew, Result: history.Refused, Reason: "SESSION_NOT_OWNED"},
	}
	if vs := checker.ForeignRelease(refused); len(vs) != 0 {
		t.Fatalf("refused steals are the service's right answer, got %v", vs)
	}
	stolen := []history.Op{
		{Client: 4, Session: 100, Key: k, Kind: history.Steal, Result: history.OK, Token: tk(10)},
		{Client: 4, Session: 100, Key: k, Kind: history.StealRenew, Result: history.OK},
	}
	vs := checker.ForeignRelease(stolen)
	if len(vs) != 2 || vs[0].Check != "foreign-release" {
		t.Fatalf("want two foreign-release violations, got %v", vs)
	}
}

func TestOneClusterCatchesAKeyGrantedOnTwoTiers(t *testing.T) {
	k := "gate/r0/record"
	on := func(class string) string {
		return map[string]string{"gate": "s0", "gatecoord": "coord"}[class]
	}
	e1, _ := token.Mint(1, 11)
	e3, _ := token.Mint(3, 5)
	ops := []history.Op{
		{Client: 0, Session: 1, Key: k, Kind: history.Acquire, Call: 1, Return: 2, Result: history.OK, Token: uint64(e3), Class: "gate"},
		{Client: 1, Session: 2, Key: k, Kind: history.Acquire, Call: 3, Return: 4, Result: history.Refused, Reason: "WRONG_CLASS", Class: "gatecoord"},
	}
	if vs := checker.OneCluster(ops, on); len(vs) != 0 {
		t.Fatalf("a WRONG_CLASS refusal is no grant, got %v", vs)
	}
	ops[1].Result, ops[1].Reason, ops[1].Token = history.OK, "", uint64(e1)
	vs := checker.OneCluster(ops, on)
	if len(vs) != 1 || vs[0].Check != "double-grant" {
		t.Fatalf("want one double-grant, got %v", vs)
	}
}

func TestAdvanceLearnedCatchesAHolderThatGoesOnBelieving(t *testing.T) {
	k := "gate/record/0"
	old, _ := token.Mint(3, 40)
	next, _ := token.Mint(4, 90)
	sec := int64(time.Second)
	advanced := 10 * sec
	all := func(string) bool { return true }
	start := func(at int64) history.Op {
		return history.Op{Client: 0, Session: 1, Key: k, Kind: history.Start, Call: at, Return: at, Result: history.OK, Token: uint64(old)}
	}
	// Believing for a while after the advance, within the grace and before
	// any new grant: what the service allows.
	ops := []history.Op{start(9 * sec), start(advanced + sec)}
	if vs := checker.AdvanceLearned(ops, all, 4, advanced, 3*time.Second); len(vs) != 0 {
		t.Fatalf("want none, got %v", vs)
	}
	// Past the grace.
	if vs := checker.AdvanceLearned(append(ops, start(advanced+4*sec)), all, 4, advanced, 3*time.Second); len(vs) != 1 || vs[0].Check != "advance-untold" {
		t.Fatalf("want one advance-untold, got %v", vs)
	}
	// Within the grace but after another client was granted the key.
	regrant := history.Op{Client: 1, Session: 2, Key: k, Kind: history.Acquire, Call: advanced, Return: advanced + sec/2, Result: history.OK, Token: uint64(next)}
	if vs := checker.AdvanceLearned(append(ops, regrant), all, 4, advanced, 3*time.Second); len(vs) != 1 {
		t.Fatalf("want one advance-untold after the regrant, got %v", vs)
	}
}

// An earlier grant with no confirmed release excuses a probe's sighting
// only if the hold seen may be that grant: one dated after the refused
// call was made by it (the nospace fault's unknown hold).
func TestOrphanedCountsAHoldDatedAfterTheRefusal(t *testing.T) {
	k := "gate/record/0"
	ops := []history.Op{
		{Client: 0, Session: 7, Key: k, Kind: history.Acquire, Call: 10, Return: 20, Result: history.OK, Token: tk(5)},
		{Client: 0, Session: 7, Key: k, Kind: history.Release, Call: 30, Return: 40, Result: history.Unknown, Token: tk(5)},
		{Client: 0, Session: 7, Key: k, Kind: history.Acquire, Call: 100, Return: 120, Result: history.Refused, Reason: "STORE_FULL"},
		{Client: 0, Session: 7, Key: k, Kind: history.Inspect, Call: 130, Return: 1130, Result: history.OK, Holder: 7, Since: 15},
	}
	if vs := checker.Orphaned(ops); len(vs) != 0 {
		t.Fatalf("the hold seen dates from the open grant: want none, got %v", vs)
	}
	ops[3].Since = 110
	vs := checker.Orphaned(ops)
	if len(vs) != 1 || vs[0].Check != "orphaned-grant" {
		t.Fatalf("the hold seen was made by the refused call: want one orphaned-grant, got %v", vs)
	}
}
