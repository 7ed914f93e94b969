package main

// The policy the benchmark writes: its class, and a grant per identity
// whose quota covers that identity's share of the sessions and holds, so the
// arbiter's quota gate runs (as in production) without refusing the load.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// className is the benchmark's lock class, of namespace "scale": an
// efficiency class, advisory, since a fenced class needs a real pause
// test; so its TTL is at least the advisory floor (30 s, ADR-11).
const className = "scale"

// writePolicy writes the class and one grant per identity (by SPIFFE ID)
// into dir, each quota well above the identity's share of sessions and holds.
func writePolicy(dir string, ttl time.Duration, spiffeIDs []string, sessions, holds int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: lockplane.io/v1
kind: LockClass
metadata:
  name: %s
spec:
  namespace: scale
  purpose: efficiency
  enforcement: advisory
  ttl: %s
  tier: entity
  prefixes: [scale/]
  fairness: memory
`, className, ttl)
	// Twice the even share, plus some: the workers spread sessions and
	// holds over identities round-robin, not exactly evenly, and a quota
	// must never be what the benchmark measures.
	perSessions := 2*sessions/len(spiffeIDs) + 16
	perHolds := 2*holds/len(spiffeIDs) + 16
	for i, id := range spiffeIDs {
		fmt.Fprintf(&b, `---
apiVersion: lockplane.io/v1
kind: LockGrant
metadata:
  name: scale-%d
spec:
  spiffeId: %s
  prefixes:
    - scale/
  quota:
    sessions: %d
    holds: %d
`, i, id, perSessions, perHolds)
	}
	return os.WriteFile(filepath.Join(dir, "scale.yaml"), []byte(b.String()), 0o644)
}
