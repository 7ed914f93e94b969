// Package checker decides whether a release-gate history is safe. Each
// check is a function of the history alone, so each can be shown failing on
// a hand-made history:
//
//   - Linearizable: Porcupine against a sequential model of the fenced
//     record: an accepted write carries a token greater than the record's
//     mark, and extends the value the record held (its read saw the
//     previous accepted write: no lost update).
//   - TokenOrder: grants of one key ordered in real time have strictly
//     increasing tokens, of an epoch in force.
//   - NoOverlap: no two sessions' CanStart windows on one key overlap,
//     save the one overlap a force-release makes: the released grant's
//     (matched by key, session and revision to the runner's record of the
//     released hold) with a holder whose window began after the approval
//     was asked for. Report.Forced counts those.
//   - NothingLost: every acknowledged write is in the final record.
//   - Orphaned: no session holds a key a second after its Acquire of it
//     was refused (the probe of the handoff-deadline workload).
//
// The runner adds checks that need more than the history:
//
//   - TokenFloor: no grant of a cluster after the fault carries a token
//     below one the cluster granted, on any key, before the fault.
//   - Stranded: no hold remains in etcd once the clients are done.
//   - GrantedWhileSealed: nothing new is granted between losing an epoch
//     record and the operators' advance.
//   - ForceLearned: the holder of a force-released grant is told (OnFence)
//     and starts no work under it past a grace after the approval.
//
// and those of the adversarial faults (adversary.go): ForeignRelease,
// OneCluster (double-grant) and AdvanceLearned (advance-untold).
package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/history"
)

// Violation is one broken property.
type Violation struct {
	Check  string `json:"check"`
	Key    string `json:"key,omitempty"`
	Detail string `json:"detail"`
}

// Report is the verdict on one history.
type Report struct {
	Ops        int         `json:"ops"`
	Grants     int         `json:"grants"`
	Violations []Violation `json:"violations"`
	// Forced counts the overlaps excused as a force-release's: the
	// released grant's window with a later holder's (Overlaps).
	Forced int `json:"forced"`
	// Porcupine's information, for its HTML visualisation.
	info porcupine.LinearizationInfo
}

// OK reports whether no check found a violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Check runs every check. final is each key's record at the end; epochs
// are the epochs whose tokens may appear.
func Check(ops []history.Op, final map[string][]string, epochs []uint32, timeout time.Duration) *Report {
	r := &Report{Ops: len(ops)}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Result == history.OK {
			r.Grants++
		}
	}
	var info porcupine.LinearizationInfo
	var vs []Violation
	vs, info = Linearizable(ops, timeout)
	r.info = info
	r.Violations = append(r.Violations, vs...)
	r.Violations = append(r.Violations, TokenOrder(ops, epochs)...)
	overlaps, forced := Overlaps(ops)
	r.Forced = forced
	r.Violations = append(r.Violations, overlaps...)
	r.Violations = append(r.Violations, NothingLost(ops, final)...)
	r.Violations = append(r.Violations, Orphaned(ops)...)
	return r
}

// Add appends violations found by checks the runner makes.
func (r *Report) Add(vs ...Violation) { r.Violations = append(r.Violations, vs...) }

// Visualize writes Porcupine's HTML view of the history.
func (r *Report) Visualize(path string) error {
	return porcupine.VisualizePath(recordModel, r.info, path)
}

// record is the model's state: the fenced record's value and mark.
type record struct {
	value string // elements joined by ","
	mark  uint64
}

type input struct {
	kind  history.Kind
	token uint64
	value string
}

type output struct {
	result history.Result
	value  string
	mark   uint64
}

func join(v []string) string { return strings.Join(v, ",") }

// extends reports whether next is cur with exactly one element appended.
func extends(cur, next string) bool {
	if cur == "" {
		return next != "" && !strings.Contains(next, ",")
	}
	rest, ok := strings.CutPrefix(next, cur+",")
	return ok && rest != "" && !strings.Contains(rest, ",")
}

var recordSpec = &porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range h {
			k := op.Metadata.(string)
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], op)
		}
		sort.Strings(keys)
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, by[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{record{}} },
	Step: func(state, in, out interface{}) []interface{} {
		s, i, o := state.(record), in.(input), out.(output)
		switch i.kind {
		case history.Read:
			if o.result != history.OK || (o.value == s.value && o.mark == s.mark) {
				return []interface{}{s}
			}
			return nil
		case history.Write:
			applies := i.token > s.mark && extends(s.value, i.value)
			next := record{value: i.value, mark: i.token}
			switch o.result {
			case history.OK:
				if applies {
					return []interface{}{next}
				}
				return nil
			case history.Stale:
				if i.token <= s.mark {
					return []interface{}{s}
				}
				return nil
			default: // unknown, or failed without a verdict
				if i.token > s.mark {
					// A write the fence would accept may have landed, even
					// one that does not extend the value: that is the lost
					// update this model exists to catch, so only an
					// extending one is a legal outcome.
					if applies {
						return []interface{}{s, next}
					}
				}
				return []interface{}{s}
			}
		}
		return []interface{}{s}
	},
	DescribeOperation: func(in, out interface{}) string {
		i, o := in.(input), out.(output)
		if i.kind == history.Read {
			return fmt.Sprintf("read -> [%s] mark %d (%s)", o.value, o.mark, o.result)
		}
		return fmt.Sprintf("write [%s] token %d -> %s", i.value, i.token, o.result)
	},
	DescribeState: func(state interface{}) string {
		s := state.(record)
		return fmt.Sprintf("[%s] mark %d", s.value, s.mark)
	},
}

var recordModel = recordSpec.ToModel()

// Linearizable checks the reads and writes of every record with Porcupine.
func Linearizable(ops []history.Op, timeout time.Duration) ([]Violation, porcupine.LinearizationInfo) {
	var h []porcupine.Operation
	for _, op := range ops {
		if op.Kind != history.Read && op.Kind != history.Write {
			continue
		}
		ret := op.Return
		if op.Result == history.Unknown {
			ret = math.MaxInt64 // it may take effect at any time after its call
		}
		h = append(h, porcupine.Operation{
			ClientId: op.Client, Call: op.Call, Return: ret, Metadata: op.Key,
			Input:  input{kind: op.Kind, token: op.Token, value: join(op.Value)},
			Output: output{result: op.Result, value: join(op.Value), mark: op.Mark},
		})
	}
	res, info := porcupine.CheckOperationsVerbose(recordModel, h, timeout)
	switch res {
	case porcupine.Ok:
		return nil, info
	case porcupine.Illegal:
		return []Violation{{Check: "linearizable", Detail: "the record's reads and writes have no legal order: a write landed without a newer token or without seeing the previous write (lost update)"}}, info
	default:
		return []Violation{{Check: "linearizable", Detail: fmt.Sprintf("Porcupine could not decide within %s", timeout)}}, info
	}
}

// TokenOrder checks that grants of a key ordered in real time have
// strictly increasing tokens, that no two sessions were given one token,
// and that every token is of an epoch in epochs.
func TokenOrder(ops []history.Op, epochs []uint32) []Violation {
	var vs []Violation
	by := map[string][]history.Op{}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Result == history.OK {
			by[op.Key] = append(by[op.Key], op)
			e := token.Token(op.Token).Epoch()
			if !contains(epochs, e) {
				vs = append(vs, Violation{Check: "token-order", Key: op.Key, Detail: fmt.Sprintf("client %d's token is of epoch %d, not one in force %v", op.Client, e, epochs)})
			}
		}
	}
	for key, gs := range by {
		for _, a := range gs {
			for _, b := range gs {
				// An Acquire retried on the session that already holds the
				// key returns that same grant (its release did not land):
				// one grant, not two.
				if a.Token == b.Token && a.Session == b.Session {
					continue
				}
				if a.Return < b.Call && a.Token >= b.Token || a.Token == b.Token {
					vs = append(vs, Violation{Check: "token-order", Key: key, Detail: fmt.Sprintf(
						"client %d's grant returned before client %d's was asked for, yet its token %v is not lower than %v",
						a.Client, b.Client, token.Token(a.Token), token.Token(b.Token))})
				}
			}
		}
	}
	return vs
}

func contains(es []uint32, e uint32) bool {
	for _, x := range es {
		if x == e {
			return true
		}
	}
	return false
}

// NoOverlap checks that no two sessions' CanStart windows on one key
// overlap (ADR-12: CanStart is true only inside the lease). A hold's window
// runs from its first recorded Start to its last: the instants at which its
// client saw CanStart true. The one overlap a correct service makes on
// purpose, that of a force-released grant with the next holder's, is
// excused by the rule of Overlaps; every other overlap is a violation.
func NoOverlap(ops []history.Op) []Violation {
	vs, _ := Overlaps(ops)
	return vs
}

// window is one grant's CanStart window on a key.
type window struct {
	client   int
	session  int64
	token    uint64
	from, to int64
}

// ForcedGrant is a grant two operators force-released, as the runner
// recorded it (a history.ForceRelease op with Result OK).
type ForcedGrant struct {
	Key      string
	Session  int64
	Revision int64
	// ReleasedAt is the revision of the Txn that deleted the hold.
	ReleasedAt int64
	// Call and Return bound the approval: the hold was deleted between
	// them.
	Call, Return int64
}

// Forced lists the force-released grants of ops: only approvals that
// returned OK, so an approval refused or of unknown outcome excuses
// nothing.
func Forced(ops []history.Op) []ForcedGrant {
	var out []ForcedGrant
	for _, op := range ops {
		if op.Kind == history.ForceRelease && op.Result == history.OK {
			out = append(out, ForcedGrant{Key: op.Key, Session: op.Session, Revision: op.Revision, ReleasedAt: op.ReleasedAt, Call: op.Call, Return: op.Return})
		}
	}
	return out
}

// excuse is the rule by which an overlap is a force-release's and not a
// double grant: held (the earlier window) is exactly the grant force
// released (its key, session and the revision part of its token, as the
// runner recorded the released hold) and began before the approval was
// asked for; other began only after that, and was granted after the
// release (its token's revision above the release Txn's): nothing but
// the approval's deletion of the hold let other in. (Revisions compare
// within one etcd cluster: the force-release fault keeps every key on
// coord.) A var so that tests can show a broken rule is caught.
var excuse = func(forced []ForcedGrant, key string, held, other window) bool {
	for _, f := range forced {
		if f.Key == key && f.Session == held.session && f.Revision == token.Token(held.token).Revision() &&
			held.from < f.Call && other.from > f.Call && token.Token(other.token).Revision() > f.ReleasedAt {
			return true
		}
	}
	return false
}

// Overlaps is NoOverlap with the count of overlaps excused as a
// force-release's (Report.Forced).
func Overlaps(ops []history.Op) (vs []Violation, forced int) {
	holds := map[string]map[uint64]*window{}
	for _, op := range ops {
		if op.Kind != history.Start {
			continue
		}
		if holds[op.Key] == nil {
			holds[op.Key] = map[uint64]*window{}
		}
		w, ok := holds[op.Key][op.Token]
		if !ok {
			holds[op.Key][op.Token] = &window{client: op.Client, session: op.Session, token: op.Token, from: op.Call, to: op.Call}
			continue
		}
		w.from, w.to = min(w.from, op.Call), max(w.to, op.Call)
	}
	fs := Forced(ops)
	for key, ws := range holds {
		var list []*window
		for _, w := range ws {
			list = append(list, w)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].from < list[j].from })
		for i := 1; i < len(list); i++ {
			for j := 0; j < i; j++ {
				a, b := list[j], list[i]
				if a.session == b.session || b.from > a.to {
					continue
				}
				if excuse(fs, key, *a, *b) {
					forced++
					continue
				}
				vs = append(vs, Violation{Check: "no-overlap", Key: key, Detail: fmt.Sprintf(
					"client %d started work at +%s while client %d's window (to +%s) was open",
					b.client, time.Duration(b.from-list[0].from), a.client, time.Duration(a.to-list[0].from))})
			}
		}
	}
	return vs, forced
}

// ForceLearned checks that the holder of every force-released grant
// learned its hold ended: no Start under the grant later than grace after
// the approval returned (its CanStart turned false), and its OnFence ran
// (a history.Fenced op of the grant) by then, unless its client had
// released the grant first. grace is what the service allows: a holder
// hears at its next keepalive, a third of the class's TTL, and no hold's
// CanStart outlives a TTL without a keepalive.
func ForceLearned(ops []history.Op, grace time.Duration) []Violation {
	var vs []Violation
	for _, f := range Forced(ops) {
		deadline := f.Return + int64(grace)
		mine := func(op history.Op) bool {
			return op.Key == f.Key && op.Session == f.Session && op.Token != 0 && token.Token(op.Token).Revision() == f.Revision
		}
		told, released := false, false
		var late []history.Op
		for _, op := range ops {
			if !mine(op) {
				continue
			}
			switch op.Kind {
			case history.Fenced:
				told = told || op.Call <= deadline
			case history.Release:
				// Only a release that went through excuses a holder never
				// told: one refused is the holder's reaction to being told
				// (its grant had ended), and proves nothing about the telling.
				released = released || op.Result == history.OK && op.Call <= deadline
			case history.Start:
				if op.Call > deadline {
					late = append(late, op)
				}
			}
		}
		if len(late) > 0 {
			vs = append(vs, Violation{Check: "force-untold", Key: f.Key, Detail: fmt.Sprintf(
				"client %d started work %d time(s) under its force-released grant (session %d, revision %d) more than %s after the approval, the last %s after it",
				late[0].Client, len(late), f.Session, f.Revision, grace, time.Duration(late[len(late)-1].Call-f.Return).Round(time.Millisecond))})
			continue
		}
		if !told && !released {
			vs = append(vs, Violation{Check: "force-untold", Key: f.Key, Detail: fmt.Sprintf(
				"the holder of the force-released grant (session %d, revision %d) recorded no OnFence within %s of the approval, and had not released it",
				f.Session, f.Revision, grace)})
		}
	}
	return vs
}

// NothingLost checks that every acknowledged write's element is in the
// key's final record.
func NothingLost(ops []history.Op, final map[string][]string) []Violation {
	var vs []Violation
	for _, op := range ops {
		if op.Kind != history.Write || op.Result != history.OK || len(op.Value) == 0 {
			continue
		}
		mine := op.Value[len(op.Value)-1]
		found := false
		for _, v := range final[op.Key] {
			found = found || v == mine
		}
		if !found {
			vs = append(vs, Violation{Check: "nothing-lost", Key: op.Key, Detail: fmt.Sprintf("client %d's acknowledged write %q is not in the final record", op.Client, mine)})
		}
	}
	return vs
}

// TokenFloor checks that every grant asked for after at (the fault's
// injection) carries a token above every token its cluster granted, on any
// key, before at. Tokens are the epoch over the cluster's revision, which
// only grows, so a grant below the floor means the token space went back:
// an epoch record recreated at a lower epoch, or a log rebuilt empty under
// an unchanged epoch. The per-key order misses it when the keys granted
// after are not the keys granted before. clusterOf names a key's cluster;
// keys it maps to "" (keys that move between clusters) are skipped. A
// grant may repeat an older token when its session asked for the key
// before without learning the outcome (the retried Acquire returns the
// hold it made): such grants are skipped too. A refusal with a reason
// other than NO_QUORUM is an outcome learnt.
func TokenFloor(ops []history.Op, clusterOf func(key string) string, at int64) []Violation {
	type floor struct {
		token uint64
		op    history.Op
	}
	floors := map[string]floor{}
	// The epochs each cluster granted in before the fault: only a grant
	// of one of those can be re-returned to a caller that never learned of
	// it; a token of any other epoch below the floor is a regression.
	before := map[string]map[uint32]bool{}
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Result != history.OK || op.Return >= at {
			continue
		}
		c := clusterOf(op.Key)
		if c == "" {
			continue
		}
		if op.Token > floors[c].token {
			floors[c] = floor{op.Token, op}
		}
		if before[c] == nil {
			before[c] = map[uint32]bool{}
		}
		before[c][token.Token(op.Token).Epoch()] = true
	}
	// Sessions that asked for a key without learning the outcome.
	type sk struct {
		session int64
		key     string
	}
	unsure := map[sk]int64{} // earliest such call
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Session != 0 && unknownOutcome(op) {
			k := sk{op.Session, op.Key}
			if t, ok := unsure[k]; !ok || op.Call < t {
				unsure[k] = op.Call
			}
		}
	}
	below := map[string][]history.Op{}
	var order []string
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Result != history.OK || op.Call <= at {
			continue
		}
		c := clusterOf(op.Key)
		f, ok := floors[c]
		if c == "" || !ok || op.Token > f.token || (op.Token == f.token && op.Session == f.op.Session) {
			continue
		}
		if t, ok := unsure[sk{op.Session, op.Key}]; ok && t < op.Call && before[c][token.Token(op.Token).Epoch()] {
			continue
		}
		if below[c] == nil {
			order = append(order, c)
		}
		below[c] = append(below[c], op)
	}
	var vs []Violation
	for _, c := range order {
		f, b := floors[c], below[c][0]
		vs = append(vs, Violation{Check: "token-floor", Key: b.Key, Detail: fmt.Sprintf(
			"%d grant(s) on cluster %s after the fault carry tokens not above %v, which client %d was granted on %s before it; first: client %d's %v",
			len(below[c]), c, token.Token(f.token), f.op.Client, f.op.Key, b.Client, token.Token(b.Token))})
	}
	return vs
}

// GrantedWhileSealed checks that a cluster whose epoch record was lost
// (deleted, or the cluster rebuilt empty) grants nothing new between from,
// when the fault was done, and to, when the operator's advance began: an
// Acquire called and answered within that window may only be handed a
// grant made before it (a retried Acquire's), never a new token.
func GrantedWhileSealed(ops []history.Op, onCluster func(key string) bool, from, to int64) []Violation {
	if from == 0 || to <= from {
		return nil
	}
	// A token names a grant together with its key: with group commit
	// several keys are granted at one revision.
	type grant struct {
		key   string
		token uint64
	}
	earlier := map[grant]bool{}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Result == history.OK && op.Return < from {
			earlier[grant{op.Key, op.Token}] = true
		}
	}
	var vs []Violation
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Result != history.OK || op.Call <= from || op.Return >= to || !onCluster(op.Key) || earlier[grant{op.Key, op.Token}] {
			continue
		}
		vs = append(vs, Violation{Check: "granted-while-sealed", Key: op.Key, Detail: fmt.Sprintf(
			"client %d was granted %v after the cluster lost its epoch record and before the operator's advance",
			op.Client, token.Token(op.Token))})
	}
	return vs
}

// unknownOutcome reports whether an Acquire's caller did not learn whether
// it was granted.
func unknownOutcome(op history.Op) bool {
	switch op.Result {
	case history.OK:
		return false
	case history.Refused:
		return op.Reason == "" || op.Reason == "NO_QUORUM"
	}
	return true
}

// Orphaned checks the probes of refused Acquires: a probe that still saw
// the refused session holding the key, a second after the refusal, found a
// grant whose caller was told it had none. Nobody will release or renew
// work under it; the key is blocked while the session lives. A probe is
// not counted when an earlier grant of the key on that session has no
// confirmed release (that hold may be the one seen), unless the probe
// dates the hold it saw (Op.Since) after the refused Acquire was called:
// then the refused call made it.
func Orphaned(ops []history.Op) []Violation {
	type sk struct {
		session int64
		key     string
	}
	granted := map[sk][]uint64{}
	released := map[sk]map[uint64]bool{}
	refusals := map[sk][]history.Op{}
	for _, op := range ops {
		k := sk{op.Session, op.Key}
		switch {
		case op.Kind == history.Acquire && op.Result == history.OK:
			granted[k] = append(granted[k], op.Token)
		case op.Kind == history.Acquire && op.Result == history.Refused:
			refusals[k] = append(refusals[k], op)
		case op.Kind == history.Release && op.Result == history.OK:
			if released[k] == nil {
				released[k] = map[uint64]bool{}
			}
			released[k][op.Token] = true
		}
	}
	var vs []Violation
	for _, op := range ops {
		if op.Kind != history.Inspect || op.Result != history.OK || op.Session == 0 || op.Holder != op.Session {
			continue
		}
		k := sk{op.Session, op.Key}
		// The refusal this probe followed: the session's last on the key
		// before it.
		var refused history.Op
		for _, r := range refusals[k] {
			if r.Return <= op.Call && r.Return > refused.Return {
				refused = r
			}
		}
		open := false
		for _, t := range granted[k] {
			open = open || !released[k][t]
		}
		if open && (op.Since == 0 || refused.Call == 0 || op.Since < refused.Call) {
			continue
		}
		why := ""
		if refused.Reason != "" {
			why = " (" + refused.Reason + ")"
		}
		vs = append(vs, Violation{Check: "orphaned-grant", Key: op.Key, Detail: fmt.Sprintf(
			"client %d's Acquire on session %d was refused%s, yet %s later that session held the key: a grant its caller does not know of",
			op.Client, op.Session, why, time.Duration(op.Return-op.Call).Round(time.Millisecond))})
	}
	return vs
}

// Hold is a hold found in etcd once every client had exited.
type Hold struct {
	Cluster string `json:"cluster"`
	Key     string `json:"key"`
	Lease   int64  `json:"lease"`
	// Clients are the clients that may be the holder: those of its
	// identity, which replicas share; nil if unknown.
	Clients []int `json:"clients,omitempty"`
	// Since is when the hold was granted (CLOCK_MONOTONIC ns, from the
	// hold record's wall-clock time); 0 if unknown.
	Since int64 `json:"since,omitempty"`
}

// Stranded checks that nothing is stranded: atExit are the holds found
// when every client had exited, lapsed those still found once every lease
// could have lapsed (nothing renews them after the clients exit). A hold
// in lapsed outlived every lease; a hold in atExit of a session whose
// client recorded a confirmed close survived a close the service said it
// made. On coord the hold's lease is its session. On a shard the lease is
// the shard's own, so the hold is only known to be of one of its
// identity's clients: it counts if every one of them recorded a confirmed
// close of a session opened before the hold was granted.
func Stranded(ops []history.Op, atExit, lapsed []Hold) []Violation {
	last := map[int]history.Op{}
	closes := map[int]history.Op{}
	for _, op := range ops {
		switch op.Kind {
		case history.Session:
			if l, ok := last[op.Client]; !ok || op.Call > l.Call {
				last[op.Client] = op
			}
		case history.Close:
			closes[op.Client] = op
		}
	}
	done := map[int]closedSession{}
	for c, cl := range closes {
		if l, ok := last[c]; ok && cl.Result == history.OK && cl.Session == l.Session {
			done[c] = closedSession{l.Session, l.Call}
		}
	}
	type hk struct {
		cluster, key string
		lease        int64
	}
	seen := map[hk]bool{}
	var vs []Violation
	for _, h := range atExit {
		closes, ok := closedUnder(h, done)
		if !ok {
			continue
		}
		seen[hk{h.Cluster, h.Key, h.Lease}] = true
		vs = append(vs, Violation{Check: "stranded", Key: h.Key, Detail: fmt.Sprintf(
			"held on cluster %s (lease %x) after %s and the service confirmed it", h.Cluster, h.Lease, closes)})
	}
	for _, h := range lapsed {
		if seen[hk{h.Cluster, h.Key, h.Lease}] {
			continue
		}
		vs = append(vs, Violation{Check: "stranded", Key: h.Key, Detail: fmt.Sprintf(
			"held on cluster %s (lease %x, one of clients %v) after every client had exited and every lease could have lapsed",
			h.Cluster, h.Lease, h.Clients)})
	}
	return vs
}

// closedSession is a client's last session, whose close the service
// confirmed, and when the client recorded opening it.
type closedSession struct {
	session int64
	from    int64
}

// closedUnder says which confirmed closes h survived, if it must have
// survived one: on coord, that of the session whose lease h is on; on a
// shard, whose lease does not name the session, those of all h's clients
// when each closed a session opened before h was granted.
func closedUnder(h Hold, done map[int]closedSession) (string, bool) {
	if h.Cluster == "coord" {
		for c, d := range done {
			if d.session == h.Lease {
				return fmt.Sprintf("client %d closed its session %d", c, d.session), true
			}
		}
		return "", false
	}
	var sessions []int64
	for _, c := range h.Clients {
		d, ok := done[c]
		if !ok || h.Since <= d.from {
			return "", false
		}
		sessions = append(sessions, d.session)
	}
	return fmt.Sprintf("clients %v closed their sessions %v", h.Clients, sessions), len(sessions) > 0
}
