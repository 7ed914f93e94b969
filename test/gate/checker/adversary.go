package checker

import (
	"fmt"
	"sort"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	"github.com/lockplane/lockplane/test/gate/history"
)

// The checks of the adversarial workloads, each a function of the history:
//
//   - ForeignRelease: no identity ends or renews a session it did not open
//     (the thief's history.Steal and history.StealRenew answered OK).
//   - OneCluster: a key is granted on one cluster only, whatever class a
//     request named (double-grant).
//   - AdvanceLearned: after an epoch advance of a live cluster, no holder
//     of a grant of an earlier epoch starts work past a grace
//     (advance-untold).
//
// The unknown hold of the nospace fault is Orphaned's: a refused session
// that holds the key a second later.

// ForeignRelease reports every release or renewal the service granted to
// an identity that did not open the session.
func ForeignRelease(ops []history.Op) []Violation {
	var vs []Violation
	for _, op := range ops {
		if op.Result != history.OK {
			continue
		}
		switch op.Kind {
		case history.Steal:
			how := fmt.Sprintf("its token %v learnt through Inspect, Admin.Status and ValidateToken", token.Token(op.Token))
			if op.Token == 0 {
				how = "any_token"
			}
			vs = append(vs, Violation{Check: "foreign-release", Key: op.Key, Detail: fmt.Sprintf(
				"client %d, another identity, released session %d's hold with %s: the holder still believes it holds the key", op.Client, op.Session, how)})
		case history.StealRenew:
			vs = append(vs, Violation{Check: "foreign-release", Key: op.Key, Detail: fmt.Sprintf(
				"client %d, another identity, renewed session %d's lease (KeepAlive answered a TTL)", op.Client, op.Session)})
		}
	}
	return vs
}

// OneCluster checks that each key is granted on one cluster only: a key
// granted on two holds two grants at once with incomparable tokens, and a
// fence admits both. clusterOf names the cluster a class's grants live
// on; grants whose class it does not know ("") are skipped.
func OneCluster(ops []history.Op, clusterOf func(class string) string) []Violation {
	type first struct {
		op      history.Op
		cluster string
	}
	seen := map[string]map[string]history.Op{}
	for _, op := range ops {
		if op.Kind != history.Acquire || op.Result != history.OK {
			continue
		}
		c := clusterOf(op.Class)
		if c == "" {
			continue
		}
		if seen[op.Key] == nil {
			seen[op.Key] = map[string]history.Op{}
		}
		if _, ok := seen[op.Key][c]; !ok {
			seen[op.Key][c] = op
		}
	}
	var vs []Violation
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if len(seen[k]) < 2 {
			continue
		}
		var fs []first
		for c, op := range seen[k] {
			fs = append(fs, first{op, c})
		}
		sort.Slice(fs, func(i, j int) bool { return fs[i].cluster < fs[j].cluster })
		a, b := fs[0], fs[1]
		vs = append(vs, Violation{Check: "double-grant", Key: k, Detail: fmt.Sprintf(
			"granted on two clusters: to client %d through class %q on %s (%v) and to client %d through class %q on %s (%v): tokens of two clusters do not order",
			a.op.Client, a.op.Class, a.cluster, token.Token(a.op.Token), b.op.Client, b.op.Class, b.cluster, token.Token(b.op.Token))})
	}
	return vs
}

// AdvanceLearned checks that every holder of a grant on a cluster whose
// epoch was advanced at advanced (when the approval returned) stopped
// believing in time: no Start under a token of an epoch below newEpoch,
// on a key of that cluster, later than advanced+grace, nor later than the
// key's first grant in the new epoch returned. The advance deleted every
// such hold: its holder must hear before the key is anyone else's.
func AdvanceLearned(ops []history.Op, onCluster func(key string) bool, newEpoch uint32, advanced int64, grace time.Duration) []Violation {
	if advanced == 0 || newEpoch == 0 {
		return nil
	}
	regranted := map[string]history.Op{}
	for _, op := range ops {
		if op.Kind == history.Acquire && op.Result == history.OK && token.Token(op.Token).Epoch() >= newEpoch {
			if f, ok := regranted[op.Key]; !ok || op.Return < f.Return {
				regranted[op.Key] = op
			}
		}
	}
	type grant struct {
		key   string
		token uint64
	}
	late := map[grant][]history.Op{}
	var order []grant
	for _, op := range ops {
		if op.Kind != history.Start || !onCluster(op.Key) || token.Token(op.Token).Epoch() >= newEpoch {
			continue
		}
		deadline := advanced + int64(grace)
		if g, ok := regranted[op.Key]; ok {
			deadline = min(deadline, g.Return)
		}
		if op.Call <= deadline {
			continue
		}
		g := grant{op.Key, op.Token}
		if late[g] == nil {
			order = append(order, g)
		}
		late[g] = append(late[g], op)
	}
	var vs []Violation
	for _, g := range order {
		ls := late[g]
		after := ""
		if n, ok := regranted[g.key]; ok && ls[len(ls)-1].Call > n.Return {
			after = fmt.Sprintf(", after client %d was granted the key in the new epoch (%v)", n.Client, token.Token(n.Token))
		}
		vs = append(vs, Violation{Check: "advance-untold", Key: g.key, Detail: fmt.Sprintf(
			"client %d started work %d time(s) under %v, a grant the advance to epoch %d ended; the last %s after the advance%s (allowed: %s, and never after the key is granted again)",
			ls[0].Client, len(ls), token.Token(g.token), newEpoch, time.Duration(ls[len(ls)-1].Call-advanced).Round(time.Millisecond), after, grace)})
	}
	return vs
}
