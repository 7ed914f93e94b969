package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/lockkey/records"
)

// claimBound is how old a claim of an action of kind may be before
// reconcile, finding nothing done, puts the request back to pending: past
// the approval's own deadline (workTimeoutOf) and one more call, its
// approver has stopped. Tests shorten it with Hooks.ClaimBound.
func (s *Server) claimBound(kind string) time.Duration {
	if d := s.hooked().ClaimBound; d != nil {
		return *d
	}
	return s.workTimeoutOf(kind) + s.cfg.Bound.Timeout
}

// reconcile settles a request left executing, by an approval that stopped
// between its claim and recording the outcome, from what is in etcd: the
// force record on the holds' cluster, or the epoch record naming the
// request. Done, it is approved, with its Result. Not done and claimed
// more than claimBound ago, it is put back to pending, to be approved
// again or to expire; that is safe even if the stopped approval's Txn were
// still to commit, since a force record or an epoch compare lets only one
// run of an action commit, and a second approval then finds the first's
// record and reports it. Otherwise, or when etcd cannot say, it is left
// as it is.
func (s *Server) reconcile(ctx context.Context, rec actionRecord, rev int64) (actionRecord, int64) {
	if rec.State != stateExecuting {
		return rec, rev
	}
	res, done, err := s.outcome(ctx, rec)
	if err != nil {
		s.log().Warn("executing request not reconciled", "action", rec.ID, "err", err)
		return rec, rev
	}
	next := rec
	switch {
	case done:
		next.State, next.Result = stateApproved, res
	case time.Since(rec.ClaimedAt) > s.claimBound(rec.Kind):
		next.State, next.DecidedBy, next.DecidedAt, next.ClaimedAt = statePending, nil, time.Time{}, time.Time{}
	default:
		return rec, rev
	}
	nrev, err := s.decide(ctx, next, rev)
	if err != nil {
		// Decided or expired meanwhile: what is stored now.
		if again, arev, lerr := s.load(ctx, rec.ID); lerr == nil {
			return again, arev
		}
		return rec, rev
	}
	s.log().Warn("executing request reconciled", "action", rec.ID, "state", next.State)
	return next, nrev
}

// outcome reads back whether action rec was carried out: its force record
// on the holds' cluster, or the epoch record its advance wrote.
func (s *Server) outcome(ctx context.Context, rec actionRecord) (*actionResult, bool, error) {
	switch rec.Kind {
	case kindForceRelease:
		a, err := s.cluster(rec.Hold.Cluster)
		if err != nil {
			return nil, false, err
		}
		octx, cancel := s.cfg.Bound.Ctx(ctx)
		defer cancel()
		resp, err := a.Etcd().Get(octx, records.ForceKey(rec.ID))
		if err != nil {
			return nil, false, s.cfg.Bound.Failure(ctx, err)
		}
		if len(resp.Kvs) == 0 {
			return nil, false, nil
		}
		return forceDone(rec, resp.Kvs[0])
	case kindEpochAdvance:
		a, err := s.cluster(rec.Advance.Cluster)
		if err != nil {
			return nil, false, err
		}
		octx, cancel := s.cfg.Bound.Ctx(ctx)
		defer cancel()
		st, found, err := epoch.Read(octx, a.Etcd())
		if err != nil {
			return nil, false, s.cfg.Bound.Failure(ctx, err)
		}
		if !found || !advancedBy(st.Reason, rec.ID) {
			return nil, false, nil
		}
		return &actionResult{Revision: st.ModRevision, Epoch: st.Epoch}, true, nil
	case kindShardAdd:
		return s.shardAddDone(ctx, rec)
	}
	return nil, false, fmt.Errorf("request %s is of unknown kind %s", rec.ID, rec.Kind)
}
