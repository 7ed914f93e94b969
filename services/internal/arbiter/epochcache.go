package arbiter

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/class"
	"github.com/lockplane/lockplane/services/etcdauth"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// epochCache holds the epoch record and the cluster ID etcd last reported.
// Grants compare the record itself in their own transaction, so a stale
// cache can delay a grant but never mint a token under a record that is
// not the current one. A cluster with no record is sealed: the cache never
// invents one.
//
// Observations (reads, watch events, the arbiter's own writes) arrive out
// of order; each carries the revision and cluster it was made at, and an
// older one never replaces a newer. A linearizable read below a revision
// already observed on the same cluster ID means the revisions went
// backwards: a cluster restored or rebuilt that kept its ID. That seals
// too, until a record newer than the regression is observed.
type epochCache struct {
	mu        sync.Mutex
	st        epoch.State
	loaded    bool
	missing   bool   // the newest observation found no (readable) record
	clusterID uint64 // the cluster ID etcd last reported
	asOf      obs    // the observation the cached state is from
	regressed int64  // nonzero: the revision at which revisions went backwards
}

// obs is where an observation was made: a revision of a cluster.
type obs struct {
	cluster uint64
	rev     int64
}

func at(h *etcdserverpb.ResponseHeader) obs { return obs{h.GetClusterId(), h.GetRevision()} }

// newer reports whether o may replace the cached state: it is from another
// cluster (rebuilt or restored: the seal decides) or not older.
func (c *epochCache) newer(o obs) bool {
	return !c.loaded || o.cluster != c.asOf.cluster || o.rev >= c.asOf.rev
}

func (c *epochCache) get() (epoch.State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.st, c.loaded
}

// set caches a record observed at o.
func (c *epochCache) set(st epoch.State, o obs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.newer(o) {
		return
	}
	c.st, c.loaded, c.missing, c.asOf = st, true, false, o
	if c.regressed != 0 && st.ModRevision > c.regressed {
		c.regressed = 0 // written after the regression: the operator's advance
	}
}

// setMissing records that the cluster had no (readable) record at o.
func (c *epochCache) setMissing(o obs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.newer(o) {
		c.loaded, c.missing, c.asOf = true, true, o
	}
}

// observed returns where the newest observation so far was made; a
// linearizable read started after this call answers at or above it.
func (c *epochCache) observed() obs {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		return obs{}
	}
	return c.asOf
}

// linearizable notes a linearizable read answered at o that started after
// before was observed: below it on the same cluster ID, the revisions went
// backwards. Observations made while the read was in flight may be newer
// than o without any regression, so they are not the floor.
func (c *epochCache) linearizable(o, before obs) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if before.rev != 0 && o.cluster == before.cluster && o.rev < before.rev {
		c.regressed, c.asOf = o.rev, o
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
	return c.loaded && (c.missing || c.regressed != 0 || c.clusterID != 0 && c.st.Sealed(c.clusterID))
}

// cause says why a sealed cluster is sealed, for the error's metadata.
func (c *epochCache) cause() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.missing:
		return "no_epoch_record"
	case c.regressed != 0:
		return "revision_regressed"
	}
	return "cluster_id_changed"
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
	cause := a.epochs.cause()
	var msg string
	switch cause {
	case "no_epoch_record":
		msg = fmt.Sprintf("cluster %s has no epoch record: it was rebuilt empty, its record was deleted, or it was never bootstrapped; "+
			"no grants until an operator advances its epoch to one allocated from the coord cluster "+
			"(lockctl epoch advance%s --expected 0 --reason ...)", a.cfg.Cluster, flag)
	case "revision_regressed":
		msg = fmt.Sprintf("cluster %s's revisions went backwards under the same cluster ID: it was restored or rebuilt keeping its ID, "+
			"so its tokens could repeat; no grants until an operator advances its epoch (lockctl epoch advance%s --expected %d --reason ...)",
			a.cfg.Cluster, flag, st.Epoch)
	default:
		msg = fmt.Sprintf("cluster %s's etcd cluster ID differs from the one epoch %d was minted for: it is a restored or rebuilt cluster; "+
			"no grants until an operator advances the epoch (lockctl epoch advance%s --expected %d --reason ...)",
			a.cfg.Cluster, st.Epoch, flag, st.Epoch)
	}
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SEALED, msg, "cause", cause, "cluster", a.cfg.Cluster)
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
	before := a.epochs.observed()
	resp, err := a.etcd.Get(octx, lockkey.EpochKey)
	if err != nil {
		return 0, a.etcdFailure(ctx, err)
	}
	a.epochs.linearizable(at(resp.Header), before)
	if newest := a.epochs.observed(); newest.cluster == resp.Header.ClusterId && resp.Header.Revision < newest.rev {
		// Overtaken by an observation made while the read was in flight:
		// no regression shown yet, but none ruled out either. A read
		// started now must answer at or above it.
		if resp, err = a.etcd.Get(octx, lockkey.EpochKey); err != nil {
			return 0, a.etcdFailure(ctx, err)
		}
		a.epochs.linearizable(at(resp.Header), newest)
	}
	a.cacheRecord(resp.Kvs, at(resp.Header))
	a.observeHeader(resp.Header)
	return resp.Header.Revision, nil
}

// cacheRecord caches what a read of the epoch key found at o, and returns
// the record read (found false when there is none, or it is unreadable:
// as good as none, sealed, and said).
func (a *Arbiter) cacheRecord(kvs []*mvccpb.KeyValue, o obs) (st epoch.State, found bool) {
	if len(kvs) == 0 {
		a.epochs.setMissing(o)
		return epoch.State{}, false
	}
	st, err := epoch.Decode(kvs[0].Value, kvs[0].ModRevision)
	if err != nil {
		a.log.Error("the epoch record is unreadable; the cluster is sealed until an advance with --expected 0", "cluster", a.cfg.Cluster, "err", err)
		a.epochs.setMissing(o)
		return epoch.State{}, false
	}
	a.epochs.set(st, o)
	return st, true
}

func (a *Arbiter) observeHeader(h *etcdserverpb.ResponseHeader) bool {
	sealed := a.epochs.observe(h)
	a.health.Set(sealed)
	return sealed
}

// watchEpoch keeps the cache current until ctx ends.
func (a *Arbiter) watchEpoch(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := a.readEpoch(ctx)
		if err != nil {
			a.health.Unavailable()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		// Every change after the read above.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range a.etcd.Watch(etcdauth.WatchContext(wctx), lockkey.EpochKey, clientv3.WithRev(rev+1)) {
			if wr.Err() != nil {
				break
			}
			a.observeHeader(&wr.Header)
			for _, ev := range wr.Events {
				o := obs{wr.Header.ClusterId, ev.Kv.ModRevision}
				switch ev.Type {
				case clientv3.EventTypePut:
					a.cacheRecord([]*mvccpb.KeyValue{ev.Kv}, o)
					a.log.Info("epoch record changed", "cluster", a.cfg.Cluster)
				case clientv3.EventTypeDelete:
					a.epochs.setMissing(o)
					a.log.Error("the epoch record was deleted; the cluster is sealed until an operator advances its epoch", "cluster", a.cfg.Cluster)
				}
			}
			a.health.Set(a.epochs.sealed())
		}
		cancel()
	}
}

// epochIs is the compare every grant, handoff and release carries: the
// epoch record is byte for byte the one the token is minted under. Every
// record is unique (its epoch is allocated once, with its time), so not
// even a restored or rewritten record at the same revision passes.
func epochIs(st epoch.State) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(lockkey.EpochKey), "=", string(st.Raw))
}

// grantEpoch is epochFor for a grant: it also refuses a record placed by
// another policy set (placed) and while the record's quiet period lasts
// (quietErr).
func (a *Arbiter) grantEpoch(ctx context.Context) (epoch.State, error) {
	st, err := a.epochFor(ctx)
	if err != nil {
		return st, err
	}
	if st, err = a.placed(ctx, st); err != nil {
		return st, err
	}
	return st, a.quietErr(st)
}

// quietErr refuses, with UNAVAILABLE / EPOCH_CHANGED and "retry_after",
// any grant or handoff under st while its quiet period lasts by this
// arbiter's clock: a session the advance ended may have had a renewal
// confirmed just before it, and its holder believes it holds keys until
// that renewal's send time plus its TTL. The grant's Txn compares st, so a
// record newer than the cache's is refused by its compare, never granted
// under an older record's absent quiet.
func (a *Arbiter) quietErr(st epoch.State) error {
	wait := time.Until(st.QuietUntil)
	if st.QuietUntil.IsZero() || wait <= 0 {
		return nil
	}
	wait = wait.Round(time.Millisecond) + time.Millisecond
	return refuse.With(codes.Unavailable, lockv1.ErrorReason_EPOCH_CHANGED,
		fmt.Sprintf("cluster %s's epoch was advanced to %d, ending every session opened before; holders of those sessions may believe they hold "+
			"their keys until %s, so grants resume then: retry after %s", a.cfg.Cluster, st.Epoch, st.QuietUntil.UTC().Format(time.RFC3339Nano), wait),
		"retry_after", wait.String(), "quiet_until", st.QuietUntil.UTC().Format(time.RFC3339Nano), "cluster", a.cfg.Cluster)
}

// epochMark names an epoch record: a KeepAlive stream remembers, with
// each session whose owner it checked, the mark current before that
// check, and checks again when the mark has changed (an advance deleted
// the session's record, perhaps).
type epochMark struct {
	epoch uint32
}

// mark is the cached record's mark; the zero mark when none is cached.
func (c *epochCache) mark() epochMark {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded || c.missing {
		return epochMark{}
	}
	// The epoch alone: a shard map stamp rewrites the record without an
	// advance, and must not send every stream to read its sessions again.
	return epochMark{epoch: c.st.Epoch}
}

// EpochQuiet is the quiet period an advance of this arbiter's cluster
// keeps when it ends live sessions (epoch.Change.Quiet): the longest TTL
// of the class registry, plus epoch.QuietMargin. A registry that cannot
// list its classes gives class.MaxTTL, the longest any session may have.
func EpochQuiet(reg class.Registry) time.Duration {
	var names []string
	switch r := reg.(type) {
	case class.Static:
		names = slices.Collect(maps.Keys(r))
	case admin.ClassFacts:
		for _, f := range r.ClassFacts() {
			names = append(names, f.Name)
		}
	default:
		return epoch.Quiet(class.MaxTTL)
	}
	longest := time.Duration(0)
	for _, n := range append(names, "") {
		c, err := reg.Lookup(n)
		if err != nil {
			return epoch.Quiet(class.MaxTTL)
		}
		longest = max(longest, c.TTL)
	}
	return epoch.Quiet(min(longest, class.MaxTTL))
}
