// Package unsafelocker holds deliberately broken lockers: the release
// gate's negative controls. Each one is the kind of lock real systems have
// shipped; the gate must report every history run on one as violating.
// Nothing outside test/ may import this package.
package unsafelocker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/client/token"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// WatchGrant takes a key straight from etcd the way a hand-rolled recipe
// does: if a read finds the key free, or a watch reports it deleted, it
// writes the key with a blind Put and counts itself the holder. No
// transaction compares the key, so two waiters woken by one delete both
// "win" (ADR-15: a notification must only trigger an attempt). Its holders
// trust a local timer for their lease, as Redlock does, rather than their
// keepalives. Tokens are minted from the Put's revision, so a fenced
// resource still orders the writes: what breaks is mutual exclusion.
type WatchGrant struct {
	cli   *clientv3.Client
	ttl   time.Duration
	mu    sync.Mutex
	lease clientv3.LeaseID
}

// DialWatchGrant connects to etcd; each client has one lease of ttl.
func DialWatchGrant(endpoints []string, ttl time.Duration) (*WatchGrant, error) {
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("unsafelocker: etcd endpoints are required")
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("unsafelocker: ttl %s is under a second", ttl)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	return &WatchGrant{cli: cli, ttl: ttl}, nil
}

// session returns the client's lease, granting one and keeping it alive.
func (w *WatchGrant) session(ctx context.Context) (clientv3.LeaseID, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.lease != 0 {
		return w.lease, nil
	}
	lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	g, err := w.cli.Grant(lctx, int64(w.ttl/time.Second))
	if err != nil {
		return 0, err
	}
	ch, err := w.cli.KeepAlive(context.Background(), g.ID)
	if err != nil {
		return 0, err
	}
	w.lease = g.ID
	go func() {
		for range ch {
		}
		// Lease lost: the next Lock grants a new one.
		w.mu.Lock()
		if w.lease == g.ID {
			w.lease = 0
		}
		w.mu.Unlock()
	}()
	return g.ID, nil
}

// Lock waits until the key looks free, then writes it without comparing.
func (w *WatchGrant) Lock(ctx context.Context, key string) (*Grant, error) {
	lease, err := w.session(ctx)
	if err != nil {
		return nil, &SessionError{Err: err}
	}
	for {
		get, err := w.cli.Get(ctx, key)
		if err != nil {
			return nil, &LockError{Lease: int64(lease), Err: err}
		}
		if len(get.Kvs) > 0 {
			if err := w.waitDelete(ctx, key, get.Header.Revision+1); err != nil {
				return nil, &LockError{Lease: int64(lease), Err: err}
			}
		}
		// The key was free a moment ago, or a watch said it went: take it.
		put, err := w.cli.Put(ctx, key, fmt.Sprint(int64(lease)), clientv3.WithLease(lease))
		if err != nil {
			return nil, &LockError{Lease: int64(lease), Err: err}
		}
		tok, err := token.Mint(1, put.Header.Revision)
		if err != nil {
			return nil, err
		}
		return &Grant{w: w, key: key, lease: lease, token: tok, until: time.Now().Add(w.ttl)}, nil
	}
}

func (w *WatchGrant) waitDelete(ctx context.Context, key string, from int64) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range w.cli.Watch(wctx, key, clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	return ctx.Err()
}

// Close ends the client's lease and connection.
func (w *WatchGrant) Close(ctx context.Context) error {
	w.mu.Lock()
	lease := w.lease
	w.mu.Unlock()
	if lease != 0 {
		w.cli.Revoke(ctx, lease)
	}
	return w.cli.Close()
}

// Grant is one key WatchGrant believes it holds.
type Grant struct {
	w     *WatchGrant
	key   string
	lease clientv3.LeaseID
	token token.Token
	until time.Time
}

// Token is minted from the Put's revision.
func (g *Grant) Token() token.Token { return g.token }

// Session is the lease the key was written on.
func (g *Grant) Session() int64 { return int64(g.lease) }

// CanStart trusts a local timer started at the grant.
func (g *Grant) CanStart() bool { return time.Now().Before(g.until) }

// Release deletes the key, whoever wrote it last.
func (g *Grant) Release(ctx context.Context) error {
	_, err := g.w.cli.Delete(ctx, g.key)
	return err
}

// SessionError means no lease could be granted.
type SessionError struct{ Err error }

func (e *SessionError) Error() string { return "unsafelocker: no lease: " + e.Err.Error() }
func (e *SessionError) Unwrap() error { return e.Err }

// LockError is a failed Lock on the client's lease.
type LockError struct {
	Lease int64
	Err   error
}

func (e *LockError) Error() string { return e.Err.Error() }
func (e *LockError) Unwrap() error { return e.Err }
