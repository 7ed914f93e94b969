package arbiter

import (
	"context"
	"errors"
	"io"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/internal/arbiter/quota"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// OpenSession implements lockv1.LockServiceServer: one lease for the
// caller's identity and the class's TTL, and the session record on it.
func (a *Arbiter) OpenSession(ctx context.Context, req *lockv1.OpenSessionRequest) (*lockv1.OpenSessionResponse, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	cls, err := a.cfg.Classes.Lookup(req.GetClass())
	if err != nil {
		return nil, refuse.With(codes.NotFound, lockv1.ErrorReason_UNKNOWN_CLASS, "class: "+err.Error(), "field", "class")
	}
	if err := validInstance(req.GetInstance()); err != nil {
		return nil, err
	}
	if err := a.withinQuota(ctx, caller, quota.Sessions); err != nil {
		a.metrics.refused(labels{class: cls.Name, tier: string(cls.Tier), cluster: a.cfg.Cluster}, lockv1.ErrorReason_QUOTA_EXCEEDED)
		return nil, err
	}
	lease, err := a.openLease(ctx, caller, cls.TTL, req.GetInstance())
	if err != nil {
		return nil, err
	}
	a.metrics.sessionOpened(labels{class: cls.Name, tier: string(cls.Tier), cluster: a.cfg.Cluster})
	return &lockv1.OpenSessionResponse{
		SessionId: lease, Ttl: durationpb.New(cls.TTL), Class: cls.Name, Identity: caller.String(), Instance: req.GetInstance(),
	}, nil
}

// openLease grants a lease of ttl and puts the session record, the
// caller's identity and instance and that TTL, on it.
func (a *Arbiter) openLease(ctx context.Context, caller spiffeid.ID, ttl time.Duration, instance string) (int64, error) {
	if _, err := a.epochFor(ctx); err != nil {
		return 0, err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	lease, err := a.etcd.Grant(octx, int64(ttl.Seconds()))
	if err != nil {
		return 0, a.etcdFailure(ctx, err)
	}
	rec := sessionFor(caller, ttl, instance)
	put, err := a.etcd.Put(octx, lockkey.SessionKey(int64(lease.ID)), rec.Encode(), clientv3.WithLease(lease.ID))
	if err != nil {
		// Do not leave an unusable lease behind; it would expire anyway.
		a.discardLease(lease.ID)
		return 0, a.etcdFailure(ctx, err)
	}
	if a.observeHeader(put.Header) {
		st, _ := a.epochs.get()
		return 0, a.sealedErr(st)
	}
	a.owners.put(int64(lease.ID), caller.String())
	return int64(lease.ID), nil
}

// discardLease revokes a lease nothing will use, in the background under
// its own deadline: the answer does not wait on tidying, which runs right
// after a failed write, when etcd is least likely to answer.
func (a *Arbiter) discardLease(lease clientv3.LeaseID) { a.discardLeaseAs(a.etcd, lease) }

// discardAdminLease is discardLease for a lease the Admin API granted:
// revoked as its user, the one that may write the keys on it.
func (a *Arbiter) discardAdminLease(lease clientv3.LeaseID) { a.discardLeaseAs(a.admin, lease) }

func (a *Arbiter) discardLeaseAs(cli clientv3.Lease, lease clientv3.LeaseID) {
	go func() {
		ctx, cancel := a.opCtx(context.Background())
		defer cancel()
		cli.Revoke(ctx, lease)
	}()
}

// KeepAlive implements lockv1.LockServiceServer. Each request renews one
// session through the etcd leader; a renewal the cluster cannot confirm in
// time is answered NO_QUORUM, never with a TTL.
func (a *Arbiter) KeepAlive(stream lockv1.LockService_KeepAliveServer) error {
	owned := newOwned()
	return serveKeepAlive(stream, a.renewals, a.cfg.OpTimeout, func(ctx context.Context, caller spiffeid.ID, session int64) *lockv1.KeepAliveResponse {
		return a.renew(ctx, caller, session, owned)
	})
}

// serveKeepAlive answers each renewal request of one stream with renew's
// response, run on renewals, for the authenticated caller, until the
// client closes it. A
// renewal's etcd requests share one deadline, budget from its arrival.
func serveKeepAlive(stream lockv1.LockService_KeepAliveServer, renewals *workers, budget time.Duration, renew func(context.Context, spiffeid.ID, int64) *lockv1.KeepAliveResponse) error {
	ctx := stream.Context()
	caller, err := caller.Of(ctx)
	if err != nil {
		return refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		// The renewal runs and is answered on a worker: the stream's
		// goroutine lives as long as the session, and the etcd calls would
		// grow its stack to 16 KB, kept while it waits in Recv.
		sent := make(chan error, 1)
		renewals.run(func() {
			sent <- stream.Send(renew(etcdcall.WithBudget(ctx, time.Now().Add(budget)), caller, req.GetSessionId()))
		})
		if err := <-sent; err != nil {
			return err
		}
	}
}

// maxOwned caps the sessions one stream remembers as the caller's, on
// each cluster: a stream may name any number of sessions, and forgetting
// one costs only an ownership read at its next renewal.
const maxOwned = 1024

// ownedSessions are the sessions a stream's caller was found to own, each
// with the epoch record's mark current before that check, the oldest
// forgotten first past maxOwned. Almost every stream renews one session:
// that one needs no map, which would cost each session a few hundred bytes
// for as long as it lives.
type ownedSessions struct {
	first     int64               // the first session remembered; 0 when none
	firstMark epochMark           // the mark first was checked under
	set       map[int64]epochMark // the rest, made on the second session
	order     []int64             // the rest in insertion order, a ring of maxOwned-1
	next      int
}

func newOwned() *ownedSessions { return &ownedSessions{} }

// has reports whether session was found the caller's under the record
// marked m: under another record (an epoch advance deleted every session
// record, perhaps) its owner is checked again.
func (o *ownedSessions) has(session int64, m epochMark) bool {
	if session == o.first && session != 0 {
		return o.firstMark == m
	}
	got, ok := o.set[session]
	return ok && got == m
}

// add remembers session as the caller's, checked under the record marked m.
func (o *ownedSessions) add(session int64, m epochMark) {
	switch {
	case session == o.first && session != 0:
		o.firstMark = m
		return
	case o.set != nil && o.known(session):
		o.set[session] = m
		return
	case o.first == 0:
		o.first, o.firstMark = session, m
		return
	case o.set == nil:
		o.set = map[int64]epochMark{}
	}
	if len(o.order) < maxOwned-1 {
		o.order = append(o.order, session)
	} else {
		// The slot's session may be gone already (or re-added since);
		// forgetting it wrongly costs one read.
		delete(o.set, o.order[o.next])
		o.order[o.next] = session
		o.next = (o.next + 1) % (maxOwned - 1)
	}
	o.set[session] = m
}

func (o *ownedSessions) known(session int64) bool {
	_, ok := o.set[session]
	return ok
}

func (o *ownedSessions) remove(session int64) {
	if session == o.first {
		o.first = 0
	}
	delete(o.set, session)
}

func (o *ownedSessions) len() int {
	if o.first != 0 {
		return len(o.set) + 1
	}
	return len(o.set)
}

func (a *Arbiter) renew(ctx context.Context, caller spiffeid.ID, session int64, owned *ownedSessions) *lockv1.KeepAliveResponse {
	if session == 0 {
		return &lockv1.KeepAliveResponse{Error: lockv1.ErrorReason_INVALID_ARGUMENT, ErrorMessage: "session_id: is required"}
	}
	// The owner is checked once a stream and epoch record; a force-release
	// is checked at every renewal (renewLease), however the stream began.
	// The mark is taken before the check: a record that changes after it
	// (an advance deleting every session record) makes the next renewal
	// check again, and the one after the watch delivers it at the latest.
	ttl, failed, err := a.renewLease(ctx, session, func() error {
		m := a.epochs.mark()
		if owned.has(session, m) {
			return nil
		}
		if err := a.checkOwner(ctx, caller, session); err != nil {
			if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED && owned.known(session) {
				// The record of a session this stream proved its own is
				// gone (an advance deleted it): a lease without it can
				// grant nothing. Never for a session it did not prove: a
				// lease granted a moment before its record is written
				// would be anyone's to revoke.
				a.discardLease(clientv3.LeaseID(session))
			}
			return err
		}
		owned.add(session, m)
		return nil
	})
	if err == nil {
		err = a.sessionLives(ctx, session)
	}
	if err != nil {
		why := reason.Of(err)
		// The owner check's read failing without quorum is a keepalive no
		// quorum confirmed, as the renewal's own failure is.
		if failed || why == lockv1.ErrorReason_NO_QUORUM {
			a.metrics.renewalFailed(a.cfg.Cluster)
		}
		if why == lockv1.ErrorReason_SESSION_EXPIRED {
			owned.remove(session)
		}
		return &lockv1.KeepAliveResponse{SessionId: session, Error: why, ErrorMessage: "renewal: " + status.Convert(err).Message()}
	}
	a.metrics.renewed(a.cfg.Cluster)
	return &lockv1.KeepAliveResponse{SessionId: session, Ttl: durationpb.New(secs(ttl)), Ended: a.forced.of(session)}
}

// sessionLives reads, after a renewal etcd confirmed, that the session's
// record still exists, linearizably (renewals asked at once share one
// read). An epoch advance deletes every session record but not the
// leases: without this read, an arbiter whose epoch watch lags would go
// on renewing a session whose holds the advance ended, and its holder
// would believe past the advance's quiet period. A record read after the
// renewal was sent means the advance committed after that send time, so
// the holder's deadline ends within the quiet period.
func (a *Arbiter) sessionLives(ctx context.Context, session int64) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	key := lockkey.SessionKey(session)
	resp, err := a.sessionReads.get(octx, key, clientv3.OpGet(key, clientv3.WithCountOnly()))
	if err != nil {
		return a.etcdFailure(ctx, err)
	}
	if resp.Count == 0 {
		// Proven the caller's by the renewal's owner check.
		a.discardLease(clientv3.LeaseID(session))
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED,
			"the session has ended: its record is gone (an epoch advance ends every session of the cluster); open a new one")
	}
	return nil
}

// checkOwner reads the session record and refuses another identity's
// session. A linearizable read: it fails closed without quorum.
func (a *Arbiter) checkOwner(ctx context.Context, caller spiffeid.ID, session int64) error {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	resp, err := a.etcd.Get(octx, lockkey.SessionKey(session))
	if err != nil {
		return a.etcdFailure(ctx, err)
	}
	a.observeHeader(resp.Header)
	if len(resp.Kvs) == 0 {
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SESSION_EXPIRED, "the session has expired or was closed")
	}
	rec, err := decodeSession(resp.Kvs[0].Value)
	if err != nil {
		return notOwned()
	}
	a.owners.put(session, rec.Identity)
	if rec.Identity != caller.String() {
		return notOwned()
	}
	return nil
}

// CloseSession implements lockv1.LockServiceServer: revoking the lease
// deletes every hold on it in one committed entry.
func (a *Arbiter) CloseSession(ctx context.Context, req *lockv1.CloseSessionRequest) (*lockv1.CloseSessionResponse, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if err := requireSession(req.GetSessionId()); err != nil {
		return nil, err
	}
	if err := a.checkOwner(ctx, caller, req.GetSessionId()); err != nil {
		if reason.Of(err) == lockv1.ErrorReason_SESSION_EXPIRED {
			return &lockv1.CloseSessionResponse{}, nil
		}
		return nil, err
	}
	if err := a.closeLease(ctx, req.GetSessionId()); err != nil {
		return nil, err
	}
	return &lockv1.CloseSessionResponse{}, nil
}
