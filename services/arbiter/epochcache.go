package arbiter

import (
	"context"
	"fmt"
	"sync"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// epochCache holds the epoch record and the cluster ID etcd last reported.
// Grants compare the record's revision in their own transaction, so a stale
// cache can delay a grant but never mint a token under the wrong epoch.
// A cluster with no record is sealed: the cache never invents one.
type epochCache struct {
	mu        sync.Mutex
	st        epoch.State
	loaded    bool
	missing   bool // the last read or watch event found no record
	clusterID uint64
}

func (c *epochCache) get() (epoch.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st, c.loaded
}

func (c *epochCache) set(st epoch.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || c.missing || st.ModRevision >= c.st.ModRevision || st.ClusterID != c.st.ClusterID {
		c.st, c.loaded, c.missing = st, true, false
	}
}

// setMissing records that the cluster has no epoch record as of rev (0:
// unknown), unless a record newer than rev is cached.
func (c *epochCache) setMissing(rev int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rev == 0 || !c.loaded || c.st.ModRevision <= rev {
		c.loaded, c.missing = true, true
	}
}

// observe records the cluster ID of a response and reports whether the
// cluster is sealed under the cached record.
func (c *epochCache) observe(h *etcdserverpb.ResponseHeader) (sealed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h != nil && h.ClusterId != 0 {
		c.clusterID = h.ClusterId
	}
	return c.sealedLocked()
}

func (c *epochCache) sealed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sealedLocked()
}

func (c *epochCache) sealedLocked() bool {
	return c.loaded && (c.missing || c.clusterID != 0 && c.st.Sealed(c.clusterID))
}

func (c *epochCache) isMissing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded && c.missing
}

// epochFor returns the current epoch, loading it on first use, or SEALED
// when the cluster is a restored one or has no epoch record.
func (a *Arbiter) epochFor(ctx context.Context) (epoch.State, error) {
	st, ok := a.epochs.get()
	if !ok {
		if err := a.reloadEpoch(ctx); err != nil {
			return epoch.State{}, err
		}
		st, _ = a.epochs.get()
	}
	if a.epochs.sealed() {
		return epoch.State{}, a.sealedErr(st)
	}
	return st, nil
}

// sealedErr says why the cluster serves no grants and what ends it.
func (a *Arbiter) sealedErr(st epoch.State) error {
	flag := ""
	if a.shardOf {
		flag = " --cluster " + a.cfg.Cluster
	}
	if a.epochs.isMissing() {
		return refusal(codes.FailedPrecondition, lockv1.ErrorReason_SEALED,
			fmt.Sprintf("cluster %s has no epoch record: it was rebuilt empty, its record was deleted, or it was never bootstrapped; "+
				"no grants until an operator advances its epoch to one allocated from the coord cluster "+
				"(lockctl epoch advance%s --expected 0 --reason ...)", a.cfg.Cluster, flag),
			"cause", "no_epoch_record", "cluster", a.cfg.Cluster)
	}
	return refusal(codes.FailedPrecondition, lockv1.ErrorReason_SEALED,
		fmt.Sprintf("cluster %s's etcd cluster ID differs from the one epoch %d was minted for: it is a restored or rebuilt cluster; "+
			"no grants until an operator advances the epoch (lockctl epoch advance%s --expected %d --reason ...)",
			a.cfg.Cluster, st.Epoch, flag, st.Epoch),
		"cause", "cluster_id_changed", "cluster", a.cfg.Cluster, "epoch_cluster_id", st.ClusterID)
}

// reloadEpoch reads the record, and the cluster ID with it, in one read.
func (a *Arbiter) reloadEpoch(ctx context.Context) error {
	_, err := a.readEpoch(ctx)
	return err
}

// readEpoch is reloadEpoch, returning the revision it read at.
func (a *Arbiter) readEpoch(ctx context.Context) (int64, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Get(octx, lockkey.EpochKey)
	if err != nil {
		return 0, a.etcdFailure(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		a.epochs.setMissing(0)
	} else {
		st, err := epoch.Decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
		if err != nil {
			// An unreadable record is as good as none: sealed, and said.
			a.log.Error("the epoch record is unreadable; the cluster is sealed", "err", err)
			a.epochs.setMissing(0)
		} else {
			a.epochs.set(st)
		}
	}
	a.observeHeader(resp.Header)
	return resp.Header.Revision, nil
}

func (a *Arbiter) observeHeader(h *etcdserverpb.ResponseHeader) bool {
	sealed := a.epochs.observe(h)
	a.health.set(sealed)
	return sealed
}

// watchEpoch keeps the cache current until ctx ends.
func (a *Arbiter) watchEpoch(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := a.readEpoch(ctx)
		if err != nil {
			a.health.unavailable()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Every change after the read above.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range a.etcd.Watch(wctx, lockkey.EpochKey, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			a.observeHeader(&wr.Header)
			for _, ev := range wr.Events {
				switch ev.Type {
				case clientv3.EventTypePut:
					if next, err := epoch.Decode(ev.Kv.Value, ev.Kv.ModRevision); err == nil {
						a.epochs.set(next)
						a.log.Info("epoch record changed", "cluster", a.cfg.Cluster, "epoch", next.Epoch, "cluster_id", next.ClusterID)
					}
				case clientv3.EventTypeDelete:
					a.epochs.setMissing(ev.Kv.ModRevision)
					a.log.Error("the epoch record was deleted; the cluster is sealed until an operator advances its epoch", "cluster", a.cfg.Cluster)
				}
			}
			a.health.set(a.epochs.sealed())
		}
		cancel()
	}
}
