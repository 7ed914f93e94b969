// Package metriclabels holds the only labels Lockplane's metrics may carry.
//
// ADR-22: a series is labelled by namespace, class, tier and cluster, and
// never by a key, a session, an identity or a token, so that the number of
// series follows the size of the policy set, not of the traffic. A
// namespace is named by a caller's key, and only a policy set's grants
// bound how many there are (open authorisation does not), so the values a
// namespace label takes are capped: past MaxValues, further namespaces are
// counted together as Other. Class labels are capped the same way.
package metriclabels

import "sync"

// Allowed are the label names a Lockplane metric may use, besides a
// bounded enum named in the family's help (none today).
var Allowed = []string{"namespace", "class", "tier", "cluster"}

// MaxValues caps the values one label takes per process.
const MaxValues = 256

// Other stands for every value past the cap; it cannot be a namespace or a
// class, since '(' is in neither's alphabet.
const Other = "(other)"

// Values hands out one label's values, at most MaxValues of them. The zero
// value is ready to use.
type Values struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// Label is v's label value: v itself while the cap allows, else Other.
func (n *Values) Label(v string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.seen[v]; ok {
		return v
	}
	if len(n.seen) >= MaxValues {
		return Other
	}
	if n.seen == nil {
		n.seen = map[string]struct{}{}
	}
	n.seen[v] = struct{}{}
	return v
}
