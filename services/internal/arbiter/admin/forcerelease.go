package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// maxTxnOps is etcd's default --max-txn-ops: the most compares, or
// operations of a branch, one Txn may have.
const maxTxnOps = 128

// MaxRevokedHolds is the most holds a revoke_session force-release ends:
// its Txn compares the force record and each hold's revision and value.
const MaxRevokedHolds = (maxTxnOps - 1) / 2

// approveForce ends the requested hold, or with revoke_session every hold
// of its session, in one Txn on the holds' cluster that commits only if
// each is still the one requested (revision and value) and the force
// record is new; the record goes on a 24-hour lease of its own. A force
// record of this request already there (a run whose answer was lost) is
// this run's success. A revoked session's lease is revoked after.
func (s *Server) approveForce(ctx context.Context, rec actionRecord, approver Operator) (*adminv1.ForceReleaseResult, error) {
	a, err := s.cluster(rec.Hold.Cluster)
	if err != nil {
		return nil, err
	}
	holds := []holdFact{*rec.Hold}
	if rec.RevokeSession {
		// The session's holds now must be those requested: a hold it took
		// since would end with the lease unannounced.
		now, err := s.sessionHolds(ctx, a, rec.Hold.Session)
		if err != nil {
			return nil, err
		}
		if !sameHolds(now, rec.SessionHolds) {
			if res, done, err := s.outcome(ctx, rec); err == nil && done {
				return s.forceReleased(ctx, a, rec, res), nil
			}
			return nil, stale("session_holds_changed", fmt.Sprintf("session %d's holds changed since request %s was made: nothing was released; request again to see them",
				rec.Hold.Session, rec.ID))
		}
		holds = rec.SessionHolds
	}
	fr := records.Force{Action: rec.ID, Kind: kindForceRelease, Key: rec.Hold.Key, Cluster: a.Name(), Requester: rec.Requester.String(),
		Approver: approver.String(), Reason: rec.Reason, Class: rec.Hold.Class, Enforcement: enforcementOrUnknown(rec.Hold.Enforcement),
		Identity: rec.Hold.Identity, Instance: rec.Hold.Instance, Session: rec.Hold.Session, RevokeSession: rec.RevokeSession, At: time.Now().UTC()}
	for _, h := range holds {
		fr.Holds = append(fr.Holds, records.ForcedHold{Key: h.Key, Session: h.Session, Revision: h.Revision})
	}
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	lease, err := a.Etcd().Grant(octx, int64(records.ForceTTL/time.Second))
	if err != nil {
		return nil, s.cfg.Bound.Failure(ctx, err)
	}
	cmps, ops := forceTxn(a, rec, holds, fr, lease.ID)
	var resp *clientv3.TxnResponse
	run, herr := s.actionTxnHook(rec.ID)
	if run {
		resp, err = a.Etcd().Txn(octx).If(cmps...).Then(ops...).Else(clientv3.OpGet(records.ForceKey(rec.ID))).Commit()
	}
	if herr != nil {
		err = herr
	}
	var res *actionResult
	switch {
	case err != nil:
		// The Txn may have committed all the same. Its lease is kept: to
		// revoke it would delete a committed force record, and the holder
		// would never hear; unused, it lapses within the day.
		ferr := s.cfg.Bound.Failure(ctx, err)
		r, done, rerr := s.outcome(ctx, rec)
		if rerr != nil {
			return nil, unsettled{ferr}
		}
		if !done {
			return nil, ferr
		}
		s.log().Warn("force-release read back as committed", "action", rec.ID, "err", err)
		res = r
	case resp.Succeeded:
		res = &actionResult{Revision: resp.Header.Revision, Record: records.ForceKey(rec.ID)}
		for _, h := range holds {
			res.Released = append(res.Released, h.Key)
		}
	default:
		a.DiscardLease(lease.ID)
		if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
			r, done, err := forceDone(rec, kvs[0])
			if err != nil {
				return nil, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
			}
			if done {
				res = r
				break
			}
		}
		return nil, stale("hold_changed", fmt.Sprintf("the hold of %s is no longer the one request %s names (released, handed off, expired or re-granted since revision %d): nothing was released",
			rec.Hold.Key, rec.ID, rec.Hold.Revision), "key", rec.Hold.Key)
	}
	s.log().Warn("force-released", "action", rec.ID, "keys", res.Released, "cluster", a.Name(), "holder", rec.Hold.Identity,
		"session", rec.Hold.Session, "class", rec.Hold.Class, "enforcement", fr.Enforcement,
		"requester", fr.Requester, "approver", fr.Approver, "reason", rec.Reason, "revision", res.Revision)
	return s.forceReleased(ctx, a, rec, res), nil
}

// forceTxn is the force-release Txn: each hold compared on its revision
// and value and deleted, the force record put once. A var so that tests
// can show a broken variant fail their safety checks.
var forceTxn = func(a Cluster, rec actionRecord, holds []holdFact, fr records.Force, lease clientv3.LeaseID) ([]clientv3.Cmp, []clientv3.Op) {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(records.ForceKey(rec.ID)), "=", 0)}
	var ops []clientv3.Op
	for _, h := range holds {
		k := lockkey.HoldKey(h.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", h.Revision), clientv3.Compare(clientv3.Value(k), "=", h.Value))
		ops = append(ops, clientv3.OpDelete(k))
	}
	if rec.RevokeSession {
		ops = append(ops, clientv3.OpDelete(lockkey.SessionKey(rec.Hold.Session)))
	}
	ops = append(ops, clientv3.OpPut(records.ForceKey(rec.ID), fr.Encode(), clientv3.WithLease(lease)))
	return cmps, ops
}

// forceDone is the result of action rec read from its force record kv.
func forceDone(rec actionRecord, kv *mvccpb.KeyValue) (*actionResult, bool, error) {
	var fr records.Force
	if err := json.Unmarshal(kv.Value, &fr); err != nil || fr.Action != rec.ID {
		return nil, false, fmt.Errorf("force record %s is unreadable or not request %s's", kv.Key, rec.ID)
	}
	res := &actionResult{Revision: kv.ModRevision, Record: string(kv.Key)}
	for _, h := range fr.Holds {
		res.Released = append(res.Released, h.Key)
	}
	return res, true, nil
}

// sessionRevokeTries bounds the attempts to revoke a force-released
// session's lease.
const sessionRevokeTries = 3

// forceReleased is the result of a committed force-release, its session
// revoked first when asked. The session record went in the Txn, so its
// keepalives are refused from the force record on (renew); the lease
// itself must still be revoked, or the holds on it on other clusters and
// the lease live on while anything renews it: tried sessionRevokeTries
// times under ctx (the approval's own deadline, not the call's).
func (s *Server) forceReleased(ctx context.Context, a Cluster, rec actionRecord, res *actionResult) *adminv1.ForceReleaseResult {
	out := &adminv1.ForceReleaseResult{Revision: res.Revision, Record: res.Record, Released: res.Released}
	if !rec.RevokeSession {
		return out
	}
	var err error
	for try := range sessionRevokeTries {
		if try > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(try) * 100 * time.Millisecond):
			}
		}
		if err = s.sessionRevokingHook(rec.Hold.Session); err == nil {
			err = a.RevokeSession(ctx, rec.Hold.Session)
		}
		if err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		s.log().Error("force-release: session lease not revoked; its keepalives are refused, so it lapses within its TTL",
			"action", rec.ID, "session", rec.Hold.Session, "err", err)
	} else {
		out.SessionRevoked = true
	}
	return out
}

func sameHolds(a, b []holdFact) bool {
	return slices.EqualFunc(a, b, func(x, y holdFact) bool { return x.Key == y.Key && x.Revision == y.Revision && x.Value == y.Value })
}

func enforcementOrUnknown(e string) string {
	if e == "" {
		return "unknown"
	}
	return e
}
