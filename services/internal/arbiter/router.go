package arbiter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
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
	// AdminShards are the same shards signed in as the Admin API's etcd
	// user (see Config.AdminEtcd). Nil uses each shard's Shards client (no
	// authentication); given, it must name every shard.
	AdminShards map[string]Etcd
	// Region is this arbiter's region; Homes says where a namespace is
	// homed ("" for this region). A key of another region's namespace is
	// refused with WRONG_REGION naming the region, never forwarded (ADR-08).
	Region string
	Homes  Homes
}

// adminShard is shard name's client as the Admin API's user.
func (cfg RouterConfig) adminShard(name string) Etcd {
	if c := cfg.AdminShards[name]; c != nil {
		return c
	}
	return cfg.Shards[name]
}

// Homes says which region a namespace is homed to.
type Homes interface {
	RegionOf(namespace string) string
}

// cluster is one cluster's arbiter as a Router uses it. The Router admits
// every call that names a key (authentication, key, class, authorisation)
// before it picks a cluster; the cluster serves the admitted request and
// does not check it again.
type cluster interface {
	acquireAdmitted(ctx context.Context, r request, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error)
	releaseAdmitted(ctx context.Context, r request, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error)
	inspectAdmitted(ctx context.Context, r request, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error)
	validateAdmitted(ctx context.Context, r request, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error)
	sessionLeases
	Run(ctx context.Context)
	Ready(ctx context.Context) error
	Drain()
}

// sessionLeases are sessions' leases on one cluster: on an entity shard,
// the shard leases of coord sessions.
type sessionLeases interface {
	openLease(ctx context.Context, caller spiffeid.ID, ttl time.Duration, instance string) (int64, error)
	discardLease(lease clientv3.LeaseID)
	renew(ctx context.Context, caller spiffeid.ID, session int64, owned *ownedSessions) *lockv1.KeepAliveResponse
	closeLease(ctx context.Context, lease int64) error
	// renewLease renews lease once, whoever's session it is.
	renewLease(ctx context.Context, lease int64, checked func() error) (ttl int64, failed bool, err error)
}

// coordCluster is the coord cluster's arbiter: a cluster that also opens
// sessions, whose records live there, and serves the region's admin and
// health services.
type coordCluster interface {
	cluster
	OpenSession(ctx context.Context, req *lockv1.OpenSessionRequest) (*lockv1.OpenSessionResponse, error)
	checkOwner(ctx context.Context, caller spiffeid.ID, session int64) error
	registerOthers(s *grpc.Server, admin adminv1.AdminServiceServer)
}

// Router serves lockplane.lock.v1 for a region's clusters: it admits each
// call (the only authorisation it gets), picks its key's cluster by its
// class's tier and, on the entity tier, by the shard map on the coord
// cluster, then lets that cluster's Arbiter decide. A session is a lease
// on the coord cluster plus, on each entity shard it holds on, a lease of
// its own recorded under the coord lease; a keepalive renews them all, and
// fails if any fails, so a holder's deadline covers every hold.
type Router struct {
	lockv1.UnimplementedLockServiceServer
	// etcdCalls bounds its own reads of the coord cluster (sessions' shard
	// lease records).
	etcdCalls
	cfg RouterConfig
	// gate admits every routed call: the one place it is authorised.
	gate    admitter
	metrics *metrics
	coord   coordCluster
	// coordEtcd is the coord cluster, where sessions and their shard lease
	// records live.
	coordEtcd Etcd
	// coordReads coalesces renewals' linearizable reads of shard lease
	// records into one read-only Txn per batch.
	coordReads *groupCommit
	shards     map[string]cluster
	table      *routeTable
	admin      adminv1.AdminServiceServer
	// leases caches a session's lease per shard; the coord record is the
	// truth.
	leases sync.Map // shardLease -> *cachedLease
	// renewals runs KeepAlive streams' renewals (serveKeepAlive).
	renewals *workers
	// hooks are the tests' synchronisation points; nil in production.
	hooks atomic.Pointer[testHooks]
}

type shardLease struct {
	session int64
	shard   string
}

// NewRouter returns a Router over the coord cluster and the shards. Their
// arbiters share one set of metrics, told apart by the cluster label, and
// one quota usage: limits span the region's clusters.
func NewRouter(cfg RouterConfig) (*Router, error) {
	if cfg.AdminShards != nil {
		for name := range cfg.Shards {
			if cfg.AdminShards[name] == nil {
				return nil, fmt.Errorf("arbiter: RouterConfig.AdminShards has no client of shard %s: with admin clients given, every shard needs one, or its admin writes would go as the lock path's user", name)
			}
		}
	}
	base, err := cfg.Config.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg.Config = base
	m, err := starting(cfg.Config)
	if err != nil {
		return nil, err
	}
	shared := collaborators{metrics: m, usage: quota.NewUsage()}
	coord := newArbiter(cfg.Config, shared)
	table := newRouteTable(cfg)
	if cfg.Metrics != nil && len(cfg.Shards) > 0 {
		if err := table.register(cfg.Metrics); err != nil {
			return nil, err
		}
	}
	ro := &Router{etcdCalls: newEtcdCalls(cfg.Config), cfg: cfg, renewals: newWorkers(workerIdle),
		gate: newAdmitter(cfg.Config, m), metrics: m, coord: coord, coordEtcd: cfg.Etcd, coordReads: newGroupRead(cfg.Etcd),
		shards: map[string]cluster{}, table: table}
	shared.shardOf = true
	arbiters := map[string]*Arbiter{}
	for name, etcd := range cfg.Shards {
		sc := cfg.Config
		sc.Etcd, sc.AdminEtcd, sc.Cluster, sc.Metrics = etcd, cfg.adminShard(name), name, nil
		arbiters[name] = newArbiter(sc, shared)
		ro.shards[name] = arbiters[name]
	}
	ro.admin = newAdmin(coord, arbiters, table)
	return ro, nil
}

// Register adds the routed lock service and the coord cluster's admin,
// health and reflection services to s.
func (ro *Router) Register(s *grpc.Server) {
	lockv1.RegisterLockServiceServer(s, ro)
	ro.coord.registerOthers(s, ro.admin)
}

// Run keeps every cluster's epoch and the shard map current until ctx ends.
func (ro *Router) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, c := range ro.all() {
		wg.Go(func() { c.Run(ctx) })
	}
	if len(ro.shards) > 0 {
		wg.Go(func() { ro.table.watch(ctx) })
		wg.Go(func() { ro.sweepLeases(ctx) })
	}
	wg.Wait()
}

// Ready is the coord cluster's Ready, the shard map loaded, and Ready of
// every shard the map routes to. A configured shard the map does not name
// yet (one about to be added) may have no epoch record: the add gives it one.
func (ro *Router) Ready(ctx context.Context) error {
	if err := ro.coord.Ready(ctx); err != nil {
		return fmt.Errorf("cluster %s: %w", ro.cfg.Cluster, err)
	}
	if len(ro.shards) == 0 {
		return nil
	}
	if ro.table.Current() == nil {
		if err := ro.table.ensure(ctx); err != nil {
			return err
		}
		if err := ro.table.Load(ctx); err != nil {
			return err
		}
	}
	m := ro.table.Current()
	for _, name := range m.Shards {
		c := ro.shards[name]
		if c == nil {
			continue // routed by other arbiters; keys homed there get SHARD_UNKNOWN here
		}
		if err := c.Ready(ctx); err != nil {
			return fmt.Errorf("cluster %s: %w", name, err)
		}
	}
	return nil
}

// Drain drains every cluster's arbiter.
func (ro *Router) Drain() {
	for _, c := range ro.all() {
		c.Drain()
	}
}

func (ro *Router) all() []cluster {
	out := []cluster{ro.coord}
	for _, c := range ro.shards {
		out = append(out, c)
	}
	return out
}

// route picks the cluster of a call admitted as r: the coord cluster, or
// the entity shard the map homes its key to. The request it returns is r
// as that cluster serves it, under the map version the key was homed by,
// for the grant to check.
func (ro *Router) route(ctx context.Context, r request) (cluster, string, request, error) {
	ns := lockkey.Namespace(r.key)
	if ro.cfg.Homes != nil {
		if home := ro.cfg.Homes.RegionOf(ns); home != "" && home != ro.cfg.Region {
			ro.metrics.refused(r.labels, lockv1.ErrorReason_WRONG_REGION)
			return nil, "", r, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_WRONG_REGION,
				fmt.Sprintf("namespace %s is homed to region %s; call that region's arbiters", ns, home), "region", home)
		}
	}
	if !ro.onEntityTier(r.class) {
		return ro.coord, "", r, nil
	}
	m := ro.table.Current()
	if m == nil {
		if err := ro.table.Load(ctx); err != nil {
			return nil, "", r, err
		}
		m = ro.table.Current()
	}
	if m.Moving(r.key) {
		return nil, "", r, refuse.With(codes.Unavailable, lockv1.ErrorReason_MOVING,
			fmt.Sprintf("key %s's range is moving to shard %s; retry shortly", r.key, m.Adding))
	}
	name := m.Home(r.key)
	c := ro.shards[name]
	if c == nil {
		return nil, "", r, refuse.With(codes.Unavailable, lockv1.ErrorReason_SHARD_UNKNOWN,
			fmt.Sprintf("shard map version %d homes the key to shard %s, which this arbiter has no client for", m.Version, name), "shard", name)
	}
	return c, name, r.on(name, m.Version), nil
}

// routeToSource is route, except that a key whose range is moving goes to
// the shard it still lives on (its source): a moving range still takes
// releases, which are what it waits for, and reads.
func (ro *Router) routeToSource(ctx context.Context, r request) (cluster, string, request, error) {
	c, shard, rr, err := ro.route(ctx, r)
	if err == nil || !isMoving(err) {
		return c, shard, rr, err
	}
	if shard, c, rr = ro.homeOf(r); c == nil {
		return nil, "", r, err
	}
	return c, shard, rr, nil
}

// Acquire implements lockv1.LockServiceServer. A shard serving a newer
// map than this arbiter's refuses; the map is read again and the key
// routed once more.
func (ro *Router) Acquire(ctx context.Context, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	r, err := ro.gate.admit(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	resp, err := ro.acquire(ctx, r, req)
	if why, meta := reason.Info(err); why == lockv1.ErrorReason_MOVING && meta["map_version"] != "" {
		if v, _ := strconv.ParseInt(meta["map_version"], 10, 64); ro.table.behind(v) && ro.table.Load(ctx) == nil {
			resp, err = ro.acquire(ctx, r, req)
		}
	}
	return resp, err
}

func (ro *Router) acquire(ctx context.Context, r request, req *lockv1.AcquireRequest) (*lockv1.AcquireResponse, error) {
	c, shard, rr, err := ro.route(ctx, r)
	if err != nil {
		return nil, err
	}
	if shard == "" {
		return c.acquireAdmitted(ctx, rr, req)
	}
	lease, err := ro.shardLease(ctx, r.caller, req.GetSessionId(), shard, true)
	if err != nil {
		// Refused before the shard's arbiter saw the call (no lease there:
		// say, no quorum): counted here, with the shard's labels.
		ro.metrics.admitted(rr.labels)
		ro.metrics.refused(rr.labels, reason.Of(err))
		return nil, err
	}
	sreq := proto.CloneOf(req)
	sreq.SessionId = lease
	// The hold records the session the caller knows, so that the shard's
	// LEAKED and Inspect name it from their own read.
	rr.coordSession = req.GetSessionId()
	resp, err := c.acquireAdmitted(ctx, rr, sreq)
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
	r, err := ro.gate.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	c, shard, rr, err := ro.routeToSource(ctx, r)
	if req.GetAnyToken() && ro.onEntityTier(r.class) && (err == nil || isMoving(err) || reason.Of(err) == lockv1.ErrorReason_SHARD_UNKNOWN) {
		return ro.releaseAnyOnEveryShard(ctx, r, req)
	}
	if err != nil {
		return nil, err
	}
	if shard == "" {
		return c.releaseAdmitted(ctx, rr, req)
	}
	// Before the lease lookup, which answers "nothing held" without the
	// shard's own checks.
	if err := releaseArgs(req); err != nil {
		return nil, err
	}
	lease, err := ro.shardLease(ctx, r.caller, req.GetSessionId(), shard, false)
	if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
		return &lockv1.ReleaseResponse{}, nil // its holds ended with it, as on coord
	}
	if err != nil || lease == 0 {
		return &lockv1.ReleaseResponse{}, err
	}
	sreq := proto.CloneOf(req)
	sreq.SessionId = lease
	return c.releaseAdmitted(ctx, rr, sreq)
}

// Inspect implements lockv1.LockServiceServer. On a shard, the holder's
// session is the coord session its hold records (sessionOfHold).
func (ro *Router) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	r, err := ro.gate.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	c, _, rr, err := ro.routeToSource(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.inspectAdmitted(ctx, rr, req)
}

// ValidateToken implements lockv1.LockServiceServer.
func (ro *Router) ValidateToken(ctx context.Context, req *lockv1.ValidateTokenRequest) (*lockv1.ValidateTokenResponse, error) {
	r, err := ro.gate.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	c, _, rr, err := ro.routeToSource(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.validateAdmitted(ctx, rr, req)
}

// homeOf is the shard a moving key still lives on (its source), and r as
// that shard serves it.
func (ro *Router) homeOf(r request) (string, cluster, request) {
	m := ro.table.Current()
	if m == nil || !ro.onEntityTier(r.class) {
		return "", nil, r
	}
	name := m.Home(r.key)
	return name, ro.shards[name], r.on(name, 0)
}

// onEntityTier reports whether cls's keys live on the entity shards.
func (ro *Router) onEntityTier(cls class.Class) bool {
	return cls.Tier == class.TierEntity && len(ro.shards) > 0
}

// releaseAnyOnEveryShard ends whatever hold the session has on the key on
// every shard it has a lease on, not only the shard this arbiter's map
// homes the key to: the grant whose answer was lost may have been routed
// by a newer or older map than this arbiter's. Each shard's Txn compares
// the session's lease there, so a shard that never held the key for this
// session deletes nothing. A shard this arbiter has no client for is
// SHARD_UNKNOWN: the client tries again, through another arbiter.
func (ro *Router) releaseAnyOnEveryShard(ctx context.Context, r request, req *lockv1.ReleaseRequest) (*lockv1.ReleaseResponse, error) {
	if err := releaseArgs(req); err != nil {
		return nil, err
	}
	// Whose session it is first: its shards are none of another's business.
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := ro.coord.checkOwner(ctx, r.caller, req.GetSessionId()); err != nil {
		if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
			return &lockv1.ReleaseResponse{}, nil // its holds ended with it
		}
		return nil, err
	}
	leases, err := ro.shardLeases(ctx, req.GetSessionId())
	if err != nil {
		return nil, err
	}
	out := &lockv1.ReleaseResponse{}
	for _, name := range slices.Sorted(maps.Keys(leases)) {
		c := ro.shards[name]
		if c == nil {
			return nil, refuse.With(codes.Unavailable, lockv1.ErrorReason_SHARD_UNKNOWN,
				fmt.Sprintf("the session has a lease on shard %s, which this arbiter has no client for", name), "shard", name)
		}
		sreq := proto.CloneOf(req)
		sreq.SessionId = leases[name]
		resp, err := c.releaseAdmitted(ctx, r.on(name, 0), sreq)
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
