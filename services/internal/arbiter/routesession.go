package arbiter

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lockplane/lockplane/services/class"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// OpenSession implements lockv1.LockServiceServer: a session starts as a
// lease on the coord cluster; shard leases join it on first use.
func (ro *Router) OpenSession(ctx context.Context, req *lockv1.OpenSessionRequest) (*lockv1.OpenSessionResponse, error) {
	return ro.coord.OpenSession(ctx, req)
}

// shardLease is session's lease on shard. The first hold on a shard creates
// it (when create), with the session's identity and TTL, and records it
// under the session's coord lease; a Txn on the coord cluster makes one
// lease win when two arbiters race. Without create, a session with no lease
// there gets 0: it holds nothing on that shard.
func (ro *Router) shardLease(ctx context.Context, caller spiffeid.ID, session int64, shard string, create bool) (int64, error) {
	if err := requireSession(session); err != nil {
		return 0, err
	}
	if v, ok := ro.leases.Load(shardLease{session, shard}); ok {
		c := v.(*cachedLease)
		// The cache answers only the session's owner: anyone may name a
		// session, as Inspect reports them.
		if c.owner != caller.String() {
			return 0, notOwned()
		}
		c.used.Store(time.Now().UnixNano())
		return c.lease, nil
	}
	slKey, sKey := lockkey.ShardLeaseKey(session, shard), lockkey.SessionKey(session)
	octx, cancel := ro.opCtx(ctx)
	defer cancel()
	resp, err := ro.coordEtcd.Txn(octx).Then(clientv3.OpGet(sKey), clientv3.OpGet(slKey)).Commit()
	if err != nil {
		return 0, ro.etcdFailure(ctx, err)
	}
	sess, rec, err := ownedSession(caller, resp.Responses[0].GetResponseRange().Kvs)
	if err != nil {
		return 0, err
	}
	if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
		return ro.confirm(ctx, caller, session, shard, kvs[0].Value, create)
	}
	if !create {
		return 0, nil
	}
	lease, err := ro.shards[shard].openLease(ctx, caller, time.Duration(rec.TTLSeconds)*time.Second, rec.Instance)
	if err != nil {
		return 0, err
	}
	ro.shardLeaseGrantedHook(session, shard)
	// The owner record is for arbiters of earlier releases (lockkey.ShardLeaseOwner).
	put, err := ro.coordEtcd.Txn(octx).
		If(clientv3.Compare(clientv3.Value(sKey), "=", string(sess)),
			clientv3.Compare(clientv3.CreateRevision(slKey), "=", 0)).
		Then(clientv3.OpPut(slKey, strconv.FormatInt(lease, 10), clientv3.WithLease(clientv3.LeaseID(session))),
			clientv3.OpPut(lockkey.ShardLeaseOwner(shard, lease), strconv.FormatInt(session, 10), clientv3.WithLease(clientv3.LeaseID(session)))).
		Else(clientv3.OpGet(slKey)).Commit()
	if err != nil {
		// The record may have committed: revoking the lease it names would
		// end the session. Unrecorded, the lease expires on its own.
		return 0, ro.etcdFailure(ctx, err)
	}
	if put.Succeeded {
		return ro.confirmed(ctx, caller, session, shard, lease, create)
	}
	// Lost a race, or the session ended: ours is not needed.
	ro.shards[shard].discardLease(clientv3.LeaseID(lease))
	if kvs := put.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		return ro.confirm(ctx, caller, session, shard, kvs[0].Value, create)
	}
	return 0, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED, "the session has expired or was closed")
}

// confirm is confirmed for a lease read from its coord record.
func (ro *Router) confirm(ctx context.Context, caller spiffeid.ID, session int64, shard string, raw []byte, create bool) (int64, error) {
	lease, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return 0, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "unreadable shard lease record for shard "+shard)
	}
	return ro.confirmed(ctx, caller, session, shard, lease, create)
}

// confirmed renews session's lease on shard once, now that its record is
// committed, and only then caches it for holds to attach to. The lease
// was granted before its record was written; a renewal read the records
// in between missed it, yet its holder counts a deadline from that
// renewal's send time, later than the grant. Renewing after the record
// makes the lease outlive every deadline a renewal that missed it gave.
// Without create (a release or a look), a lease that is gone holds
// nothing: 0, as for a session with no lease there.
func (ro *Router) confirmed(ctx context.Context, caller spiffeid.ID, session int64, shard string, lease int64, create bool) (int64, error) {
	if _, _, err := ro.shards[shard].renewLease(ctx, lease, nil); err != nil {
		if !create && reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
			return 0, nil
		}
		return 0, err
	}
	ro.remembered(session, shard, lease, caller.String())
	return lease, nil
}

// cachedLease is a session's lease on a shard, with when it was last used.
type cachedLease struct {
	lease int64
	// owner is the identity whose session it is, read from its record.
	owner string
	used  atomic.Int64 // unix ns
}

func (ro *Router) remembered(session int64, shard string, lease int64, owner string) {
	c := &cachedLease{lease: lease, owner: owner}
	c.used.Store(time.Now().UnixNano())
	ro.leases.Store(shardLease{session, shard}, c)
}

// sweepLeases forgets cached shard leases unused for longer than any
// session can live unrenewed, so sessions that expired without a close do
// not pile up; a later use reads the coord record again.
func (ro *Router) sweepLeases(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ro.forgetUnusedSince(time.Now().Add(-2 * class.MaxTTL))
	}
}

func (ro *Router) forgetUnusedSince(cutoff time.Time) {
	ro.leases.Range(func(k, v any) bool {
		if v.(*cachedLease).used.Load() < cutoff.UnixNano() {
			ro.leases.Delete(k)
		}
		return true
	})
}

// ownedSession checks a session record read from the coord cluster belongs
// to caller, returning its bytes (for a compare) and its fields.
func ownedSession(caller spiffeid.ID, kvs []*mvccpb.KeyValue) ([]byte, sessionRecord, error) {
	if len(kvs) == 0 {
		return nil, sessionRecord{}, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED, "the session has expired or was closed")
	}
	rec, err := decodeSession(kvs[0].Value)
	if err != nil || rec.Identity != caller.String() {
		return nil, sessionRecord{}, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_SESSION_NOT_OWNED, "the session belongs to another identity")
	}
	return kvs[0].Value, rec, nil
}

// shardLeases lists session's leases on entity shards, from the coord
// cluster (another arbiter may have added one).
func (ro *Router) shardLeases(ctx context.Context, session int64) (map[string]int64, error) {
	octx, cancel := ro.opCtx(ctx)
	defer cancel()
	prefix := lockkey.ShardLeasesOf(session)
	resp, err := ro.coordReads.get(octx, prefix, clientv3.OpGet(prefix, clientv3.WithPrefix()))
	if err != nil {
		return nil, ro.etcdFailure(ctx, err)
	}
	out := map[string]int64{}
	for _, kv := range resp.Kvs {
		lease, err := strconv.ParseInt(string(kv.Value), 10, 64)
		if err != nil {
			continue
		}
		out[string(kv.Key[len(prefix):])] = lease
	}
	return out, nil
}

// KeepAlive implements lockv1.LockServiceServer. A renewal renews the
// coord lease and every shard lease of the session; it fails if any fails,
// and reports the shortest TTL, so a holder's deadline covers every hold.
func (ro *Router) KeepAlive(stream lockv1.LockService_KeepAliveServer) error {
	// One set per cluster: only configured clusters get one, so the sets
	// are as many as the arbiter's shards, each capped.
	owned := map[string]*ownedSessions{}
	ownedOn := func(cluster string) *ownedSessions {
		if owned[cluster] == nil {
			owned[cluster] = newOwned()
		}
		return owned[cluster]
	}
	return serveKeepAlive(stream, ro.renewals, ro.cfg.OpTimeout, func(ctx context.Context, caller spiffeid.ID, session int64) *lockv1.KeepAliveResponse {
		resp := ro.coord.renew(ctx, caller, session, ownedOn(""))
		if resp.GetError() == lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			resp = ro.renewShards(ctx, caller, session, resp, ownedOn)
		}
		if why := resp.GetError(); why != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED && why != lockv1.ErrorReason_SESSION_NOT_OWNED {
			// Not for a renewal refused as another identity's: that must
			// not drop the owner's cached leases.
			ro.forget(session)
		}
		return resp
	})
}

func (ro *Router) renewShards(ctx context.Context, caller spiffeid.ID, session int64, coord *lockv1.KeepAliveResponse, ownedOn func(string) *ownedSessions) *lockv1.KeepAliveResponse {
	// A linearizable read on every renewal, not a cache or a watch: a shard
	// lease recorded by another arbiter before this renewal was sent must
	// be renewed by it, or the holder's deadline (send time + TTL) would
	// outlive that lease. One granted but not yet recorded is renewed by
	// its arbiter once recorded (confirmed). Renewals asked at once share
	// one read-only Txn (newGroupRead), never one sent before they were
	// asked.
	leases, err := ro.shardLeases(ctx, session)
	if err != nil {
		return &lockv1.KeepAliveResponse{SessionId: session, Error: reason.Of(err), ErrorMessage: err.Error()}
	}
	// A lease this arbiter cannot renew fails the whole renewal: answering
	// with a TTL would let the holder outlive its hold on that shard.
	if err := ro.unknownShard(leases); err != nil {
		return &lockv1.KeepAliveResponse{SessionId: session, Error: reason.Of(err), ErrorMessage: status.Convert(err).Message()}
	}
	ttl := coord.GetTtl().AsDuration()
	ended := coord.GetEnded()
	for shard, lease := range leases {
		r := ro.shards[shard].renew(ctx, caller, lease, ownedOn(shard))
		if r.GetError() != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
			return &lockv1.KeepAliveResponse{SessionId: session, Error: r.GetError(),
				ErrorMessage: "shard " + shard + ": " + r.GetErrorMessage()}
		}
		ttl = min(ttl, r.GetTtl().AsDuration())
		ended = append(ended, r.GetEnded()...)
	}
	return &lockv1.KeepAliveResponse{SessionId: session, Ttl: durationpb.New(ttl), Ended: ended}
}

// CloseSession implements lockv1.LockServiceServer: it revokes the
// session's shard leases, then its coord lease, once it has found the
// session the caller's.
func (ro *Router) CloseSession(ctx context.Context, req *lockv1.CloseSessionRequest) (*lockv1.CloseSessionResponse, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	session := req.GetSessionId()
	if err := requireSession(session); err != nil {
		return nil, err
	}
	if err := ro.coord.checkOwner(ctx, caller, session); err != nil {
		if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
			return &lockv1.CloseSessionResponse{}, nil
		}
		return nil, err
	}
	leases, err := ro.shardLeases(ctx, session)
	if err != nil {
		return nil, err
	}
	// Without a client for one of the session's shards its lease there
	// cannot be revoked: refuse before revoking anything rather than report
	// holds released that stay alive until their TTL. An arbiter that has
	// the shard can close the session whole.
	if err := ro.unknownShard(leases); err != nil {
		return nil, err
	}
	defer ro.forget(session)
	for shard, lease := range leases {
		if err := ro.shards[shard].closeLease(ctx, lease); err != nil {
			return nil, err
		}
	}
	if err := ro.coord.closeLease(ctx, session); err != nil {
		return nil, err
	}
	return &lockv1.CloseSessionResponse{}, nil
}

// unknownShard refuses with SHARD_UNKNOWN when a session has a lease on
// a shard this arbiter has no client for (its --shard list lags the map's).
func (ro *Router) unknownShard(leases map[string]int64) error {
	for _, shard := range slices.Sorted(maps.Keys(leases)) {
		if ro.shards[shard] == nil {
			return refuse.With(codes.Unavailable, lockv1.ErrorReason_SHARD_UNKNOWN,
				"the session holds on shard "+shard+", which this arbiter has no client for; retry through another arbiter", "shard", shard)
		}
	}
	return nil
}

// forget drops the cached shard leases of a session that ended.
func (ro *Router) forget(session int64) {
	for shard := range ro.shards {
		ro.leases.Delete(shardLease{session, shard})
	}
}
