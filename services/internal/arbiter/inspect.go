package arbiter

import (
	"context"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/lockkey"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Inspect implements lockv1.LockServiceServer. It reports the holder's
// identity, session, class and grant time from a linearizable read, and
// never the token.
func (a *Arbiter) Inspect(ctx context.Context, req *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	r, err := a.admitKey(ctx, req.GetKey(), req.GetClass())
	if err != nil {
		return nil, err
	}
	return a.inspectAdmitted(ctx, r, req)
}

// inspectAdmitted serves an Inspect admitted as r (see admitter).
func (a *Arbiter) inspectAdmitted(ctx context.Context, r request, _ *lockv1.InspectRequest) (*lockv1.InspectResponse, error) {
	resp, err := a.readHold(ctx, r.key)
	if err != nil {
		return nil, err
	}
	out := &lockv1.InspectResponse{Key: r.key}
	if len(resp.Kvs) == 0 {
		return out, nil
	}
	kv := resp.Kvs[0]
	h, _ := decodeHold(kv.Value)
	out.Held = true
	out.Holder = &lockv1.Holder{Identity: h.Identity, Instance: h.Instance, SessionId: sessionOfHold(a.shardOf, kv.Value, kv.Lease),
		Class: h.Class, Since: timestamppb.New(h.Since)}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	if ttl, err := a.etcd.TimeToLive(octx, clientv3.LeaseID(kv.Lease)); err == nil && ttl.TTL >= 0 {
		out.Holder.RemainingTtl = durationpb.New(secs(ttl.TTL))
	}
	return out, nil
}

// sessionOfHold is the session a hold is on, as clients know sessions,
// from the hold alone (a second read could find the session's other
// records gone). On the coord cluster it is the hold's lease. On an entity
// shard (shard) that lease is the session's shard lease, which no client
// knows: it is the coord session the hold records, or 0 (unknown) for a
// hold that records none (unreadable, or written before holds did).
func sessionOfHold(shard bool, hold []byte, lease int64) int64 {
	if !shard {
		return lease
	}
	h, err := decodeHold(hold)
	if err != nil {
		return 0
	}
	return h.CoordSession
}

// leakedHolder is the session LEAKED names: sessionOfHold, or 0 (none)
// unless the hold is the caller's identity's, so that a refusal never
// names another identity's session.
func leakedHolder(shard bool, r request, hold []byte, lease int64) int64 {
	if h, err := decodeHold(hold); err != nil || h.Identity != r.caller.String() {
		return 0
	}
	return sessionOfHold(shard, hold, lease)
}

// readHold reads a key's hold linearizably, refusing on a sealed cluster.
func (a *Arbiter) readHold(ctx context.Context, key string) (*clientv3.GetResponse, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Get(octx, lockkey.HoldKey(key))
	if err != nil {
		return nil, a.etcdFailure(ctx, err)
	}
	if a.observeHeader(resp.Header) {
		st, _ := a.epochs.get()
		return nil, a.sealedErr(st)
	}
	return resp, nil
}

func secs(n int64) time.Duration { return time.Duration(n) * time.Second }
