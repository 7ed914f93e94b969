// Package pausetest is the pause test kit (ADR-17): it proves that a
// resource's fence refuses a holder that was paused past its lease.
//
// The holder runs as a separate process so the kit can really freeze it
// with SIGSTOP. Every connection the holder's resource makes goes through a
// gate, so the kit can also freeze it between the statements of one write:
// that is where a check made in one statement and a write made in another
// come apart. The kit runs these cases at once, one holder each:
//
//	paused-at-N     A is granted; A's write is stopped before its N-th
//	                message (N = 1.. the messages one write sends); A is
//	                frozen past its TTL; B is granted and writes; A resumes.
//	                B's write must survive and A's must be refused.
//	equal-token     A writes once; A's second write is stopped; A is frozen
//	                past its TTL; B is granted; A resumes before B writes.
//	                A's second write must be refused (B holds the grant).
//	per-record      B is granted key 2, then A key 1 (a newer token); A
//	                writes record 1; B's write of record 2 must be accepted.
//
// A class may be declared fenced only with a passing Result for it.
package pausetest

import (
	"context"
	"fmt"
	"net"
	"sort"

	"github.com/lockplane/lockplane/services/client/token"
)

// Resource is a guarded resource as a holder writes to it.
type Resource interface {
	// Write writes value to record under tok in one guarded write. It
	// returns an error wrapping fence.ErrStaleFence when the resource
	// refused the token.
	Write(ctx context.Context, tok token.Token, record, value string) error
	// Read returns a record's value; "" when it has none.
	Read(ctx context.Context, record string) (string, error)
	Close() error
}

// DialFunc opens a network connection. A resource must make every
// connection it uses through the one it is given.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Kind is one kind of resource the kit can test.
type Kind struct {
	Name string
	// Prepare creates what records need (a table, a bucket); idempotent.
	Prepare func(ctx context.Context, target string) error
	// Open connects to the resource at target through dial.
	Open func(ctx context.Context, target string, dial DialFunc) (Resource, error)
	// Identity names the resource in a result, without credentials.
	Identity func(target string) string
}

var kinds = map[string]Kind{}

// Register adds a kind. Test code registers deliberately wrong fences to
// show the kit catches them.
func Register(k Kind) { kinds[k.Name] = k }

// Lookup finds a registered kind.
func Lookup(name string) (Kind, error) {
	k, ok := kinds[name]
	if !ok {
		var names []string
		for n := range kinds {
			names = append(names, n)
		}
		sort.Strings(names)
		return Kind{}, fmt.Errorf("pausetest: unknown resource kind %q (have %v)", name, names)
	}
	return k, nil
}
