// Package spire keeps a SPIRE server's registration entries equal to what
// a region declares: each granted identity on the region's workload
// hosts, as its LockGrant's workload names it, and the services' own
// identities on their hosts. A grant and who may hold its identity are
// then one reviewed document, and an entry nobody declares does not
// outlive the next sync.
package spire

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/policy"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// DefaultSVIDTTL is an X.509 SVID's lifetime unless the stack sets one:
// the design's hour (ADR-19). Agents rotate at half of it.
const DefaultSVIDTTL = time.Hour

// Entry is one registration entry: SPIRE issues SPIFFEID to a workload
// attested by the agent ParentID whose selectors include all of
// Selectors.
type Entry struct {
	SPIFFEID string
	ParentID string
	// Selectors are "type:value", sorted.
	Selectors []string
	// X509SVIDTTL is the lifetime of the SVIDs issued for it.
	X509SVIDTTL time.Duration
}

// key is what makes two entries the same registration; a different TTL
// is an update of it.
func (e Entry) key() string {
	return e.SPIFFEID + "\x00" + e.ParentID + "\x00" + strings.Join(e.Selectors, "\x00")
}

func (e Entry) String() string {
	return fmt.Sprintf("%s (parent %s, selectors %s)", e.SPIFFEID, e.ParentID, strings.Join(e.Selectors, ","))
}

// FromGrants are the entries of every grant that names a workload, one
// per agent: a granted workload may run on any of the agents' hosts.
func FromGrants(grants []policy.Grant, agents []string, ttl time.Duration) ([]Entry, error) {
	var out []Entry
	for _, g := range grants {
		if g.Workload == nil {
			continue
		}
		if err := policy.CheckWorkloadID(g.SPIFFEID); err != nil {
			return nil, fmt.Errorf("grant %s: %w", g.Name, err)
		}
		for _, a := range agents {
			e, err := NewEntry(g.SPIFFEID, a, g.Workload.Selectors, ttl)
			if err != nil {
				return nil, fmt.Errorf("grant %s: %w", g.Name, err)
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// NewEntry checks an entry's fields and sorts its selectors.
func NewEntry(id, parent string, selectors []string, ttl time.Duration) (Entry, error) {
	sid, err := spiffeid.FromString(id)
	if err != nil {
		return Entry{}, fmt.Errorf("spiffe ID %q: %w", id, err)
	}
	pid, err := spiffeid.FromString(parent)
	if err != nil {
		return Entry{}, fmt.Errorf("parent ID %q: %w", parent, err)
	}
	if sid.TrustDomain() != pid.TrustDomain() {
		return Entry{}, fmt.Errorf("%s is not in the trust domain of its agent %s", sid, pid)
	}
	if len(selectors) == 0 {
		return Entry{}, fmt.Errorf("%s: at least one selector is required", sid)
	}
	for _, s := range selectors {
		if typ, value, ok := strings.Cut(s, ":"); !ok || typ == "" || value == "" {
			return Entry{}, fmt.Errorf("%s: selector %q must be type:value", sid, s)
		}
	}
	if ttl < time.Second || ttl >= 1<<31*time.Second {
		return Entry{}, fmt.Errorf("%s: the SVID TTL %s must be between 1s and 68 years", sid, ttl)
	}
	sel := slices.Clone(selectors)
	sort.Strings(sel)
	return Entry{SPIFFEID: sid.String(), ParentID: pid.String(), Selectors: slices.Compact(sel), X509SVIDTTL: ttl.Truncate(time.Second)}, nil
}
