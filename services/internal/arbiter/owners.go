package arbiter

import (
	"context"
	"sync"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
)

// maxOwners caps the sessions an arbiter remembers the owner of, per
// cluster; forgetting one costs one read at its next release.
const maxOwners = 1 << 16

// sessionOwners remembers the identity that opened each session this
// arbiter has seen, so that a release is checked against its caller
// without a read each time. A session's identity never changes while it
// lives: its record is written once, on its own lease, and lease IDs are
// not reused. Only records read from etcd (or written by this arbiter)
// are remembered, never what a caller claims.
type sessionOwners struct {
	mu    sync.Mutex
	owner map[int64]string
	ring  []int64 // insertion order, for eviction past maxOwners
	next  int
}

func newSessionOwners() *sessionOwners { return &sessionOwners{owner: map[int64]string{}} }

func (o *sessionOwners) get(session int64) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id, ok := o.owner[session]
	return id, ok
}

func (o *sessionOwners) put(session int64, identity string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.owner[session]; ok {
		o.owner[session] = identity
		return
	}
	if len(o.ring) < maxOwners {
		o.ring = append(o.ring, session)
	} else {
		delete(o.owner, o.ring[o.next])
		o.ring[o.next] = session
		o.next = (o.next + 1) % maxOwners
	}
	o.owner[session] = identity
}

// requireOwner refuses a call naming session unless caller opened it:
// PERMISSION_DENIED with SESSION_NOT_OWNED, before anything is written.
// A session whose record is gone is SESSION_EXPIRED (checkOwner).
func (a *Arbiter) requireOwner(ctx context.Context, caller spiffeid.ID, session int64) error {
	if id, ok := a.owners.get(session); ok {
		if id != caller.String() {
			return notOwned()
		}
		return nil
	}
	return a.checkOwner(ctx, caller, session)
}

func notOwned() error {
	return refuse.With(codes.PermissionDenied, lockv1.ErrorReason_SESSION_NOT_OWNED,
		"the session belongs to another identity: only the identity that opened a session may release, extend or close its holds")
}
