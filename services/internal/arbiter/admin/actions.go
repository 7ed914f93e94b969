package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/lockkey/records"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Two-person actions (ADR-20, ADR-03). One operator requests, a different
// one approves; both are signed in (operator.go). A request is a record
// on the coord cluster under records.ActionPrefix, on a lease of
// Config.ActionTTL, so an unanswered request is forgotten by etcd itself. Force-release,
// epoch advance and shard add share this storage and these steps; only
// what approval carries out differs (approveForce in forcerelease.go,
// approveAdvance in epochadvance.go, approveShardAdd in shardadd.go).
//
// This file has the RPCs and the two-person steps; how a request is
// stored and decided in etcd is in actionstore.go, the holds it names are
// read in holdfacts.go, an executing one is settled in reconcile.go, and
// its proto messages are made in actionproto.go.

func stale(cause, msg string, meta ...string) error {
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ACTION_STALE, msg, append([]string{"cause", cause}, meta...)...)
}

// RequestForceRelease implements adminv1.AdminServiceServer.
func (s *Server) RequestForceRelease(ctx context.Context, req *adminv1.RequestForceReleaseRequest) (*adminv1.RequestForceReleaseResponse, error) {
	op, err := s.signedInOperator(ctx)
	if err != nil {
		return nil, err
	}
	if err := requireReason(req.GetReason()); err != nil {
		return nil, err
	}
	if err := lockkey.Validate(req.GetKey()); err != nil {
		return nil, refuse.InvalidArgument("key", err.Error())
	}
	a, kv, err := s.findHold(ctx, req.GetKey())
	if err != nil {
		return nil, err
	}
	hold, err := s.fact(a, req.GetKey(), kv)
	if err != nil {
		return nil, err
	}
	rec := actionRecord{Kind: kindForceRelease, Requester: op, Reason: req.GetReason(), Hold: &hold, RevokeSession: req.GetRevokeSession()}
	if rec.RevokeSession {
		if rec.SessionHolds, err = s.sessionHolds(ctx, a, hold.Session); err != nil {
			return nil, err
		}
		if n := len(rec.SessionHolds); n > MaxRevokedHolds {
			return nil, refuse.InvalidArgument("revoke_session", fmt.Sprintf("session %d holds %d locks on cluster %s; one force-release can end at most %d "+
				"(its Txn compares each hold twice, and etcd's max-txn-ops is %d): force-release the holds one by one, without --revoke-session",
				hold.Session, n, hold.Cluster, MaxRevokedHolds, maxTxnOps))
		}
	}
	if err := s.store(ctx, &rec); err != nil {
		return nil, err
	}
	s.log().Info("force-release requested", "action", rec.ID, "key", hold.Key, "cluster", hold.Cluster, "holder", hold.Identity,
		"class", hold.Class, "enforcement", hold.Enforcement, "revoke_session", rec.RevokeSession, "by", op.String(), "reason", rec.Reason)
	return &adminv1.RequestForceReleaseResponse{Action: rec.proto()}, nil
}

// RequestEpochAdvance implements adminv1.AdminServiceServer.
func (s *Server) RequestEpochAdvance(ctx context.Context, req *adminv1.RequestEpochAdvanceRequest) (*adminv1.RequestEpochAdvanceResponse, error) {
	op, err := s.signedInOperator(ctx)
	if err != nil {
		return nil, err
	}
	adv := req.GetAdvance()
	if err := requireReason(adv.GetReason()); err != nil {
		return nil, err
	}
	a, err := s.cluster(adv.GetCluster())
	if err != nil {
		return nil, err
	}
	rec := actionRecord{Kind: kindEpochAdvance, Requester: op, Reason: adv.GetReason(),
		Advance: &advanceArgs{Cluster: a.Name(), Expected: adv.GetExpectedEpoch(), Reason: adv.GetReason()}}
	if adv.Above != nil {
		above := adv.GetAbove()
		rec.Advance.Above = &above
	}
	if err := s.store(ctx, &rec); err != nil {
		return nil, err
	}
	s.log().Info("epoch advance requested", "action", rec.ID, "cluster", a.Name(), "expected", rec.Advance.Expected, "by", op.String(), "reason", rec.Reason)
	return &adminv1.RequestEpochAdvanceResponse{Action: rec.proto()}, nil
}

// pending checks action rec may be decided by op now.
func pending(rec actionRecord, op Operator, verb string) error {
	switch {
	case rec.State == stateExecuting:
		return stale("action_executing", fmt.Sprintf("request %s is being carried out (claimed at %s): lockctl force-release show %s for its outcome",
			rec.ID, rec.ClaimedAt.Format(time.RFC3339), rec.ID))
	case rec.State != statePending:
		by := ""
		if rec.DecidedBy != nil {
			by = " by " + rec.DecidedBy.String()
		}
		return stale("action_"+rec.State, fmt.Sprintf("request %s is %s%s, not pending", rec.ID, rec.State, by))
	case !time.Now().Before(rec.ExpiresAt):
		return stale("action_expired", fmt.Sprintf("request %s expired at %s; request again", rec.ID, rec.ExpiresAt.Format(time.RFC3339)))
	case !twoPersonRule(rec.Requester, op):
		return refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED,
			fmt.Sprintf("request %s was made by %s: a different operator must %s it (two-person rule, ADR-20)", rec.ID, rec.Requester.String(), verb),
			"cause", "same_operator")
	}
	return nil
}

// twoPersonRule reports whether approver may decide requester's request:
// a different person, by issuer and subject. A var so that tests can show
// a broken variant fail their checks.
var twoPersonRule = func(requester, approver Operator) bool { return !requester.same(approver) }

// ApproveAction implements adminv1.AdminServiceServer. The request is
// claimed (pending → executing, compared on its revision, so two
// approvers or an approval and a denial cannot both win), then carried out
// under a deadline of its own (workCtx): the caller may go and the call's
// budget may be spent, but a claimed request is owed a known outcome. It
// ends approved (Result says what was done), failed (what it was to do no
// longer applies; nothing was changed), or pending again when etcd could
// not be reached and reading back showed nothing done. When even the
// read-back fails it stays executing, and reconcile settles it later.
func (s *Server) ApproveAction(ctx context.Context, req *adminv1.ApproveActionRequest) (*adminv1.ApproveActionResponse, error) {
	op, err := s.signedInOperator(ctx)
	if err != nil {
		return nil, err
	}
	rec, rev, err := s.load(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	rec, rev = s.reconcile(ctx, rec, rev)
	if err := pending(rec, op, "approve"); err != nil {
		return nil, err
	}
	s.actionLoadedHook(rec.ID)
	before := rec
	now := time.Now().UTC()
	rec.State, rec.DecidedBy, rec.DecidedAt, rec.ClaimedAt = stateExecuting, &op, now, now
	claimed, err := s.decide(ctx, rec, rev)
	if err != nil {
		return nil, err
	}
	if s.actionClaimedHook(rec.ID) {
		return nil, status.Error(codes.Aborted, "the approval stopped after its claim (test hook)")
	}
	wctx, cancel := s.workCtx(ctx, rec.Kind)
	defer cancel()
	out := &adminv1.ApproveActionResponse{}
	var res *actionResult
	switch rec.Kind {
	case kindForceRelease:
		if out.ForceRelease, err = s.approveForce(wctx, rec, op); err == nil {
			fr := out.ForceRelease
			res = &actionResult{Revision: fr.GetRevision(), Record: fr.GetRecord(), Released: fr.GetReleased(), SessionRevoked: fr.GetSessionRevoked()}
		}
	case kindEpochAdvance:
		if out.EpochAdvance, err = s.approveAdvance(wctx, rec, op); err == nil {
			res = &actionResult{Revision: out.EpochAdvance.GetRevision(), Epoch: out.EpochAdvance.GetEpoch()}
		}
	case kindShardAdd:
		if out.ShardAdd, err = s.approveShardAdd(wctx, rec, op); err == nil {
			res = &actionResult{MapVersion: out.ShardAdd.GetVersion(), Shards: out.ShardAdd.GetShards()}
		}
	default:
		err = refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "request "+rec.ID+" is of unknown kind "+rec.Kind)
	}
	next := rec
	var u unsettled
	switch {
	case err == nil:
		next.State, next.Result = stateApproved, res
	case errors.As(err, &u):
		s.log().Error("approval's outcome unknown: the request stays executing until it is read back", "action", rec.ID, "err", u.error)
		return nil, u.error
	case precondition(err):
		next.State, next.DecisionReason = stateFailed, reasonText(err)
	default:
		// Read back: nothing was done (or, a shard add, only steps that a
		// second run resumes). Pending again, to be approved again.
		next = before
	}
	if _, derr := s.decide(wctx, next, claimed); derr != nil {
		s.log().Error("approved request's outcome not recorded; reconcile records it", "action", rec.ID, "state", next.State, "err", derr)
	}
	if err != nil {
		return nil, err
	}
	out.Action = next.proto()
	return out, nil
}

// unsettled is an approval's error when whether it was carried out is
// unknown even after reading back: the request stays executing.
type unsettled struct{ error }

func (u unsettled) Unwrap() error { return u.error }

// workTimeout bounds all an approval does once it has claimed its
// request: the reads, the Txn, reading back, the session revoke and the
// record of the outcome, or an epoch advance (advanceEpoch).
func (s *Server) workTimeout() time.Duration {
	return time.Duration(10+len(s.shards)) * s.cfg.Bound.Timeout
}

// workTimeoutOf is workTimeout for an action of kind; a shard add waits
// for holders first (shardAddWait) and keeps workTimeout for the rest.
func (s *Server) workTimeoutOf(kind string) time.Duration {
	if kind == kindShardAdd {
		return s.shardAddWait() + s.workTimeout()
	}
	return s.workTimeout()
}

// workCtx is ctx without its cancellation and with a fresh budget of
// workTimeoutOf(kind): an approval that has claimed its request runs to a
// known outcome even if its caller goes, or its own budget went on
// verifying the operator's token.
func (s *Server) workCtx(ctx context.Context, kind string) (context.Context, context.CancelFunc) {
	d := s.workTimeoutOf(kind)
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	return etcdcall.WithBudget(wctx, time.Now().Add(d)), cancel
}

// precondition reports an approval that failed because what it was to do
// no longer applies (rather than for want of etcd).
func precondition(err error) bool {
	switch reason.Of(err) {
	case lockv1.ErrorReason_ACTION_STALE, lockv1.ErrorReason_EPOCH_CHANGED, lockv1.ErrorReason_SEALED, lockv1.ErrorReason_INVALID_ARGUMENT:
		return true
	}
	return false
}

func reasonText(err error) string {
	if m, _ := reason.Info(err); m != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		return m.String() + ": " + status.Convert(err).Message()
	}
	return status.Convert(err).Message()
}

// DenyAction implements adminv1.AdminServiceServer. The requester may
// withdraw their own request; anyone else signed in may deny it.
func (s *Server) DenyAction(ctx context.Context, req *adminv1.DenyActionRequest) (*adminv1.DenyActionResponse, error) {
	op, err := s.signedInOperator(ctx)
	if err != nil {
		return nil, err
	}
	if err := requireReason(req.GetReason()); err != nil {
		return nil, err
	}
	rec, rev, err := s.load(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	if rec.State != statePending {
		return nil, pending(rec, Operator{}, "deny")
	}
	s.actionLoadedHook(rec.ID)
	rec.State, rec.DecidedBy, rec.DecidedAt, rec.DecisionReason = stateDenied, &op, time.Now().UTC(), req.GetReason()
	if _, err := s.decide(ctx, rec, rev); err != nil {
		return nil, err
	}
	s.log().Info("request denied", "action", rec.ID, "kind", rec.Kind, "by", op.String(), "reason", req.GetReason())
	return &adminv1.DenyActionResponse{Action: rec.proto()}, nil
}

// GetAction implements adminv1.AdminServiceServer.
func (s *Server) GetAction(ctx context.Context, req *adminv1.GetActionRequest) (*adminv1.GetActionResponse, error) {
	if _, err := s.signedInOperator(ctx); err != nil {
		return nil, err
	}
	rec, rev, err := s.load(ctx, req.GetId())
	if err != nil {
		return nil, err
	}
	rec, _ = s.reconcile(ctx, rec, rev)
	return &adminv1.GetActionResponse{Action: rec.proto()}, nil
}

// maxListed caps ListActions; requests expire, so more is a flood.
const maxListed = 1000

// ListActions implements adminv1.AdminServiceServer.
func (s *Server) ListActions(ctx context.Context, req *adminv1.ListActionsRequest) (*adminv1.ListActionsResponse, error) {
	if _, err := s.signedInOperator(ctx); err != nil {
		return nil, err
	}
	switch req.GetKind() {
	case "", kindForceRelease, kindEpochAdvance, kindShardAdd:
	default:
		return nil, refuse.InvalidArgument("kind", "must be force_release, epoch_advance, shard_add or empty")
	}
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	resp, err := s.coord.Etcd().Get(octx, records.ActionPrefix, clientv3.WithPrefix(), clientv3.WithLimit(maxListed))
	if err != nil {
		return nil, s.cfg.Bound.Failure(ctx, err)
	}
	out := &adminv1.ListActionsResponse{}
	for _, kv := range resp.Kvs {
		var rec actionRecord
		if validActionID(strings.TrimPrefix(string(kv.Key), records.ActionPrefix)) != nil {
			continue // a request's own record, as a shard add's map mark
		}
		if json.Unmarshal(kv.Value, &rec) != nil || req.GetKind() != "" && rec.Kind != req.GetKind() {
			continue
		}
		rec, _ = s.reconcile(ctx, rec, kv.ModRevision)
		out.Actions = append(out.Actions, rec.proto())
	}
	slices.SortFunc(out.Actions, func(x, y *adminv1.Action) int {
		return x.GetRequestedAt().AsTime().Compare(y.GetRequestedAt().AsTime())
	})
	return out, nil
}
