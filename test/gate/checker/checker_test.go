package checker_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/checker"
	"github.com/lockplane/lockplane/test/gate/history"
)

func tk(rev int64) uint64 { t, _ := token.Mint(1, rev); return uint64(t) }

// cycle is one client's lock-set loop on key k: acquire, start, read,
// write (appending its element), release, at times from t.
func cycle(client int, session int64, tok uint64, t int64, read, write []string, result history.Result) []history.Op {
	k := "team-a/gate/1"
	return []history.Op{
		{Client: client, Session: session, Key: k, Kind: history.Acquire, Call: t, Return: t + 1, Result: history.OK, Token: tok},
		{Client: client, Session: session, Key: k, Kind: history.Start, Call: t + 2, Return: t + 2, Result: history.OK, Token: tok},
		{Client: client, Session: session, Key: k, Kind: history.Read, Call: t + 3, Return: t + 4, Result: history.OK, Value: read, Mark: markOf(read)},
		{Client: client, Session: session, Key: k, Kind: history.Write, Call: t + 5, Return: t + 6, Result: result, Token: tok, Value: write},
		{Client: client, Session: session, Key: k, Kind: history.Release, Call: t + 7, Return: t + 8, Result: history.OK, Token: tok},
	}
}

// marks of the hand-made record, by its length: the i-th write used token i*10.
func markOf(v []string) uint64 {
	if len(v) == 0 {
		return 0
	}
	return tk(int64(len(v) * 10))
}

func good() []history.Op {
	var ops []history.Op
	ops = append(ops, cycle(0, 100, tk(10), 0, nil, []string{"a"}, history.OK)...)
	ops = append(ops, cycle(1, 200, tk(20), 10, []string{"a"}, []string{"a", "b"}, history.OK)...)
	// An unknown write whose effect shows in the next read is legal.
	ops = append(ops, cycle(0, 100, tk(30), 20, []string{"a", "b"}, []string{"a", "b", "c"}, history.Unknown)...)
	ops = append(ops, cycle(1, 200, tk(40), 30, []string{"a", "b", "c"}, []string{"a", "b", "c", "d"}, history.OK)...)
	return ops
}

var final = map[string][]string{"team-a/gate/1": {"a", "b", "c", "d"}}

func TestAGoodHistoryPasses(t *testing.T) {
	r := checker.Check(good(), final, []uint32{1}, 10*time.Second)
	if !r.OK() {
		t.Fatalf("violations in a good history: %+v", r.Violations)
	}
	if r.Grants != 4 {
		t.Fatalf("grants = %d", r.Grants)
	}
	if err := r.Visualize(filepath.Join(t.TempDir(), "h.html")); err != nil {
		t.Fatal(err)
	}
}

func hasCheck(vs []checker.Violation, name string) bool {
	for _, v := range vs {
		if v.Check == name {
			return true
		}
	}
	return false
}

// The double grant every check exists for: client 1 is granted while
// client 0 still works, with a token that does not order after client 0's,
// reads the record before client 0's write and overwrites it.
func TestAnOverlappingGrantIsRejectedByEveryCheck(t *testing.T) {
	k := "team-a/gate/1"
	ops := []history.Op{
		{Client: 0, Session: 100, Key: k, Kind: history.Acquire, Call: 0, Return: 1, Result: history.OK, Token: tk(20)},
		{Client: 0, Session: 100, Key: k, Kind: history.Start, Call: 2, Return: 2, Result: history.OK, Token: tk(20)},
		{Client: 1, Session: 200, Key: k, Kind: history.Acquire, Call: 3, Return: 4, Result: history.OK, Token: tk(10)},
		{Client: 1, Session: 200, Key: k, Kind: history.Start, Call: 5, Return: 5, Result: history.OK, Token: tk(10)},
		{Client: 0, Session: 100, Key: k, Kind: history.Read, Call: 6, Return: 7, Result: history.OK},
		{Client: 1, Session: 200, Key: k, Kind: history.Read, Call: 6, Return: 7, Result: history.OK},
		{Client: 0, Session: 100, Key: k, Kind: history.Start, Call: 8, Return: 8, Result: history.OK, Token: tk(20)},
		{Client: 0, Session: 100, Key: k, Kind: history.Write, Call: 8, Return: 9, Result: history.OK, Token: tk(20), Value: []string{"a"}},
		{Client: 1, Session: 200, Key: k, Kind: history.Write, Call: 10, Return: 11, Result: history.OK, Token: tk(10), Value: []string{"b"}},
	}
	r := checker.Check(ops, map[string][]string{k: {"b"}}, []uint32{1}, 10*time.Second)
	for _, check := range []string{"linearizable", "token-order", "no-overlap", "nothing-lost"} {
		if !hasCheck(r.Violations, check) {
			t.Errorf("%s did not reject the overlapping grant; violations: %+v", check, r.Violations)
		}
	}
}

// Each check alone, on the smallest history that breaks only its property.
func TestEachCheckFailsAlone(t *testing.T) {
	// A lost update with well-ordered tokens: b's read missed a's write.
	lost := good()[:10]
	lost[7].Value, lost[7].Mark = nil, 0 // client 1 read [] after a's write returned
	lost[8].Value = []string{"b"}
	if vs, _ := checker.Linearizable(lost, 10*time.Second); !hasCheck(vs, "linearizable") {
		t.Error("linearizable accepted a lost update")
	}
	// A token of an epoch not in force.
	old := good()
	e2, _ := token.Mint(2, 10)
	old[0].Token = uint64(e2)
	if !hasCheck(checker.TokenOrder(old, []uint32{1}), "token-order") {
		t.Error("token-order accepted a token of another epoch")
	}
	// The same token granted to two sessions.
	twice := good()
	twice[5].Token = twice[0].Token
	if !hasCheck(checker.TokenOrder(twice, []uint32{1}), "token-order") {
		t.Error("token-order accepted one token granted to two sessions")
	}
	// But an Acquire retried by the holding session returns the same grant.
	retried := append(good(), history.Op{Client: 0, Session: 100, Key: "team-a/gate/1", Kind: history.Acquire, Call: 9, Return: 9, Result: history.OK, Token: tk(10)})
	if vs := checker.TokenOrder(retried, []uint32{1}); len(vs) > 0 {
		t.Errorf("token-order rejected a retried Acquire of a held grant: %v", vs)
	}
	// Work started by a second session inside the first's window.
	overlap := good()
	overlap = append(overlap,
		history.Op{Client: 0, Session: 100, Key: "team-a/gate/1", Kind: history.Start, Call: 12, Return: 12, Token: tk(10)},
		history.Op{Client: 1, Session: 200, Key: "team-a/gate/1", Kind: history.Start, Call: 11, Return: 11, Token: tk(20)})
	if !hasCheck(checker.NoOverlap(overlap), "no-overlap") {
		t.Error("no-overlap accepted overlapping windows")
	}
	// An acknowledged write missing from the end state.
	if !hasCheck(checker.NothingLost(good(), map[string][]string{"team-a/gate/1": {"a", "b", "c"}}), "nothing-lost") {
		t.Error("nothing-lost accepted a missing acknowledged write")
	}
}

func acquire(client int, session int64, key string, tok uint64, call, ret int64, r history.Result) history.Op {
	return history.Op{Client: client, Session: session, Key: key, Kind: history.Acquire, Call: call, Return: ret, Result: r, Token: tok}
}

// Tokens of a cluster going back after a fault, on a key not granted
// before it: the per-key order cannot see it, the floor does.
func TestTokenFloorCatchesARegressionAcrossKeys(t *testing.T) {
	e1, _ := token.Mint(1, 5)
	ops := []history.Op{
		acquire(0, 100, "team-a/x", tk(50), 0, 1, history.OK),
		// The fault at 10; afterwards the epoch record was recreated at 1.
		acquire(1, 200, "team-a/y", uint64(e1), 20, 21, history.OK),
	}
	clusterOf := func(string) string { return "coord" }
	if vs := checker.TokenOrder(ops, []uint32{1}); len(vs) > 0 {
		t.Fatalf("the per-key order saw it after all: %v", vs)
	}
	if !hasCheck(checker.TokenFloor(ops, clusterOf, 10), "token-floor") {
		t.Fatal("token-floor accepted a token below one granted before the fault")
	}
	// Higher tokens after the fault, on any key, pass.
	ok := append(ops[:1:1], acquire(1, 200, "team-a/y", tk(60), 20, 21, history.OK))
	if vs := checker.TokenFloor(ok, clusterOf, 10); len(vs) > 0 {
		t.Fatalf("token-floor rejected rising tokens: %v", vs)
	}
	// Another cluster's tokens are not compared, nor keys that move.
	other := func(k string) string {
		if k == "team-a/y" {
			return "s1"
		}
		return "coord"
	}
	if vs := checker.TokenFloor(ops, other, 10); len(vs) > 0 {
		t.Fatalf("token-floor compared two clusters: %v", vs)
	}
	// A session that asked for the key before without learning the
	// outcome may be given the hold it made then, with its older token.
	retried := []history.Op{
		acquire(1, 200, "team-a/y", 0, 2, 4, history.Unknown),
		acquire(0, 100, "team-a/x", tk(50), 5, 6, history.OK),
		acquire(1, 200, "team-a/y", tk(40), 20, 21, history.OK),
	}
	if vs := checker.TokenFloor(retried, clusterOf, 10); len(vs) > 0 {
		t.Fatalf("token-floor rejected a retried Acquire's own grant: %v", vs)
	}
	// But a refusal with a reason is an outcome learnt: no excuse.
	retried[0].Result, retried[0].Reason = history.Refused, "CONTENDED"
	if !hasCheck(checker.TokenFloor(retried, clusterOf, 10), "token-floor") {
		t.Fatal("token-floor excused a grant after a CONTENDED refusal")
	}
	retried[0].Reason = "NO_QUORUM"
	if vs := checker.TokenFloor(retried, clusterOf, 10); len(vs) > 0 {
		t.Fatalf("token-floor rejected a grant after NO_QUORUM: %v", vs)
	}
}

// A refused Acquire whose session holds the key a second later.
func TestOrphanedCatchesAGrantTheCallerWasNotTold(t *testing.T) {
	k := "team-a/gate/1"
	refused := history.Op{Client: 1, Session: 200, Key: k, Kind: history.Acquire, Call: 10, Return: 20, Result: history.Refused, Detail: "CONTENDED"}
	probe := history.Op{Client: 1, Session: 200, Key: k, Kind: history.Inspect, Call: 21, Return: 21 + int64(time.Second), Result: history.OK, Holder: 200}
	if !hasCheck(checker.Orphaned(append(good(), refused, probe)), "orphaned-grant") {
		t.Fatal("orphaned-grant accepted a refused session holding the key")
	}
	// Held by another session, or free: fine.
	for _, holder := range []int64{100, 0} {
		p := probe
		p.Holder = holder
		if vs := checker.Orphaned(append(good(), refused, p)); len(vs) > 0 {
			t.Fatalf("holder %d: %v", holder, vs)
		}
	}
	// A hold of that session whose release was not confirmed may be the
	// one seen: not counted.
	open := append(good(), acquire(1, 200, k, tk(50), 40, 41, history.OK),
		history.Op{Client: 1, Session: 200, Key: k, Kind: history.Release, Call: 42, Return: 43, Result: history.Unknown, Token: tk(50)},
		refused, probe)
	if vs := checker.Orphaned(open); len(vs) > 0 {
		t.Fatalf("a hold with an unconfirmed release was counted: %v", vs)
	}
	// The whole Check runs it.
	if r := checker.Check(append(good(), refused, probe), final, []uint32{1}, 10*time.Second); !hasCheck(r.Violations, "orphaned-grant") {
		t.Fatalf("Check does not run orphaned-grant: %+v", r.Violations)
	}
}

// Holds left once the clients exited.
func TestStrandedCatchesHoldsLeftAfterAClose(t *testing.T) {
	ops := []history.Op{
		{Client: 0, Session: 100, Kind: history.Session, Call: 0, Return: 1, Result: history.OK},
		{Client: 0, Session: 150, Kind: history.Session, Call: 50, Return: 51, Result: history.OK}, // replaced a fenced one
		{Client: 0, Session: 150, Kind: history.Close, Call: 90, Return: 91, Result: history.OK},
		{Client: 1, Session: 200, Kind: history.Session, Call: 0, Return: 1, Result: history.OK},
		{Client: 1, Session: 200, Kind: history.Close, Call: 90, Return: 91, Result: history.Unknown},
		// Clients 2 and 3 are replicas: one identity, each its own session.
		{Client: 2, Session: 300, Kind: history.Session, Call: 0, Return: 1, Result: history.OK},
		{Client: 2, Session: 300, Kind: history.Close, Call: 90, Return: 91, Result: history.OK},
		{Client: 3, Session: 400, Kind: history.Session, Call: 30, Return: 31, Result: history.OK},
		{Client: 3, Session: 400, Kind: history.Close, Call: 90, Return: 91, Result: history.OK},
	}
	zero, one, pair, replicas := []int{0}, []int{1}, []int{0, 1}, []int{2, 3}
	cases := []struct {
		name   string
		atExit []checker.Hold
		lapsed []checker.Hold
		want   bool
	}{
		{"nothing left", nil, nil, false},
		{"on coord, on the closed session", []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 150, Clients: zero}}, nil, true},
		{"on coord, on the closed session of one of an identity's clients", []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 150, Clients: pair}}, nil, true},
		{"on coord, on a fenced session's lease not yet lapsed", []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 100, Clients: zero, Since: 20}}, nil, false},
		{"on a shard, granted after the closed session opened", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Clients: zero, Since: 60}}, nil, true},
		{"on a shard, granted to the fenced session", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Clients: zero, Since: 20}}, nil, false},
		{"on a shard, of an identity one of whose clients did not confirm its close", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Clients: pair, Since: 60}}, nil, false},
		{"on a shard, after every replica's closed session opened", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Clients: replicas, Since: 60}}, nil, true},
		{"on a shard, before a replica's closed session opened", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Clients: replicas, Since: 20}}, nil, false},
		{"on a shard, of no known identity", []checker.Hold{{Cluster: "s1", Key: "a/b", Lease: 7, Since: 60}}, nil, false},
		{"an unconfirmed close", []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 200, Clients: one}}, nil, false},
		{"outlived every lease", []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 200, Clients: one}}, []checker.Hold{{Cluster: "coord", Key: "a/b", Lease: 200, Clients: one}}, true},
	}
	for _, c := range cases {
		vs := checker.Stranded(ops, c.atExit, c.lapsed)
		if got := hasCheck(vs, "stranded"); got != c.want {
			t.Errorf("%s: stranded = %v, want %v (%v)", c.name, got, c.want, vs)
		}
	}
}

// A retried Acquire may be re-handed a grant made before the fault, but a
// regression to an epoch never granted in before it is not excused.
func TestTokenFloorExcusesOnlyEpochsInForceBeforeTheFault(t *testing.T) {
	e3, _ := token.Mint(3, 50)
	e1, _ := token.Mint(1, 30) // a record recreated at epoch 1
	ops := []history.Op{
		acquire(1, 200, "team-a/y", 0, 2, 4, history.Unknown),
		acquire(0, 100, "team-a/x", uint64(e3), 5, 6, history.OK),
		acquire(1, 200, "team-a/y", uint64(e1), 20, 21, history.OK),
	}
	if !hasCheck(checker.TokenFloor(ops, func(string) string { return "coord" }, 10), "token-floor") {
		t.Fatal("a token of an epoch never granted in before the fault was excused as a retried grant")
	}
}

// A cluster that lost its epoch record grants nothing new until the
// operator's advance; a retried Acquire's earlier grant is no new grant.
func TestGrantedWhileSealedCatchesANewGrantBeforeTheAdvance(t *testing.T) {
	onCoord := func(string) bool { return true }
	ops := []history.Op{
		acquire(0, 100, "team-a/x", tk(50), 1, 2, history.OK),
		acquire(0, 100, "team-a/x", tk(50), 12, 13, history.OK), // re-handed
	}
	if vs := checker.GrantedWhileSealed(ops, onCoord, 10, 20); len(vs) > 0 {
		t.Fatalf("a re-handed earlier grant was called new: %v", vs)
	}
	ops = append(ops, acquire(1, 200, "team-a/y", tk(60), 14, 15, history.OK))
	if !hasCheck(checker.GrantedWhileSealed(ops, onCoord, 10, 20), "granted-while-sealed") {
		t.Fatal("a new grant between the fault and the advance passed")
	}
	// After the advance began, grants are expected.
	if vs := checker.GrantedWhileSealed(ops, onCoord, 10, 14); len(vs) > 0 {
		t.Fatalf("a grant after the advance began was rejected: %v", vs)
	}
}

// forced is a force-release as the runner records it: client 0's grant
// (session 100, token revision 20) is released by two operators, approved
// between 35 and 38 in a Txn at revision 30; client 1, waiting since 30,
// is granted revision 40 at 39. Client 0 hears at its next keepalive
// (Fenced at 47), having started work until 45: its window overlaps
// client 1's, on purpose. Its late write, after client 1's, is refused by
// the fence.
func forced() []history.Op {
	k := "team-a/gate/1"
	f, n := tk(20), tk(40)
	return []history.Op{
		{Client: 0, Session: 100, Key: k, Kind: history.Acquire, Call: 10, Return: 11, Result: history.OK, Token: f},
		{Client: 0, Session: 100, Key: k, Kind: history.Start, Call: 12, Return: 12, Result: history.OK, Token: f},
		{Client: 0, Session: 100, Key: k, Kind: history.Read, Call: 13, Return: 14, Result: history.OK},
		{Client: 0, Session: 100, Key: k, Kind: history.Write, Call: 16, Return: 17, Result: history.OK, Token: f, Value: []string{"a"}},
		{Client: 0, Session: 100, Key: k, Kind: history.Start, Call: 20, Return: 20, Result: history.OK, Token: f},
		{Client: 0, Session: 100, Key: k, Kind: history.Start, Call: 45, Return: 45, Result: history.OK, Token: f},
		{Client: history.Operators, Session: 100, Key: k, Kind: history.ForceRelease, Call: 35, Return: 38, Result: history.OK, Revision: 20, ReleasedAt: 30},
		{Client: 1, Session: 200, Key: k, Kind: history.Acquire, Call: 30, Return: 39, Result: history.OK, Token: n},
		{Client: 1, Session: 200, Key: k, Kind: history.Start, Call: 40, Return: 40, Result: history.OK, Token: n},
		{Client: 1, Session: 200, Key: k, Kind: history.Read, Call: 41, Return: 42, Result: history.OK, Value: []string{"a"}, Mark: f},
		{Client: 1, Session: 200, Key: k, Kind: history.Start, Call: 43, Return: 43, Result: history.OK, Token: n},
		{Client: 1, Session: 200, Key: k, Kind: history.Write, Call: 44, Return: 45, Result: history.OK, Token: n, Value: []string{"a", "b"}},
		{Client: 1, Session: 200, Key: k, Kind: history.Release, Call: 46, Return: 47, Result: history.OK, Token: n},
		{Client: 0, Session: 100, Key: k, Kind: history.Fenced, Call: 47, Return: 47, Result: history.OK, Token: f},
		{Client: 0, Session: 100, Key: k, Kind: history.Read, Call: 60, Return: 61, Result: history.OK, Value: []string{"a", "b"}, Mark: n},
		{Client: 0, Session: 100, Key: k, Kind: history.Write, Call: 62, Return: 63, Result: history.Stale, Token: f, Value: []string{"a", "b", "a2"}},
		{Client: 0, Session: 100, Key: k, Kind: history.Release, Call: 64, Return: 65, Result: history.Unknown, Token: f},
	}
}

const forcedGrace = 20

// forcedIndex is the index of the force-release op in forced().
func forcedIndex(ops []history.Op) int {
	for i, op := range ops {
		if op.Kind == history.ForceRelease {
			return i
		}
	}
	panic("no force-release")
}

// overlapRuleFailures runs the force-release cases of the overlap rule
// and returns what went wrong: an excused overlap reported, or an overlap
// that is not the force-release's excused.
func overlapRuleFailures() []string {
	var failed []string
	k := "team-a/gate/1"
	// Its own overlap is excused, and counted; the whole history passes.
	r := checker.Check(forced(), map[string][]string{k: {"a", "b"}}, []uint32{1}, 10*time.Second)
	r.Add(checker.ForceLearned(forced(), forcedGrace)...)
	if !r.OK() || r.Forced != 1 {
		failed = append(failed, fmt.Sprintf("the force-release's own overlap: forced %d, violations %+v", r.Forced, r.Violations))
	}
	// Each of these is an overlap the force-release does not explain.
	cases := []struct {
		name string
		edit func([]history.Op) []history.Op
	}{
		{"the release names another session", func(ops []history.Op) []history.Op {
			ops[forcedIndex(ops)].Session = 300
			return ops
		}},
		{"the release names another revision of the session's grant", func(ops []history.Op) []history.Op {
			ops[forcedIndex(ops)].Revision = 21
			return ops
		}},
		{"the next holder started before the approval was asked for", func(ops []history.Op) []history.Op {
			i := forcedIndex(ops)
			ops[i].Call, ops[i].Return = 41, 42
			return ops
		}},
		{"the next holder's grant is older than the release", func(ops []history.Op) []history.Op {
			ops[forcedIndex(ops)].ReleasedAt = 45
			return ops
		}},
		{"the approval's outcome is unknown", func(ops []history.Op) []history.Op {
			ops[forcedIndex(ops)].Result = history.Unknown
			return ops
		}},
		{"a second holder overlaps the next one", func(ops []history.Op) []history.Op {
			// Client 2, granted after the release too: its overlap with
			// the released grant is excused, not that with client 1's.
			return append(ops,
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Acquire, Call: 36, Return: 41, Result: history.OK, Token: tk(41)},
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Start, Call: 42, Return: 42, Result: history.OK, Token: tk(41)})
		}},
		{"a holder granted before the approval overlaps the released grant", func(ops []history.Op) []history.Op {
			return append(ops,
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Acquire, Call: 21, Return: 22, Result: history.OK, Token: tk(22)},
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Start, Call: 25, Return: 25, Result: history.OK, Token: tk(22)})
		}},
		{"two other sessions overlap on the released key", func(ops []history.Op) []history.Op {
			return append(ops,
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Start, Call: 70, Return: 70, Result: history.OK, Token: tk(60)},
				history.Op{Client: 2, Session: 300, Key: k, Kind: history.Start, Call: 80, Return: 80, Result: history.OK, Token: tk(60)},
				history.Op{Client: 3, Session: 400, Key: k, Kind: history.Start, Call: 75, Return: 75, Result: history.OK, Token: tk(70)})
		}},
	}
	for _, c := range cases {
		vs, _ := checker.Overlaps(c.edit(forced()))
		if !hasCheck(vs, "no-overlap") {
			failed = append(failed, c.name+": the overlap was excused")
		}
	}
	// The same overlap on another key than the one released.
	other := forced()
	for i := range other {
		if other[i].Kind != history.ForceRelease {
			other[i].Key = "team-a/gate/2"
		}
	}
	if vs, _ := checker.Overlaps(other); !hasCheck(vs, "no-overlap") {
		failed = append(failed, "an overlap on another key was excused")
	}
	return failed
}

func TestForceReleaseExcusesOnlyItsOwnOverlap(t *testing.T) {
	for _, f := range overlapRuleFailures() {
		t.Error(f)
	}
	// Without the force-release op the same history is a double grant.
	var bare []history.Op
	for _, op := range forced() {
		if op.Kind != history.ForceRelease {
			bare = append(bare, op)
		}
	}
	if r := checker.Check(bare, map[string][]string{"team-a/gate/1": {"a", "b"}}, []uint32{1}, 10*time.Second); !hasCheck(r.Violations, "no-overlap") || r.Forced != 0 {
		t.Errorf("without the force-release the overlap was not reported: forced %d, %+v", r.Forced, r.Violations)
	}
}

// A broken rule that excuses every overlap on a key once it was
// force-released passes the force-release's own overlap, and is caught by
// the cases above.
func TestABrokenForceRuleIsCaught(t *testing.T) {
	restore := checker.ExcuseEveryOverlapOnAForcedKey()
	defer restore()
	failed := overlapRuleFailures()
	if len(failed) == 0 {
		t.Fatal("the cases did not catch a rule that excuses every overlap on a force-released key")
	}
	t.Logf("the broken rule is caught by %d case(s), e.g. %s", len(failed), failed[0])
}

// The deposed holder's late write, had the fence accepted it, is a
// linearizability violation: the fence is what keeps a force-release safe.
func TestALateWriteAcceptedAfterAForceReleaseIsCaught(t *testing.T) {
	ops := forced()
	ops[len(ops)-2].Result = history.OK
	if vs, _ := checker.Linearizable(ops, 10*time.Second); !hasCheck(vs, "linearizable") {
		t.Fatal("a write under the released grant's token, accepted after the next holder's, passed")
	}
}

// The holder must learn: no Start past the grace, and its OnFence ran.
func TestForceLearnedCatchesAHolderNotTold(t *testing.T) {
	if vs := checker.ForceLearned(forced(), forcedGrace); len(vs) > 0 {
		t.Fatalf("a holder told in time: %v", vs)
	}
	late := append(forced(), history.Op{Client: 0, Session: 100, Key: "team-a/gate/1", Kind: history.Start, Call: 59, Return: 59, Result: history.OK, Token: tk(20)})
	if !hasCheck(checker.ForceLearned(late, forcedGrace), "force-untold") {
		t.Error("a Start under the released grant past the grace passed")
	}
	var untold []history.Op
	for _, op := range forced() {
		if op.Kind != history.Fenced {
			untold = append(untold, op)
		}
	}
	if !hasCheck(checker.ForceLearned(untold, forcedGrace), "force-untold") {
		t.Error("a holder whose OnFence never ran passed")
	}
	// A holder that released the grant before it heard needs no OnFence.
	for i := range untold {
		if untold[i].Kind == history.Release && untold[i].Session == 100 {
			untold[i].Call, untold[i].Result = 50, history.OK
		}
	}
	if vs := checker.ForceLearned(untold, forcedGrace); len(vs) > 0 {
		t.Errorf("a holder that released first: %v", vs)
	}
	// A release refused (the grant had ended) is no excuse.
	for i := range untold {
		if untold[i].Kind == history.Release && untold[i].Session == 100 {
			untold[i].Result = history.Unknown
		}
	}
	if !hasCheck(checker.ForceLearned(untold, forcedGrace), "force-untold") {
		t.Error("a holder never told whose release was refused passed")
	}
}
