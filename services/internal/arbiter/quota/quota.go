// Package quota enforces each identity's session and hold quotas.
//
// The quotas count live sessions and live holds across a region's
// clusters, for the lock core: a Gate per
// cluster's arbiter follows that cluster's records into a Usage the
// region's arbiters share, and refuses a new session or hold past the
// caller's limit. The lock core knows it only as a small interface
// (Run, Ready, Check). Rates limits a call per namespace (ValidateToken).
package quota

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// Limits are one identity's quotas: live sessions and live holds across
// the region's clusters. Zero is unlimited.
type Limits struct {
	Sessions, Holds int
}

// Quotas says each identity's limits.
type Quotas interface {
	LimitsFor(id spiffeid.ID) Limits
}

// Usage counts live sessions and holds per identity, as the clusters
// report them: a full read, then a watch whose events carry the previous
// record, so expiries and other arbiters' grants count too. Far below a
// limit the watched count is enough; near it, exact asks every watch for a
// progress notification and waits for it, so the count includes every
// write committed before the check.
type Usage struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced when a follower reports
	// by cluster, then identity: a cluster re-read replaces its own part.
	sessions, holds map[string]map[string]int
	// followers are the running watches, by cluster and prefix, with the
	// client to ask for progress and the revision their counts reach.
	followers map[string]*follower
}

type follower struct {
	etcd etcdcall.Etcd
	seen int64 // the revision the counts are complete to
}

// NewUsage is a Usage counting nothing yet.
func NewUsage() *Usage {
	return &Usage{changed: make(chan struct{}), sessions: map[string]map[string]int{}, holds: map[string]map[string]int{},
		followers: map[string]*follower{}}
}

// usageStream keys the followers' watches to a gRPC stream of their own,
// so progress requests reach them and no other watch.
func usageStream(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "lockplane-watch", "quota-usage")
}

func (u *Usage) count(of map[string]map[string]int, id string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := 0
	for _, ids := range of {
		n += ids[id]
	}
	return n
}

// follow registers a watch etcd has created, replacing its part of the
// counts with the read the watch continues from.
func (u *Usage) follow(name string, etcd etcdcall.Etcd, of map[string]map[string]int, cluster string, counts map[string]int, read int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	of[cluster] = counts
	u.followers[name] = &follower{etcd: etcd, seen: read}
	close(u.changed)
	u.changed = make(chan struct{})
}

// following waits until the named followers run.
func (u *Usage) following(ctx context.Context, names ...string) error {
	for {
		u.mu.Lock()
		missing, ch := 0, u.changed
		for _, n := range names {
			if u.followers[n] == nil {
				missing++
			}
		}
		u.mu.Unlock()
		if missing == 0 {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("quota usage: %d watches not running: %w", missing, ctx.Err())
		}
	}
}

func (u *Usage) unfollow(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.followers, name)
}

func (u *Usage) apply(name string, of map[string]map[string]int, cluster string, deltas map[string]int, rev int64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if of[cluster] == nil {
		of[cluster] = map[string]int{}
	}
	for id, d := range deltas {
		if of[cluster][id] += d; of[cluster][id] <= 0 {
			delete(of[cluster], id)
		}
	}
	if f := u.followers[name]; f != nil && rev > f.seen {
		f.seen = rev
		close(u.changed)
		u.changed = make(chan struct{})
	}
}

// exact waits until every follower has seen its cluster's revision as of
// the call (read linearizably), asking for progress notifications: the
// counts then include every write committed before it.
func (u *Usage) exact(ctx context.Context) error {
	u.mu.Lock()
	clients := map[etcdcall.Etcd][]string{}
	for name, f := range u.followers {
		clients[f.etcd] = append(clients[f.etcd], name)
	}
	u.mu.Unlock()
	want := map[string]int64{}
	for c, names := range clients {
		resp, err := c.Get(ctx, lockkey.EpochKey, clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		for _, n := range names {
			want[n] = resp.Header.Revision
		}
	}
	ask := func() error {
		for c := range clients {
			if err := c.RequestProgress(usageStream(ctx)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := ask(); err != nil {
		return err
	}
	// etcd drops a progress request while any watch of the stream is still
	// catching up (a new watch is, for up to 100 ms): ask again until
	// answered.
	again := time.NewTicker(100 * time.Millisecond)
	defer again.Stop()
	for {
		u.mu.Lock()
		done, ch := true, u.changed
		for name, rev := range want {
			if f := u.followers[name]; f != nil && f.seen < rev {
				done = false
			}
		}
		u.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-again.C:
			if err := ask(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// identityOf reads the owner of a session or hold record: both carry it.
func identityOf(raw []byte) string {
	var r struct {
		Identity string `json:"identity"`
	}
	json.Unmarshal(raw, &r)
	return r.Identity
}

// Config is one cluster's Gate.
type Config struct {
	// Quotas says each identity's limits; none (every Check passes, Run
	// follows nothing) when nil.
	Quotas Quotas
	// Usage is the counts the gate follows into and checks: one per
	// region, shared by a Router's arbiters, as limits span its clusters.
	Usage *Usage
	// Cluster names the cluster; Etcd is it, as the lock path's user.
	Cluster string
	Etcd    etcdcall.Etcd
	// Shard marks an entity shard, whose session records are shard leases
	// of coord sessions, counted on the coord cluster.
	Shard bool
	// Bound bounds every etcd call and logs; PollInterval spaces the
	// retries of a follow that failed.
	Bound        etcdcall.Bound
	PollInterval time.Duration
}

// Gate enforces Quotas on one cluster's arbiter.
type Gate struct{ cfg Config }

// New is the Gate of cfg.
func New(cfg Config) *Gate { return &Gate{cfg: cfg} }

// follow keeps the shared counts of the records under prefix on g's
// cluster current until ctx ends.
func (g *Gate) follow(ctx context.Context, prefix string, of map[string]map[string]int) {
	u, name := g.cfg.Usage, g.cfg.Cluster+prefix
	for ctx.Err() == nil {
		octx, cancel := g.cfg.Bound.Ctx(ctx)
		resp, err := g.cfg.Etcd.Get(octx, prefix, clientv3.WithPrefix())
		cancel()
		if err == nil {
			counts := map[string]int{}
			for _, kv := range resp.Kvs {
				counts[identityOf(kv.Value)]++
			}
			wctx, cancel := context.WithCancel(usageStream(ctx))
			// From the read's own revision, not the next: etcd answers a
			// progress request only once the store has reached every
			// watch's start. Events of that revision are in the read.
			read := resp.Header.Revision
			for wr := range g.cfg.Etcd.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(read), clientv3.WithPrevKV(), clientv3.WithCreatedNotify()) {
				if wr.Err() != nil {
					break
				}
				if wr.Created {
					// Progress requests need the stream: count from now on.
					u.follow(name, g.cfg.Etcd, of, g.cfg.Cluster, counts, read)
					continue
				}
				deltas := map[string]int{}
				for _, ev := range wr.Events {
					if ev.Kv.ModRevision <= read {
						continue
					}
					// A handoff overwrites a hold: one identity's hold ends,
					// another's begins.
					if ev.PrevKv != nil {
						deltas[identityOf(ev.PrevKv.Value)]--
					}
					if ev.Type == clientv3.EventTypePut {
						deltas[identityOf(ev.Kv.Value)]++
					}
				}
				u.apply(name, of, g.cfg.Cluster, deltas, wr.Header.Revision)
			}
			cancel()
			u.unfollow(name)
		}
		select {
		case <-ctx.Done():
		case <-time.After(g.cfg.PollInterval):
		}
	}
}

// followers names g's followers.
func (g *Gate) followers() []string {
	if g.cfg.Quotas == nil {
		return nil
	}
	if g.cfg.Shard {
		return []string{g.cfg.Cluster + lockkey.HoldPrefix}
	}
	return []string{g.cfg.Cluster + lockkey.SessionPrefix, g.cfg.Cluster + lockkey.HoldPrefix}
}

// Run follows g's cluster's sessions (unless they are shard leases,
// counted on the coord cluster) and holds until ctx ends.
func (g *Gate) Run(ctx context.Context) {
	if g.cfg.Quotas == nil {
		return
	}
	var wg sync.WaitGroup
	if !g.cfg.Shard {
		wg.Go(func() { g.follow(ctx, lockkey.SessionPrefix, g.cfg.Usage.sessions) })
	}
	wg.Go(func() { g.follow(ctx, lockkey.HoldPrefix, g.cfg.Usage.holds) })
	wg.Wait()
}

// Ready waits until g's cluster's counts are followed (at once without
// Quotas).
func (g *Gate) Ready(ctx context.Context) error {
	return g.cfg.Usage.following(ctx, g.followers()...)
}

// What names what a quota limits: the live sessions or the live holds of
// an identity.
type What string

// The two quotas.
const (
	Sessions What = "sessions"
	Holds    What = "holds"
)

// Check refuses a new session or hold past the caller's limit with
// RESOURCE_EXHAUSTED, naming the limit.
func (g *Gate) Check(ctx context.Context, caller spiffeid.ID, what What) error {
	if g.cfg.Quotas == nil {
		return nil
	}
	lim := g.cfg.Quotas.LimitsFor(caller)
	u := g.cfg.Usage
	max, of := lim.Holds, u.holds
	if what == Sessions {
		max, of = lim.Sessions, u.sessions
	}
	if max <= 0 {
		return nil
	}
	n := u.count(of, caller.String())
	if n >= max*3/4-1 {
		// Near the limit: count every write committed before this check.
		ectx, cancel := context.WithDeadline(ctx, g.cfg.Bound.Deadline(ctx))
		err := u.exact(ectx)
		cancel()
		if err != nil {
			g.cfg.Bound.Logger.Warn("quota usage not confirmed; checking the watched count", "err", err)
		}
		n = u.count(of, caller.String())
	}
	if n >= max {
		return refuse.With(codes.ResourceExhausted, lockv1.ErrorReason_QUOTA_EXCEEDED,
			fmt.Sprintf("identity %s has %d live %s; its quota (LockGrant spec.quota.%s) is %d", caller, n, what, what, max),
			"limit", string(what), "quota", strconv.Itoa(max))
	}
	return nil
}
