// Package lockclient is the Go client of Lockplane.
//
// A Client holds one gRPC connection to the arbiter and one Session per lock
// class (one etcd lease per identity and TTL, ADR-10). A Session's Lock
// returns a Hold carrying the fencing token to present at the resource.
//
// What a holder may rely on (ADR-12):
//   - CanStart turns false at the first failed keepalive and true again at
//     the next success: check it before each unit of work.
//   - OnFence fires at the local deadline, the monotonic send time of the
//     last confirmed keepalive plus the TTL minus one second. Because etcd
//     restarts the lease's TTL only when it receives that keepalive, the
//     deadline always passes before etcd can expire the lease and grant the
//     key to someone else.
//   - Neither protects a holder that is paused past its deadline; only the
//     token checked at the resource does.
//
// Re-entrancy is counted here (ADR-13): a nested Lock of a key the session
// already holds returns the same token without calling the service, and only
// the outermost Release does.
//
// Lock and Release are serialised per key per session: a Lock of a key
// whose Release is in flight waits for its answer, then acquires afresh.
// After an Acquire or Release whose outcome is unknown (NO_QUORUM, a
// deadline, a lost connection), the session ends whatever hold it may have
// on the key before the key can be locked on it again, so a grant whose
// answer was lost does not stay held until the session ends.
package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/identity"
	"github.com/lockplane/lockplane/services/profile"
	"google.golang.org/grpc"
)

// Config says where the arbiter is and who the caller is.
type Config struct {
	// Target is the arbiter's gRPC address, host:port.
	Target string
	// Identity is the caller's SVID source.
	Identity identity.Source
	// ServerID is the arbiter's SPIFFE ID; the connection is refused to any
	// other server.
	ServerID string
	// DialOptions are added after the transport credentials.
	DialOptions []grpc.DialOption
}

// Client is a connection to the arbiter with its sessions.
type Client struct {
	conn *grpc.ClientConn
	api  lockv1.LockServiceClient
	// instance names this client to the service, so that a hold of this
	// process under two sessions is told apart from a replica's.
	instance string

	mu       sync.Mutex
	sessions map[string]*Session
}

// Dial connects to the arbiter with mTLS. The connection is made lazily; the
// first call fails if the arbiter is unreachable or not ServerID.
func Dial(cfg Config) (*Client, error) {
	if cfg.Target == "" {
		return nil, errors.New("lockclient: Config.Target is required")
	}
	if cfg.Identity == nil {
		return nil, errors.New("lockclient: Config.Identity is required")
	}
	creds, err := identity.ClientCredentials(cfg.Identity, cfg.ServerID)
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds)}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Target, opts...)
	if err != nil {
		return nil, fmt.Errorf("lockclient: dial %s: %w", cfg.Target, err)
	}
	return NewFromConn(conn), nil
}

// NewFromConn wraps an existing connection.
func NewFromConn(conn *grpc.ClientConn) *Client {
	return &Client{conn: conn, api: lockv1.NewLockServiceClient(conn), instance: newInstance(), sessions: map[string]*Session{}}
}

// newInstance draws the client's instance ID: 16 random hex digits, unique
// among a deployment's replicas with overwhelming probability.
func newInstance() string {
	return fmt.Sprintf("%016x", rand.Uint64())
}

// Instance is the ID this client sends with its sessions; Inspect shows a
// holder's.
func (c *Client) Instance() string { return c.instance }

// Conn is the underlying connection, for the admin API.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Session returns the client's live session for the class ("" is the
// default class), opening one if there is none.
func (c *Client) Session(ctx context.Context, class string) (*Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.sessions[class]; ok && !s.isFenced() {
		return s, nil
	}
	s, err := openSession(ctx, c.api, class, c.instance)
	if err != nil {
		return nil, err
	}
	s.owner = c
	c.sessions[class] = s
	return s, nil
}

// heldByAnother returns c's session other than s that holds key (or is
// acquiring or releasing it), or nil.
func (c *Client) heldByAnother(s *Session, key string) *Session {
	c.mu.Lock()
	others := make([]*Session, 0, len(c.sessions))
	for _, o := range c.sessions {
		if o != s {
			others = append(others, o)
		}
	}
	c.mu.Unlock()
	for _, o := range others {
		o.mu.Lock()
		_, ok := o.holds[key]
		o.mu.Unlock()
		if ok {
			return o
		}
	}
	return nil
}

// Inspect reports who holds key, a key of class cls (the default class
// when empty; the class picks the key's cluster). It never returns the
// token.
func (c *Client) Inspect(ctx context.Context, key string, cls ...string) (*lockv1.InspectResponse, error) {
	return c.api.Inspect(ctx, &lockv1.InspectRequest{Key: key, Class: firstOr(cls, "")})
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// Close closes every session, releasing their holds, and the connection.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	ss := c.sessions
	c.sessions = map[string]*Session{}
	c.mu.Unlock()
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.Close(ctx))
	}
	errs = append(errs, c.conn.Close())
	return errors.Join(errs...)
}

// DialProfile dials the arbiter a profile names, as one of the profile's
// identities ("" for its default).
func DialProfile(p *profile.Profile, identity string) (*Client, error) {
	src, err := p.Source(identity)
	if err != nil {
		return nil, err
	}
	return Dial(Config{Target: p.Endpoint, Identity: src, ServerID: p.ServerID})
}
