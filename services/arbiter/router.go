package arbiter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/reason"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
)

// RouterConfig configures a Router.
type RouterConfig struct {
	// Config is the coord cluster's arbiter; its classes, authorizer,
	// timeouts and metrics serve every cluster.
	Config
	// Shards are the entity tier's clusters by name, as the shard map
	// names them. Without shards the entity tier is served by the coord
	// cluster (ADR-07).
	Shards map[string]Etcd
	// Region is this arbiter's region; Homes says where a namespace is
	// homed ("" for this region). A key of another region's namespace is
	// refused with WRONG_REGION naming the region, never forwarded (ADR-08).
	Region string
	Homes  Homes
}

// Homes says which region a namespace is homed to.
type Homes interface {
	RegionOf(namespace string) string
}

// Router serves lockplane.lock.v1 for a region's clusters: it picks each
// key's cluster by its class's tier and, on the entity tier, by the shard
// map on the coord cluster, then lets that cluster's Arbiter decide. A
// session is a lease on the coord cluster plus, on each entity shard it
// holds on, a lease of its own recorded under the coord lease; a keepalive
// renews them all, and fails if any fails, so a holder's deadline covers
// every hold.
type Router struct {
	lockv1.UnimplementedLockServiceServer
	cfg    RouterConfig
	coord  *Arbiter
	shards map[string]*Arbiter
	// smap is the current shard map; nil until loaded.
	smap atomic.Pointer[shardmap.Map]
	// leases caches a session's lease per shard; the coord record is the
	// truth.
	leases sync.Map // shardLease -> *cachedLease
}

type shardLease struct {
	session int64
	shard   string
}

// NewRouter returns a Router over the coord cluster and the shards.
func NewRouter(cfg RouterConfig) (*Router, error) {
	coord, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	ro := &Router{cfg: cfg, coord: coord, shards: map[string]*Arbiter{}}
	coord.admin.router = ro
	if cfg.Metrics != nil && len(cfg.Shards) > 0 {
		if err := cfg.Metrics.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lockplane_shard_map_version",
			Help: "The entity shard map version this arbiter routes by (0 until loaded)."}, func() float64 {
			if m := ro.smap.Load(); m != nil {
				return float64(m.Version)
			}
			return 0
		})); err != nil {
			return nil, err
		}
	}
	for name, etcd := range cfg.Shards {
		sc := cfg.Config
		sc.Etcd, sc.Cluster, sc.Metrics = etcd, name, nil
		a, err := New(sc)
		if err != nil {
			return nil, err
		}
		// One set of metrics, told apart by the cluster label, and one
		// quota usage: limits span the region's clusters.
		a.metrics, a.usage, a.shardOf = coord.metrics, coord.usage, true
		coord.metrics.live.add(a)
		ro.shards[name] = a
	}
	return ro, nil
}

func (ro *Router) shardNames() []string {
	names := slices.Collect(maps.Keys(ro.shards))
	slices.Sort(names)
	return names
}

func (ro *Router) clusters() shardmap.Clusters {
	c := shardmap.Clusters{Coord: ro.coord.etcd, Shards: map[string]shardmap.Etcd{}, OpTimeout: ro.coord.cfg.OpTimeout}
	for name, a := range ro.shards {
		c.Shards[name] = a.etcd
	}
	return c
}

// Coord is the coord cluster's arbiter (admin RPCs, epoch, health).
func (ro *Router) Coord() *Arbiter { return ro.coord }

// Shard is the named entity shard's arbiter, or nil.
func (ro *Router) Shard(name string) *Arbiter { return ro.shards[name] }

// Register adds the routed lock service and the coord cluster's admin,
// health and reflection services to s.
func (ro *Router) Register(s *grpc.Server) {
	lockv1.RegisterLockServiceServer(s, ro)
	ro.coord.registerOthers(s)
}

// Run keeps every cluster's epoch and the shard map current until ctx ends.
func (ro *Router) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range ro.all() {
		wg.Go(func() { a.Run(ctx) })
	}
	if len(ro.shards) > 0 {
		wg.Go(func() { ro.watchMap(ctx) })
		wg.Go(func() { ro.sweepLeases(ctx) })
	}
	wg.Wait()
}

// Ready is the coord cluster's Ready, the shard map loaded, and Ready of
// every shard the map routes to. A configured shard the map does not name
// yet (one about to be added) may have no epoch record: the add gives it one.
func (ro *Router) Ready(ctx context.Context) error {
	if err := ro.coord.Ready(ctx); err != nil {
		return fmt.Errorf("cluster %s: %w", ro.coord.cfg.Cluster, err)
	}
	if len(ro.shards) == 0 {
		return nil
	}
	if ro.smap.Load() == nil {
		if err := ro.ensureMap(ctx); err != nil {
			return err
		}
		if err := ro.loadMap(ctx); err != nil {
			return err
		}
	}
	m := ro.smap.Load()
	for _, name := range m.Shards {
		a := ro.shards[name]
		if a == nil {
			continue // routed by other arbiters; keys homed there get SHARD_UNKNOWN here
		}
		if err := a.Ready(ctx); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
	}
	return nil
}

// ensureMap writes map version 1 over this arbiter's shards if the coord
// cluster has no map: a region's first arbiter does, the rest find it
// (the store is guarded on absence).
func (ro *Router) ensureMap(ctx context.Context) error {
	// Init reads and stamps every shard: a few calls, one bound.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(2+len(ro.shards)*2)*ro.coord.cfg.OpTimeout)
	defer cancel()
	_, _, found, err := shardmap.Load(ctx, ro.coord.etcd)
	if err != nil || found {
		return err
	}
	if _, err := shardmap.Init(ctx, ro.clusters(), ro.shardNames(), nil); err != nil && !errors.Is(err, shardmap.ErrConflict) {
		return fmt.Errorf("shard map: %w", err)
	}
	ro.coord.log.Info("shard map initialised", "shards", ro.shardNames())
	return nil
}

// Drain drains every cluster's arbiter.
func (ro *Router) Drain() {
	for _, a := range ro.all() {
		a.Drain()
	}
}

func (ro *Router) all() []*Arbiter {
	out := []*Arbiter{ro.coord}
	for _, a := range ro.shards {
		out = append(out, a)
	}
	return out
}

// route checks the caller may use key (before anything else, ADR-19),
// then picks its cluster: the coord cluster, or the entity shard the map
// homes it to, with ctx carrying the map version for the grant to check.
func (ro *Router) route(ctx context.Context, key, className string) (*Arbiter, string, context.Context, error) {
	r, err := ro.coord.admit(ctx, key, className)
	if err != nil {
		return nil, "", ctx, err
	}
	ns := lockkey.Namespace(key)
	if ro.cfg.Homes != nil {
		if home := ro.cfg.Homes.RegionOf(ns); home != "" && home != ro.cfg.Region {
			ro.coord.metrics.refused(r.labels, lockv1.ErrorReason_WRONG_REGION)
			return nil, "", ctx, refusal(codes.FailedPrecondition, lockv1.ErrorReason_WRONG_REGION,
				fmt.Sprintf("namespace %s is homed to region %s; call that region's arbiters", ns, home), "region", home)
		}
	}
	if r.class.Tier != class.TierEntity || len(ro.shards) == 0 {
		return ro.coord, "", ctx, nil
	}
	m := ro.smap.Load()
	if m == nil {
		if err := ro.loadMap(ctx); err != nil {
			return nil, "", ctx, err
		}
		m = ro.smap.Load()
	}
	if m.Moving(key) {
		return nil, "", ctx, refusal(codes.Unavailable, lockv1.ErrorReason_MOVING,
			fmt.Sprintf("key %s's range is moving to shard %s; retry shortly", key, m.Adding))
	}
	name := m.Home(key)
	a := ro.shards[name]
	if a == nil {
		return nil, "", ctx, refusal(codes.Unavailable, lockv1.ErrorReason_SHARD_UNKNOWN,
			fmt.Sprintf("shard map version %d homes the key to shard %s, which this arbiter has no client for", m.Version, name), "shard", name)
	}
	return a, name, withMapVersion(ctx, m.Version), nil
}

// Acquire implements lockv1.LockServiceServer. A shard serving a newer
// map than this arbiter's refuses; the map is read again and the key
// routed once more.
func (ro *Router) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	resp, err := ro.acquire(ctx, req)
	if r, meta := reason.Info(err); r == lockv1.ErrorReason_MOVING && meta["map_version"] != "" {
		if v, _ := strconv.ParseInt(meta["map_version"], 10, 64); ro.mapBehind(v) && ro.loadMap(ctx) == nil {
			resp, err = ro.acquire(ctx, req)
		}
	}
	return resp, err
}

// mapBehind reports whether this arbiter's map is older than version v.
func (ro *Router) mapBehind(v int64) bool {
	m := ro.smap.Load()
	return m != nil && m.Version < v
}

func (ro *Router) acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	a, shard, ctx, err := ro.route(ctx, req.GetKey(), req.GetClass())
	if err != nil || shard == "" {
		if err != nil {
			return nil, err
		}
		return a.Acquire(ctx, req)
	}
	lease, err := ro.shardLease(ctx, req.GetSessionId(), shard, true)
	if err != nil {
		return nil, err
	}
	sreq := proto.CloneOf(req)
	sreq.SessionId = lease
	resp, err := a.Acquire(ctx, sreq)
	if err != nil {
		return nil, err
	}
	resp.SessionId = req.GetSessionId()
	return resp, nil
}

// Release implements lockv1.LockServiceServer. On a shard it releases
// with the session's lease there, any_token included: the hold it ends
// must be on that lease; a session with no lease there holds nothing.
func (ro *Router) Release(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	a, shard, rctx, err := ro.route(ctx, req.GetKey(), req.GetClass())
	if req.GetAnyToken() && ro.onEntityTier(req.GetClass()) && (err == nil || isMoving(err) || reason.Of(err) == lockv1.ErrorReason_SHARD_UNKNOWN) {
		return ro.releaseAnyOnEveryShard(ctx, req)
	}
	ctx = rctx
	if err != nil {
		// A moving range still takes releases: they are what it waits for.
		if shard, a = ro.homeOf(req.GetKey(), req.GetClass()); a == nil || !isMoving(err) {
			return nil, err
		}
	}
	if shard == "" {
		return a.Release(ctx, req)
	}
	// Before the lease lookup, which answers "nothing held" without the
	// shard's own checks.
	if err := releaseArgs(req); err != nil {
		return nil, err
	}
	lease, err := ro.shardLease(ctx, req.GetSessionId(), shard, false)
	if err != nil || lease == 0 {
		return &lockv1.ReleaseResponse{}, err
	}
	sreq := proto.CloneOf(req)
	sreq.SessionId = lease
	return a.Release(ctx, sreq)
}

// Inspect implements lockv1.LockServiceServer. On a shard, the holder's
// session is reported as the session its lease there belongs to.
func (ro *Router) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	a, shard, ctx, err := ro.route(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		if shard, a = ro.homeOf(req.GetKey(), req.GetClass()); a == nil || !isMoving(err) {
			return nil, err
		}
	}
	resp, err := a.Inspect(ctx, req)
	if err != nil || shard == "" || resp.GetHolder() == nil {
		return resp, err
	}
	octx, cancel := ro.coord.opCtx(ctx)
	defer cancel()
	owner, err := ro.coord.etcd.Get(octx, lockkey.ShardLeaseOwner(shard, resp.GetHolder().GetSessionId()))
	if err != nil {
		return nil, ro.coord.etcdFailure(ctx, err)
	}
	if len(owner.Kvs) > 0 {
		s, _ := strconv.ParseInt(string(owner.Kvs[0].Value), 10, 64)
		resp.Holder.SessionId = s
	}
	return resp, nil
}

// ValidateToken implements lockv1.LockServiceServer.
func (ro *Router) ValidateToken(ctx context.Context, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	a, _, ctx, err := ro.route(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		if _, a = ro.homeOf(req.GetKey(), req.GetClass()); a == nil || !isMoving(err) {
			return nil, err
		}
	}
	return a.ValidateToken(ctx, req)
}

// homeOf is the shard a moving key still lives on (its source).
func (ro *Router) homeOf(key, className string) (string, *Arbiter) {
	m := ro.smap.Load()
	if m == nil || !ro.onEntityTier(className) {
		return "", nil
	}
	name := m.Home(key)
	return name, ro.shards[name]
}

// onEntityTier reports whether className's keys live on the entity shards.
func (ro *Router) onEntityTier(className string) bool {
	cls, err := ro.coord.cfg.Classes.Lookup(className)
	return err == nil && cls.Tier == class.TierEntity && len(ro.shards) > 0
}

// releaseAnyOnEveryShard ends whatever hold the session has on the key on
// every shard it has a lease on, not only the shard this arbiter's map
// homes the key to: the grant whose answer was lost may have been routed
// by a newer or older map than this arbiter's. Each shard's Txn compares
// the session's lease there, so a shard that never held the key for this
// session deletes nothing. A shard this arbiter has no client for is
// SHARD_UNKNOWN: the client tries again, through another arbiter.
func (ro *Router) releaseAnyOnEveryShard(ctx context.Context, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := releaseArgs(req); err != nil {
		return nil, err
	}
	leases, err := ro.shardLeases(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &lockv1.ReleaseResponse{}
	for _, name := range slices.Sorted(maps.Keys(leases)) {
		a := ro.shards[name]
		if a == nil {
			return nil, refusal(codes.Unavailable, lockv1.ErrorReason_SHARD_UNKNOWN,
				fmt.Sprintf("the session has a lease on shard %s, which this arbiter has no client for", name), "shard", name)
		}
		sreq := proto.CloneOf(req)
		sreq.SessionId = leases[name]
		resp, err := a.Release(ctx, sreq)
		if err != nil {
			return nil, err
		}
		out.Released = out.Released || resp.GetReleased()
	}
	return out, nil
}

func isMoving(err error) bool {
	return reason.Of(err) == lockv1.ErrorReason_MOVING
}

// loadMap reads the shard map once.
func (ro *Router) loadMap(ctx context.Context) error {
	octx, cancel := ro.coord.opCtx(ctx)
	defer cancel()
	m, _, found, err := shardmap.Load(octx, ro.coord.etcd)
	switch {
	case err != nil && octx.Err() != nil:
		return ro.coord.etcdFailure(ctx, err)
	case err != nil:
		return refusal(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
	case !found:
		return refusal(codes.Unavailable, lockv1.ErrorReason_SHARD_MAP_MISSING,
			"the coord cluster has no shard map ("+shardmap.Key+") yet; an arbiter writes it when it starts")
	}
	ro.setMap(m)
	return nil
}

func (ro *Router) setMap(m shardmap.Map) {
	if cur := ro.smap.Load(); cur == nil || m.Version >= cur.Version {
		ro.smap.Store(&m)
	}
}

// watchMap keeps the shard map current until ctx ends.
func (ro *Router) watchMap(ctx context.Context) {
	for ctx.Err() == nil {
		if err := ro.ensureMap(ctx); err != nil {
			ro.coord.log.Warn("shard map not initialised", "err", err)
		}
		m, rev, found, err := shardmap.Load(ctx, ro.coord.etcd)
		if err != nil {
			ro.coord.log.Warn("shard map unreadable", "err", err)
		} else if found {
			ro.setMap(m)
		}
		if err == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range ro.coord.etcd.Watch(wctx, shardmap.Key, clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if m, err := shardmap.Decode(ev.Kv.Value); err == nil {
						ro.setMap(m)
						ro.coord.log.Info("shard map changed", "version", m.Version, "shards", m.Shards, "adding", m.Adding)
					}
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
