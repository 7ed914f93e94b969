package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/internal/records"
	"github.com/lockplane/lockplane/services/lockkey"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Two-person actions (ADR-20, ADR-03). One operator requests, a different
// one approves; both are signed in (operator.go). A request is a record
// on the coord cluster under records.ActionPrefix, on a lease of
// Config.ActionTTL, so an unanswered request is forgotten by etcd itself. Force-release,
// epoch advance and shard add share this storage and these steps; only
// what approval carries out differs (approveForce, approveAdvance,
// approveShardAdd in shardadd.go).

// The kinds and states of an action.
const (
	kindForceRelease = "force_release"
	kindEpochAdvance = "epoch_advance"
	kindShardAdd     = "shard_add"

	statePending = "pending"
	// stateExecuting: claimed by an approval that is carrying it out, or
	// that stopped (a crash, an outcome it could not read back) before it
	// recorded what happened. reconcile settles it from what is in etcd.
	stateExecuting = "executing"
	// stateApproved: carried out; Result says what it did.
	stateApproved = "approved"
	stateDenied   = "denied"
	// stateFailed: approved, but what it was to do no longer applied (the
	// hold changed) and nothing was done.
	stateFailed = "failed"
)

// actionIDLen is the length of an action's ID: 10 random bytes in hex.
const actionIDLen = 20

// actionRecord is the stored request. Never a token: a hold is named by
// key, revision and value (the hold record, which holds none).
type actionRecord struct {
	ID             string        `json:"id"`
	Kind           string        `json:"kind"`
	State          string        `json:"state"`
	Requester      Operator      `json:"requester"`
	Reason         string        `json:"reason"`
	RequestedAt    time.Time     `json:"requested_at"`
	ExpiresAt      time.Time     `json:"expires_at"`
	Hold           *holdFact     `json:"hold,omitempty"`
	RevokeSession  bool          `json:"revoke_session,omitempty"`
	SessionHolds   []holdFact    `json:"session_holds,omitempty"`
	Advance        *advanceArgs  `json:"advance,omitempty"`
	ShardAdd       *shardAddArgs `json:"shard_add,omitempty"`
	DecidedBy      *Operator     `json:"decided_by,omitempty"`
	DecisionReason string        `json:"decision_reason,omitempty"`
	DecidedAt      time.Time     `json:"decided_at,omitzero"`
	// ClaimedAt is when an approval claimed it (executing): reconcile
	// puts a claim older than claimBound with nothing done back to pending.
	ClaimedAt time.Time     `json:"claimed_at,omitzero"`
	Result    *actionResult `json:"result,omitempty"`
}

// actionResult is what an approved action did.
type actionResult struct {
	// Revision is the etcd revision of the force-release Txn or the epoch
	// record's.
	Revision int64 `json:"revision"`
	// Record is the force record's etcd key, on the holds' cluster.
	Record         string   `json:"record,omitempty"`
	Released       []string `json:"released,omitempty"`
	SessionRevoked bool     `json:"session_revoked,omitempty"`
	Epoch          uint32   `json:"epoch,omitempty"`
	// MapVersion and Shards are the map a shard add stored.
	MapVersion int64    `json:"map_version,omitempty"`
	Shards     []string `json:"shards,omitempty"`
}

// holdFact is a hold as it was at request time: what the operators are
// shown and what approval compares.
type holdFact struct {
	Key         string    `json:"key"`
	Cluster     string    `json:"cluster"`
	Identity    string    `json:"identity"`
	Instance    string    `json:"instance,omitempty"`
	Session     int64     `json:"session"`
	Class       string    `json:"class"`
	Enforcement string    `json:"enforcement"`
	Revision    int64     `json:"revision"`
	Since       time.Time `json:"since"`
	// Value is the hold record's bytes: approval compares them too.
	Value string `json:"value"`
}

// advanceArgs are an epoch advance's arguments (AdvanceEpochRequest).
type advanceArgs struct {
	Cluster  string  `json:"cluster"`
	Expected uint32  `json:"expected"`
	Above    *uint32 `json:"above,omitempty"`
	Reason   string  `json:"reason"`
}

func (r actionRecord) encode() string {
	b, _ := json.Marshal(r)
	return string(b)
}

func newActionID() string {
	b := make([]byte, actionIDLen/2)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func validActionID(id string) error {
	if len(id) != actionIDLen || strings.Trim(id, "0123456789abcdef") != "" {
		return refuse.InvalidArgument("id", fmt.Sprintf("must be the %d hex characters a request printed", actionIDLen))
	}
	return nil
}

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

// maxTxnOps is etcd's default --max-txn-ops: the most compares, or
// operations of a branch, one Txn may have.
const maxTxnOps = 128

// MaxRevokedHolds is the most holds a revoke_session force-release ends:
// its Txn compares the force record and each hold's revision and value.
const MaxRevokedHolds = (maxTxnOps - 1) / 2

// store gives rec an ID and puts it, pending, on a lease of ActionTTL on
// the coord cluster.
func (s *Server) store(ctx context.Context, rec *actionRecord) error {
	coord := s.coord
	ttl := s.cfg.ActionTTL
	rec.ID, rec.State = newActionID(), statePending
	rec.RequestedAt = time.Now().UTC()
	rec.ExpiresAt = rec.RequestedAt.Add(ttl)
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	lease, err := coord.Etcd().Grant(octx, int64(ttl/time.Second))
	if err != nil {
		return s.cfg.Bound.Failure(ctx, err)
	}
	put, err := coord.Etcd().Txn(octx).If(clientv3.Compare(clientv3.CreateRevision(records.ActionKey(rec.ID)), "=", 0)).
		Then(clientv3.OpPut(records.ActionKey(rec.ID), rec.encode(), clientv3.WithLease(lease.ID))).Commit()
	if err != nil || !put.Succeeded {
		coord.DiscardLease(lease.ID)
		if err == nil {
			err = errors.New("action ID collision")
		}
		return s.cfg.Bound.Failure(ctx, err)
	}
	return nil
}

// findHold finds key's hold on whichever of this arbiter's clusters has
// it: its class's tier and the shard map say where it should be, but the
// hold is what is to end, wherever it is.
func (s *Server) findHold(ctx context.Context, key string) (Cluster, *mvccpb.KeyValue, error) {
	var (
		found   Cluster
		kv      *mvccpb.KeyValue
		holders []string
	)
	for _, a := range s.all() {
		octx, cancel := s.cfg.Bound.Ctx(ctx)
		resp, err := a.Etcd().Get(octx, lockkey.HoldKey(key))
		cancel()
		if err != nil {
			return nil, nil, s.cfg.Bound.Failure(ctx, err)
		}
		if len(resp.Kvs) > 0 {
			found, kv, holders = a, resp.Kvs[0], append(holders, a.Name())
		}
	}
	switch len(holders) {
	case 0:
		return nil, nil, refuse.With(codes.NotFound, lockv1.ErrorReason_INVALID_ARGUMENT, "key "+key+" is not held on any cluster this arbiter serves: nothing to release",
			"field", "key")
	case 1:
		return found, kv, nil
	}
	return nil, nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_INVALID_ARGUMENT,
		fmt.Sprintf("key %s is held on more than one cluster (%v), which only a range move in progress explains: wait for it to finish", key, holders), "field", "key")
}

// all is the coord cluster's arbiter and the entity shards', sorted.
func (s *Server) all() []Cluster {
	out := []Cluster{s.coord}
	for _, name := range s.shardNames() {
		out = append(out, s.shards[name])
	}
	return out
}

// fact is what an operator is shown of the hold kv of key on a's cluster.
func (s *Server) fact(a Cluster, key string, kv *mvccpb.KeyValue) (holdFact, error) {
	h, err := records.DecodeHold(kv.Value)
	if err != nil {
		return holdFact{}, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "unreadable hold record for key "+key)
	}
	return holdFact{Key: key, Cluster: a.Name(), Identity: h.Identity, Instance: h.Instance, Session: kv.Lease,
		Class: h.Class, Enforcement: s.enforcement(h.Class), Revision: kv.ModRevision, Since: h.Since, Value: string(kv.Value)}, nil
}

// enforcement is the class's, from the policy set: fenced or advisory;
// "" for a class the registry reports no facts of.
func (s *Server) enforcement(class string) string {
	if f, ok := s.cfg.Classes.(ClassFacts); ok {
		for _, c := range f.ClassFacts() {
			if c.Name == class {
				return c.Enforcement
			}
		}
	}
	return ""
}

// sessionHolds are the holds on session's lease on a's cluster, from the
// keys etcd has attached to the lease.
func (s *Server) sessionHolds(ctx context.Context, a Cluster, session int64) ([]holdFact, error) {
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	ttl, err := a.Etcd().TimeToLive(octx, clientv3.LeaseID(session), clientv3.WithAttachedKeys())
	if err != nil {
		return nil, s.cfg.Bound.Failure(ctx, err)
	}
	var gets []clientv3.Op
	for _, k := range ttl.Keys {
		if strings.HasPrefix(string(k), lockkey.HoldPrefix) {
			gets = append(gets, clientv3.OpGet(string(k)))
		}
	}
	if len(gets) == 0 {
		return nil, nil
	}
	resp, err := a.Etcd().Txn(octx).Then(gets...).Commit()
	if err != nil {
		return nil, s.cfg.Bound.Failure(ctx, err)
	}
	var out []holdFact
	for _, r := range resp.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if kv.Lease != session {
				continue
			}
			f, err := s.fact(a, strings.TrimPrefix(string(kv.Key), lockkey.HoldPrefix), kv)
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
	}
	slices.SortFunc(out, func(x, y holdFact) int { return strings.Compare(x.Key, y.Key) })
	return out, nil
}

// load reads action id: its record and revision. NOT_FOUND once its
// lease has ended.
func (s *Server) load(ctx context.Context, id string) (actionRecord, int64, error) {
	if err := validActionID(id); err != nil {
		return actionRecord{}, 0, err
	}
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	resp, err := s.coord.Etcd().Get(octx, records.ActionKey(id))
	if err != nil {
		return actionRecord{}, 0, s.cfg.Bound.Failure(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return actionRecord{}, 0, refuse.With(codes.NotFound, lockv1.ErrorReason_ACTION_STALE,
			"no request "+id+": it has expired (requests live "+s.cfg.ActionTTL.String()+") or never existed; request again", "cause", "action_expired")
	}
	var rec actionRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return actionRecord{}, 0, refuse.With(codes.Internal, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "unreadable request "+id)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// decide moves action rec, read at rev, to its next state, if no one
// else has decided it since; the record keeps its lease.
func (s *Server) decide(ctx context.Context, rec actionRecord, rev int64) (int64, error) {
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	resp, err := s.coord.Etcd().Txn(octx).If(claimCompare(rec.ID, rev)...).
		Then(clientv3.OpPut(records.ActionKey(rec.ID), rec.encode(), clientv3.WithIgnoreLease())).Commit()
	if err != nil {
		return 0, s.cfg.Bound.Failure(ctx, err)
	}
	if !resp.Succeeded {
		return 0, stale("action_changed", "request "+rec.ID+" was decided or expired meanwhile: lockctl force-release show "+rec.ID)
	}
	return resp.Header.Revision, nil
}

// claimCompare is what decide compares: the request is still at the
// revision it was read at. A var so that tests can show a broken variant
// let two decisions both win.
var claimCompare = func(id string, rev int64) []clientv3.Cmp {
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(records.ActionKey(id)), "=", rev)}
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
		return shardAddWait(s) + s.workTimeout()
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

// claimBound is how old a claim of an action of kind may be before
// reconcile, finding nothing done, puts the request back to pending: past
// the approval's own deadline (workTimeoutOf) and one more call, its
// approver has stopped. A var so that tests need not wait that long.
var claimBound = func(s *Server, kind string) time.Duration { return s.workTimeoutOf(kind) + s.cfg.Bound.Timeout }

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
	case time.Since(rec.ClaimedAt) > claimBound(s, rec.Kind):
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

// advanceMark is how an epoch record's reason names the request that
// advanced it (approveAdvance's "by", in advanceEpoch's reason).
func advanceMark(id string) string { return ", request " + id + " at " }

// advancedBy reports whether an epoch record's reason was written by
// request id's advance. advanceEpoch writes the requester's reason first
// and its own tail last: " (by ..., request ID at TIME)". Only that tail
// is the server's, so the mark counts only there: a reason quoting another
// request's mark cannot make it read back as carried out (issue 32).
func advancedBy(reason, id string) bool {
	head, ok := strings.CutSuffix(reason, ")")
	if !ok {
		return false
	}
	i := strings.LastIndex(head, " at ")
	if i < 0 {
		return false
	}
	if _, err := time.Parse(time.RFC3339, head[i+len(" at "):]); err != nil {
		return false
	}
	return strings.HasSuffix(head[:i+len(" at ")], advanceMark(id))
}

// approveAdvance runs an approved epoch advance. Whatever its error, the
// epoch record is read back: an advance that committed though its answer
// was lost (or that a retry finds already made, EPOCH_CHANGED) is this
// request's success.
func (s *Server) approveAdvance(ctx context.Context, rec actionRecord, approver Operator) (*adminv1.AdvanceEpochResponse, error) {
	adv := rec.Advance
	req := &adminv1.AdvanceEpochRequest{Cluster: adv.Cluster, ExpectedEpoch: adv.Expected, Reason: adv.Reason, Above: adv.Above}
	by := fmt.Sprintf("requested by %s, approved by %s, request %s", rec.Requester.String(), approver.String(), rec.ID)
	var (
		out *adminv1.AdvanceEpochResponse
		err error
	)
	run, herr := s.actionTxnHook(rec.ID)
	if run {
		out, err = s.advanceEpoch(ctx, by, req)
	}
	if herr != nil {
		err = s.advanceFailure(ctx, herr)
	}
	if err == nil {
		return out, nil
	}
	res, done, rerr := s.outcome(ctx, rec)
	switch {
	case rerr != nil:
		if precondition(err) {
			return nil, err
		}
		return nil, unsettled{err}
	case done:
		s.log().Warn("epoch advance read back as made", "action", rec.ID, "err", err)
		return &adminv1.AdvanceEpochResponse{Epoch: res.Epoch, PreviousEpoch: adv.Expected, Revision: res.Revision}, nil
	}
	return nil, err
}

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

func sameHolds(a, b []holdFact) bool {
	return slices.EqualFunc(a, b, func(x, y holdFact) bool { return x.Key == y.Key && x.Revision == y.Revision && x.Value == y.Value })
}

func enforcementOrUnknown(e string) string {
	if e == "" {
		return "unknown"
	}
	return e
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

// advisoryWarning is said of every hold of a class not known to be fenced.
const advisoryWarning = "class %s of %s is %s: nothing at the resource refuses the holder's late writes, so once the hold ends the holder (alive and renewing) and the next one may both write at once"

func (rec actionRecord) proto() *adminv1.Action {
	out := &adminv1.Action{Id: rec.ID, Kind: rec.Kind, State: rec.State, Requester: rec.Requester.proto(), Reason: rec.Reason,
		RequestedAt: timestamppb.New(rec.RequestedAt), ExpiresAt: timestamppb.New(rec.ExpiresAt), RevokeSession: rec.RevokeSession,
		DecisionReason: rec.DecisionReason}
	if rec.DecidedBy != nil {
		out.DecidedBy, out.DecidedAt = rec.DecidedBy.proto(), timestamppb.New(rec.DecidedAt)
	}
	if rec.Hold != nil {
		out.Hold = rec.Hold.proto()
		holds := []holdFact{*rec.Hold}
		for _, h := range rec.SessionHolds {
			out.SessionHolds = append(out.SessionHolds, h.proto())
			if h.Key != rec.Hold.Key {
				holds = append(holds, h)
			}
		}
		for _, h := range holds {
			switch h.Enforcement {
			case "fenced":
			case "":
				out.Warnings = append(out.Warnings, fmt.Sprintf(advisoryWarning, h.Class, h.Key, "not from the policy set, so not known to be fenced; treat it as advisory"))
			default:
				out.Warnings = append(out.Warnings, fmt.Sprintf(advisoryWarning, h.Class, h.Key, h.Enforcement))
			}
		}
		if rec.RevokeSession {
			out.Warnings = append(out.Warnings, fmt.Sprintf("the holder's whole session %d ends: every hold listed, and the holder must open a new session", rec.Hold.Session))
		}
	}
	if rec.Advance != nil {
		out.Advance = &adminv1.AdvanceEpochRequest{Cluster: rec.Advance.Cluster, ExpectedEpoch: rec.Advance.Expected, Reason: rec.Advance.Reason}
		if rec.Advance.Above != nil {
			out.Advance.Above = proto.Uint32(*rec.Advance.Above)
		}
		out.Warnings = append(out.Warnings, fmt.Sprintf("advancing cluster %s's epoch deletes every hold and waiter on it", rec.Advance.Cluster))
	}
	if rec.ShardAdd != nil {
		out.ShardAdd = rec.ShardAdd.proto()
		out.Warnings = append(out.Warnings, fmt.Sprintf(shardAddWarning, rec.ShardAdd.Shard, rec.ShardAdd.Shard))
		if rec.State == stateApproved && rec.Result != nil {
			out.ShardAddResult = &adminv1.ShardAddResult{Version: rec.Result.MapVersion, Shards: rec.Result.Shards}
		}
	}
	return out
}

func (o Operator) proto() *adminv1.Operator {
	return &adminv1.Operator{Issuer: o.Issuer, Subject: o.Subject, Name: o.Name}
}

func (h holdFact) proto() *adminv1.HoldFacts {
	return &adminv1.HoldFacts{Key: h.Key, Cluster: h.Cluster, Identity: h.Identity, Instance: h.Instance, Session: h.Session, Class: h.Class,
		Enforcement: h.Enforcement, Fenced: h.Enforcement == "fenced", Revision: h.Revision, Since: timestamppb.New(h.Since)}
}
