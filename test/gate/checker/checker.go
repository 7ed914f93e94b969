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
//   - NoOverlap: no two sessions' CanStart windows on one key overlap.
//   - NothingLost: every acknowledged write is in the final record.
package checker

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockplane/lockplane/services/token"
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
	r.Violations = append(r.Violations, NoOverlap(ops)...)
	r.Violations = append(r.Violations, NothingLost(ops, final)...)
	return r
}

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
// client saw CanStart true.
func NoOverlap(ops []history.Op) []Violation {
	type window struct {
		client   int
		session  int64
		from, to int64
	}
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
			holds[op.Key][op.Token] = &window{client: op.Client, session: op.Session, from: op.Call, to: op.Call}
			continue
		}
		w.from, w.to = min(w.from, op.Call), max(w.to, op.Call)
	}
	var vs []Violation
	for key, ws := range holds {
		var list []*window
		for _, w := range ws {
			list = append(list, w)
		}
		sort.Slice(list, func(i, j int) bool { return list[i].from < list[j].from })
		for i := 1; i < len(list); i++ {
			for j := 0; j < i; j++ {
				a, b := list[j], list[i]
				if a.session != b.session && b.from <= a.to {
					vs = append(vs, Violation{Check: "no-overlap", Key: key, Detail: fmt.Sprintf(
						"client %d started work at +%s while client %d's window (to +%s) was open",
						b.client, time.Duration(b.from-list[0].from), a.client, time.Duration(a.to-list[0].from))})
				}
			}
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
