// Package lockclient is the Go client of Lockplane.
//
// A Client holds one gRPC connection to the arbiter and one etcd lease per
// TTL (a session is one lease per identity and TTL, ADR-10). Client.Session
// returns a class's handle on the lease of the class's TTL: classes of one
// TTL share the lease, its keepalive, its deadline, CanStart and OnFence,
// and a Close or a fence of the lease ends the holds of all of them. Each
// handle names its own class in its Acquires and Releases, since a key's
// class picks its cluster. A Session's Lock returns a Hold carrying the
// fencing token to present at the resource.
//
// The client learns a class's TTL only from OpenSession's answer. The first
// Session of a class therefore opens a lease; if the Client already has a
// live lease of that TTL, it uses the old one and closes the new one in
// the background.
// Later Sessions of the class find the TTL in the Client's cache and cost
// no call while its lease lives.
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
// Lock and Release are serialised per key per lease: a Lock of a key whose
// Release is in flight waits for its answer, then acquires afresh. After an
// Acquire or Release whose outcome is unknown (NO_QUORUM, a deadline, a
// lost connection), the client ends whatever hold the lease may have on
// the key before the key can be locked on it again, so a grant whose answer
// was lost does not stay held until the lease ends. A key held on a lease is
// locked on it again only in the class it was locked in.
//
// A lease that ended locally (fenced or closed) may still hold keys at etcd
// until it expires there, normally within a TTL (longer across an etcd
// leader change). Its holds have ended, so a key it still holds is
// contention, not a leak: the service's LEAKED naming it makes TryLock
// fail with CONTENDED and Lock wait. No time bounds how long etcd may keep
// it (each leader change restarts its expiry), and etcd never reuses a
// lease ID, so the client remembers its most recent 1024 ended leases.
package lockclient

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/identity"
	"github.com/lockplane/lockplane/services/client/internal/testhook"
	"github.com/lockplane/lockplane/services/client/profile"
	"google.golang.org/grpc"
)

var errClosed = errors.New("lockclient: the client is closed")

// Config says where the arbiter is and who the caller is.
type Config struct {
	// Target is the arbiter's gRPC address, host:port, or any target
	// gRPC resolves: xds:///NAME routes each key to one arbiter through
	// the fan-in tier's control plane once the program imports
	// google.golang.org/grpc/xds and GRPC_XDS_BOOTSTRAP names its
	// bootstrap (docs/fan-in.md).
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

	mu sync.Mutex
	// sessions has each class's handle, by the name Session was given; the
	// handle's lease TTL is the class's, so it is asked for only once.
	sessions map[string]*Session
	// leases has the current lease of each TTL, the one Session hands out.
	leases map[time.Duration]*lease
	// running has every lease of c that has not ended: the current ones
	// and any replaced while still running, whose holds are still c's. A
	// replaced lease is closed once it holds nothing.
	running map[*lease]bool
	// opening has each class's open in flight.
	opening map[string]*pending
	// closed is set by Close: an open that ends after it hands out nothing.
	closed bool
	// retired has the leases c ended (fenced or closed), by ID;
	// retiredIDs has them oldest first, at most maxRetired.
	retired    map[int64]bool
	retiredIDs []int64
}

// pending is an open in flight; done is closed when it ends, err set
// before.
type pending struct {
	done chan struct{}
	err  error
	// callerGone is set if err came from the opener's own ctx: it is not
	// the open's answer, so a waiter opens itself.
	callerGone bool
}

const (
	// openTimeout bounds an open, which Sessions of the class share,
	// whatever the opener's ctx.
	openTimeout = 30 * time.Second
	// closeTimeout bounds a background CloseSession: of a duplicate lease,
	// or of a replaced one that holds nothing. Best effort: not renewed,
	// the lease expires within its TTL even if the close is lost.
	closeTimeout = 5 * time.Second
	// maxRetired bounds how many ended leases c remembers.
	maxRetired = 1024
)

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
	return &Client{conn: conn, api: lockv1.NewLockServiceClient(conn), instance: newInstance(),
		sessions: map[string]*Session{}, leases: map[time.Duration]*lease{}, running: map[*lease]bool{}, opening: map[string]*pending{}, retired: map[int64]bool{}}
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

// Session returns the class's handle ("" is the default class) on a lease
// of the class's TTL: the class's own lease while it holds (or is locking
// or releasing) a key of the class, so nested Locks share the grant;
// failing that, a live lease (its keepalives succeed) of the TTL, the
// current one if it is live; failing that, the class's own lease until it
// ends (its CanStart says when work may start); failing that, a new lease,
// which becomes the current one unless by then another is live. Classes of
// one TTL share the current lease: their Sessions have one ID, and closing
// or losing it ends the holds of every one of them. A lease that stops
// being current runs on while it holds anything, then is closed: a handle
// on it then fails with ErrFenced, and Session gives the current one.
//
// Session makes its calls without holding up the Client: Locks meanwhile
// proceed, and concurrent Sessions of one class share one OpenSession,
// bounded by its own deadline (at most openTimeout). A Session waiting for
// it returns its error, or its own ctx's; if the open failed only because
// its caller's ctx ended, the waiter opens itself.
func (c *Client) Session(ctx context.Context, class string) (*Session, error) {
	for {
		c.mu.Lock()
		if s := c.usable(class); s != nil {
			c.mu.Unlock()
			return s, nil
		}
		p, busy := c.opening[class]
		if !busy {
			p = &pending{done: make(chan struct{})}
			c.opening[class] = p
		}
		c.mu.Unlock()
		if !busy {
			return c.open(ctx, class, p)
		}
		testhook.AwaitingOpen(class)
		select {
		case <-p.done:
			if p.err != nil && !p.callerGone {
				return nil, p.err
			}
			// Look again: the open succeeded, or its caller gave up.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// usable is the class's handle if it has one worth keeping, per Session,
// else nil. Called with c.mu held.
func (c *Client) usable(class string) *Session {
	s := c.sessions[class]
	if s == nil {
		return nil
	}
	if s.lease.holdsClass(s.class) {
		return s
	}
	if l := c.liveLease(s.lease.ttl); l != nil && l != s.lease {
		return c.handle(class, l, s.class)
	}
	if s.lease.isFenced() {
		return nil
	}
	return s
}

// open opens a lease for class, the one open of it in flight, and hands
// out the class's handle on it, or on a live lease of its TTL if there is
// one by the time the lease is granted. It ends by recording its error in
// p and closing p.done.
func (c *Client) open(ctx context.Context, class string, p *pending) (s *Session, err error) {
	defer func() {
		p.err, p.callerGone = err, err != nil && ctx.Err() != nil
		c.mu.Lock()
		delete(c.opening, class)
		c.mu.Unlock()
		close(p.done)
	}()
	octx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	resp, sent, err := requestLease(octx, c.api, class, c.instance)
	if err != nil {
		return nil, err
	}
	ttl := resp.GetTtl().AsDuration()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		// Never renewed, the lease expires within its TTL.
		return nil, errClosed
	}
	l := c.liveLease(ttl)
	if l == nil {
		l = startLease(c.api, resp, sent, c)
		c.running[l] = true
		c.setCurrent(l)
	} else {
		// Only now is the class's TTL known, and a live lease has it:
		// keep one lease per TTL.
		c.closeSoon(resp.GetSessionId())
	}
	return c.handle(class, l, resp.GetClass()), nil
}

// liveLease is a live lease of ttl (its keepalives succeeding): the
// current one if live, else a running one, made current; else nil. Called
// with c.mu held.
func (c *Client) liveLease(ttl time.Duration) *lease {
	if l := c.leases[ttl]; l != nil && l.live() {
		return l
	}
	for l := range c.running {
		if l.ttl == ttl && l.live() {
			c.setCurrent(l)
			return l
		}
	}
	return nil
}

// setCurrent makes l the current lease of its TTL; the one it replaces is
// closed if it holds nothing, else once it does not (idle). Called with
// c.mu held.
func (c *Client) setCurrent(l *lease) {
	old := c.leases[l.ttl]
	c.leases[l.ttl] = l
	if old != nil && old != l {
		c.closeIfIdle(old)
	}
}

// idle is told by l that its last hold is gone: if l is not current,
// nothing hands it out again, so it is closed.
func (c *Client) idle(l *lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running[l] && c.leases[l.ttl] != l {
		c.closeIfIdle(l)
	}
}

// closeIfIdle ends l if it holds nothing, closing it in the background.
// Called with c.mu held.
func (c *Client) closeIfIdle(l *lease) {
	if l.end(true) {
		c.retireLocked(l)
		c.closeSoon(l.id)
	}
}

// closeSoon closes session id in the background, within closeTimeout.
func (c *Client) closeSoon(id int64) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		c.api.CloseSession(ctx, &lockv1.CloseSessionRequest{SessionId: id})
	}()
}

// handle makes and remembers the Session of class (as asked for) on l;
// name is the class's name as the service resolved it. Called with c.mu
// held.
func (c *Client) handle(class string, l *lease, name string) *Session {
	s := &Session{lease: l, class: name}
	c.sessions[class] = s
	return s
}

// heldByAnother returns c's lease other than l that holds key (or is
// acquiring or releasing it), or nil. It looks at every lease of c that
// has not ended, current or replaced; not at ended ones (fenced or
// closed), whose holds ended with them: what such a lease may still hold
// at etcd frees when it expires there, and the service's LEAKED naming it
// is treated as contention (lease.heldByRetired).
func (c *Client) heldByAnother(l *lease, key string) *lease {
	c.mu.Lock()
	others := make([]*lease, 0, len(c.running))
	for o := range c.running {
		if o != l {
			others = append(others, o)
		}
	}
	c.mu.Unlock()
	for _, o := range others {
		o.mu.Lock()
		_, ok := o.holds[key]
		ok = ok && !o.fenced
		o.mu.Unlock()
		if ok {
			return o
		}
	}
	return nil
}

// retire records that l has ended, fenced or closed: it is no longer
// running, nor current, and its holds have ended, but until etcd expires it
// it may still hold keys there. Only the most recent maxRetired ended
// leases are remembered.
func (c *Client) retire(l *lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retireLocked(l)
}

// retireLocked is retire, called with c.mu held.
func (c *Client) retireLocked(l *lease) {
	delete(c.running, l)
	if c.leases[l.ttl] == l {
		delete(c.leases, l.ttl)
	}
	if !c.retired[l.id] {
		c.retired[l.id] = true
		c.retiredIDs = append(c.retiredIDs, l.id)
	}
	for len(c.retiredIDs) > maxRetired {
		delete(c.retired, c.retiredIDs[0])
		c.retiredIDs = c.retiredIDs[1:]
	}
}

// retiredLease reports whether session id is a lease c has ended.
func (c *Client) retiredLease(id int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.retired[id]
}

// Inspect reports who holds key, a key of class cls (the default class
// when empty; the class picks the key's cluster). It never returns the
// token.
func (c *Client) Inspect(ctx context.Context, key string, cls ...string) (*lockv1.InspectResponse, error) {
	return c.api.Inspect(routedBy(ctx, key), &lockv1.InspectRequest{Key: key, Class: firstOr(cls, "")})
}

func firstOr(s []string, def string) string {
	if len(s) > 0 {
		return s[0]
	}
	return def
}

// Close closes every lease, releasing their holds, and the connection.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	ls := c.running
	c.closed = true
	c.sessions, c.leases, c.running = map[string]*Session{}, map[time.Duration]*lease{}, map[*lease]bool{}
	c.mu.Unlock()
	var errs []error
	for l := range ls {
		errs = append(errs, l.close(ctx))
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
