package arbiter

import (
	"context"
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
type epochCache struct {
	mu        sync.Mutex
	st        epoch.State
	loaded    bool
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
	if !c.loaded || st.ModRevision >= c.st.ModRevision || st.ClusterID != c.st.ClusterID {
		c.st, c.loaded = st, true
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
	return c.loaded && c.st.Sealed(c.clusterID)
}

func (c *epochCache) sealed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loaded && c.clusterID != 0 && c.st.Sealed(c.clusterID)
}

// epochFor returns the current epoch, loading it (and creating it on an
// empty cluster) on first use, or SEALED when the cluster is a restored one.
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

func (a *Arbiter) sealedErr(st epoch.State) error {
	return refusal(codes.FailedPrecondition, lockv1.ErrorReason_SEALED,
		"the etcd cluster's ID differs from the one epoch was minted for: this is a restored cluster; "+
			"no grants until an operator advances the epoch", "epoch_cluster_id", st.ClusterID)
}

func (a *Arbiter) reloadEpoch(ctx context.Context) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	st, err := epoch.Ensure(octx, a.etcd)
	if err != nil {
		return a.etcdFailure(ctx, err)
	}
	a.epochs.set(st)
	// Ensure's reads carried the cluster ID; fetch it explicitly so a fresh
	// arbiter on a restored cluster is sealed before its first grant.
	resp, err := a.etcd.Get(octx, lockkey.EpochKey, clientv3.WithCountOnly())
	if err != nil {
		return a.etcdFailure(ctx, err)
	}
	a.observeHeader(resp.Header)
	return nil
}

func (a *Arbiter) observeHeader(h *etcdserverpb.ResponseHeader) bool {
	sealed := a.epochs.observe(h)
	a.health.set(sealed)
	return sealed
}

// watchEpoch keeps the cache current until ctx ends.
func (a *Arbiter) watchEpoch(ctx context.Context) {
	for ctx.Err() == nil {
		if err := a.reloadEpoch(ctx); err != nil {
			a.health.unavailable()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		st, _ := a.epochs.get()
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range a.etcd.Watch(wctx, lockkey.EpochKey, clientv3.WithRev(st.ModRevision+1)) {
			if wr.Err() != nil {
				break
			}
			a.observeHeader(&wr.Header)
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypePut {
					if next, err := epoch.Decode(ev.Kv.Value, ev.Kv.ModRevision); err == nil {
						a.epochs.set(next)
						a.log.Info("epoch record changed", "epoch", next.Epoch, "cluster_id", next.ClusterID)
					}
				}
			}
		}
		cancel()
	}
}
