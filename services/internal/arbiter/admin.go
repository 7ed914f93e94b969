package arbiter

import (
	"context"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The Admin API (lockplane.admin.v1) lives in services/internal/arbiter/admin
// and reaches the lock core only through admin.Cluster: this file is the
// wiring.

// newAdmin is the Admin API for the coord cluster's arbiter coord and,
// behind a Router, its entity shards' arbiters and shard map (nil, nil
// for a lone Arbiter).
func newAdmin(coord *Arbiter, shards map[string]*Arbiter, table admin.ShardTable) *admin.Server {
	cfg := coord.cfg
	d := admin.Deps{
		Config: admin.Config{Self: cfg.Self, Classes: cfg.Classes, IsOperator: cfg.IsOperator, Operators: cfg.Operators,
			OnePersonEpochAdvance: cfg.OnePersonEpochAdvance, EpochQuiet: EpochQuiet(cfg.Classes), Placement: coord.placement, ActionTTL: cfg.ActionTTL, Audit: cfg.Audit, Bound: coord.etcdCalls.bound},
		Coord: adminCluster{coord}, Table: table, Hooks: coord.adminHooks,
	}
	if len(shards) > 0 {
		d.Shards = map[string]admin.Cluster{}
		for name, a := range shards {
			d.Shards[name] = adminCluster{a}
		}
	}
	return admin.New(d)
}

// adminCluster is an Arbiter as the Admin API reaches it (admin.Cluster).
type adminCluster struct{ a *Arbiter }

func (c adminCluster) Name() string { return c.a.cfg.Cluster }

func (c adminCluster) Etcd() etcdcall.Etcd { return c.a.admin }

func (c adminCluster) CacheEpoch(st *epoch.State, clusterID uint64, rev int64) {
	if st == nil {
		c.a.epochs.setMissing(obs{clusterID, rev})
		return
	}
	c.a.epochs.set(*st, obs{clusterID, rev})
}

func (c adminCluster) ObserveHeader(h *etcdserverpb.ResponseHeader) { c.a.observeHeader(h) }

func (c adminCluster) ReloadEpoch(ctx context.Context) error { return c.a.reloadEpoch(ctx) }

func (c adminCluster) RevokeSession(ctx context.Context, session int64) error {
	return c.a.revokeAs(ctx, c.a.admin, session)
}

func (c adminCluster) DiscardLease(lease clientv3.LeaseID) { c.a.discardAdminLease(lease) }
