package arbiter

import (
	"context"
	"errors"
	"fmt"
	"github.com/lockplane/lockplane/services/etcdauth"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// routeTable is the entity shard map a Router routes by: read from the
// coord cluster (where a region's first arbiter writes version 1), kept
// current by a watch, and replaced by the admin service's AddShard. It
// knows the entity shards this arbiter has a client for by their etcd;
// the Router holds their arbiters.
type routeTable struct {
	// etcdCalls bounds its reads of the coord cluster.
	etcdCalls
	coord  Etcd
	shards map[string]Etcd
	// admin are the clusters as the Admin API's etcd user: a change of
	// the map (Init, Add) writes through them.
	admin shardmap.Clusters
	log   *slog.Logger
	// cur is the current shard map; nil until loaded.
	cur atomic.Pointer[shardmap.Map]
}

func newRouteTable(cfg RouterConfig) *routeTable {
	admin := shardmap.Clusters{Coord: cfg.AdminEtcd, Shards: map[string]shardmap.Etcd{}, OpTimeout: cfg.OpTimeout}
	for name := range cfg.Shards {
		admin.Shards[name] = cfg.adminShard(name)
	}
	return &routeTable{etcdCalls: newEtcdCalls(cfg.Config),
		coord: cfg.Etcd, shards: cfg.Shards, admin: admin, log: cfg.Logger}
}

// register adds the map version gauge to reg.
func (t *routeTable) register(reg prometheus.Registerer) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "lockplane_shard_map_version",
		Help: "The entity shard map version this arbiter routes by (0 until loaded)."}, func() float64 {
		if m := t.Current(); m != nil {
			return float64(m.Version)
		}
		return 0
	}))
}

// names are the configured shards' names, sorted.
func (t *routeTable) names() []string {
	return slices.Sorted(maps.Keys(t.shards))
}

// clusters are the coord cluster and the configured shards as the Admin
// API's user, as a change of the shard map spans them.
func (t *routeTable) Clusters() shardmap.Clusters { return t.admin }

// current is the shard map routed by; nil until loaded.
func (t *routeTable) Current() *shardmap.Map { return t.cur.Load() }

// behind reports whether the map routed by is older than version v.
func (t *routeTable) behind(v int64) bool {
	m := t.Current()
	return m != nil && m.Version < v
}

// ensure writes map version 1 over this arbiter's shards if the coord
// cluster has no map: a region's first arbiter does, the rest find it
// (the store is guarded on absence).
func (t *routeTable) ensure(ctx context.Context) error {
	// Init reads and stamps every shard: a few calls, one bound.
	ctx, cancel := context.WithTimeout(ctx, time.Duration(2+len(t.shards)*2)*t.bound.Timeout)
	defer cancel()
	_, _, found, err := shardmap.Load(ctx, t.coord)
	if err != nil || found {
		return err
	}
	if _, err := shardmap.Init(ctx, t.Clusters(), t.names(), nil); err != nil && !errors.Is(err, shardmap.ErrConflict) {
		return fmt.Errorf("shard map: %w", err)
	}
	t.log.Info("shard map initialised", "shards", t.names())
	return nil
}

// load reads the shard map once.
func (t *routeTable) Load(ctx context.Context) error {
	octx, cancel := t.opCtx(ctx)
	defer cancel()
	m, _, found, err := shardmap.Load(octx, t.coord)
	switch {
	case err != nil && octx.Err() != nil:
		return t.etcdFailure(ctx, err)
	case err != nil:
		return refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
	case !found:
		return refuse.With(codes.Unavailable, lockv1.ErrorReason_SHARD_MAP_MISSING,
			"the coord cluster has no shard map ("+shardmap.Key+") yet; an arbiter writes it when it starts")
	}
	t.Set(m)
	return nil
}

// set routes by m unless the map routed by is newer.
func (t *routeTable) Set(m shardmap.Map) {
	if cur := t.Current(); cur == nil || m.Version >= cur.Version {
		t.cur.Store(&m)
	}
}

// watch keeps the shard map current until ctx ends.
func (t *routeTable) watch(ctx context.Context) {
	for ctx.Err() == nil {
		if err := t.ensure(ctx); err != nil {
			t.log.Warn("shard map not initialised", "err", err)
		}
		lctx, cancel := t.opCtx(ctx)
		m, rev, found, err := shardmap.Load(lctx, t.coord)
		cancel()
		if err != nil {
			t.log.Warn("shard map unreadable", "err", err)
		} else if found {
			t.Set(m)
		}
		if err == nil {
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for wr := range t.coord.Watch(etcdauth.WatchContext(wctx), shardmap.Key, clientv3.WithRev(rev+1)) {
				if wr.Err() != nil {
					break
				}
				for _, ev := range wr.Events {
					if m, err := shardmap.Decode(ev.Kv.Value); err == nil {
						t.Set(m)
						t.log.Info("shard map changed", "version", m.Version, "shards", m.Shards, "adding", m.Adding)
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
