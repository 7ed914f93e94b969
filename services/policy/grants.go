package policy

import (
	"slices"
	"strings"

	"github.com/lockplane/lockplane/services/class"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// Grants answers whether an identity may lock a key: a longest-prefix
// match of the key's segments against the identity's granted prefixes,
// in a trie compiled once per policy set (ADR-19). It reads nothing but
// the trie, so a denial takes the same path whether or not the key
// exists or is held.
type Grants struct {
	byID map[string]*node
}

// node is one key segment of a trie; grant names the grant that ends here.
type node struct {
	next  map[string]*node
	grant string
}

// Compile builds the tries of a set's grants.
func Compile(gs []Grant) *Grants {
	g := &Grants{byID: map[string]*node{}}
	for _, gr := range gs {
		root := g.byID[gr.SPIFFEID]
		if root == nil {
			root = &node{}
			g.byID[gr.SPIFFEID] = root
		}
		for _, p := range gr.Prefixes {
			n := root
			for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
				if n.next == nil {
					n.next = map[string]*node{}
				}
				child := n.next[seg]
				if child == nil {
					child = &node{}
					n.next[seg] = child
				}
				n = child
			}
			n.grant = gr.Name
		}
	}
	return g
}

// Match returns the grant whose prefix is the longest one covering key for
// id, or "" if none does.
func (g *Grants) Match(id, key string) string {
	n := g.byID[id]
	match := ""
	for rest := key; n != nil; {
		if n.grant != "" {
			match = n.grant
		}
		var seg string
		var more bool
		seg, rest, more = strings.Cut(rest, "/")
		n = n.next[seg]
		if !more {
			// A prefix covers keys below it, never the key equal to it.
			break
		}
	}
	return match
}

// MayLock implements the arbiter's Authorizer.
func (g *Grants) MayLock(id spiffeid.ID, key string) bool { return g.Match(id.String(), key) != "" }

// Registry is the set's classes as a class.Registry. A request that names
// no class gets the set's class "default" if it has one, else the
// platform default.
func (s *Set) Registry() class.Static {
	out := class.NewStatic()
	for name, c := range s.Classes {
		out[name] = c.Class
	}
	return out
}

// Quotas is each identity's quota as its grants set it; an identity absent
// here has DefaultQuota.
func (s *Set) Quotas() map[string]Quota {
	out := map[string]Quota{}
	for _, g := range s.Grants {
		if g.Quota != nil {
			out[g.SPIFFEID] = *g.Quota
		}
	}
	return out
}

// Unowned are the namespaces the set's classes serve that no LockNamespace
// gives an owner, sorted: their client-health alerts go to the platform's
// receiver, which `lockctl policy check` warns of.
func (s *Set) Unowned() []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range s.Classes {
		ns := c.Namespace
		if ns == "" || seen[ns] {
			continue
		}
		seen[ns] = true
		if _, ok := s.Owners[ns]; !ok {
			out = append(out, ns)
		}
	}
	slices.Sort(out)
	return out
}
