package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"github.com/lockplane/lockplane/services/shardmap"
	"google.golang.org/grpc/codes"
)

// Adding a shard (shardmap.Add) advances the new shard's epoch and
// deletes the durable waiters of the ranges that move to it, so it is
// decided as an epoch advance is (ADR-03, ADR-20): two signed-in
// operators (RequestShardAdd, ApproveAction) once the arbiter verifies
// sign-in; one SPIFFE operator (AddShard) only on an arbiter without
// sign-in that opts in to the one-person calls (OnePersonEpochAdvance).

// shardAddArgs are a shard add's arguments (AddShardRequest).
type shardAddArgs struct {
	Shard  string `json:"shard"`
	Reason string `json:"reason"`
}

// shardAddWarning is said of every shard add request.
const shardAddWarning = "adding shard %s moves about 1/N of the entity ranges to it: they take no new grants until their holders release or expire, " +
	"their durable waiters are deleted (the waiting clients must ask again), and %s's epoch is advanced above every source's"

// AddShard implements adminv1.AdminServiceServer: the direct, one-person
// add, streaming each step. Once the arbiter verifies operators' sign-in
// it is refused, naming the two-person flow (RequestShardAdd,
// ApproveAction), which runs the same shardmap.Add. Without sign-in it
// serves a SPIFFE operator only where Config.OnePersonEpochAdvance opts
// in, as AdvanceEpoch does.
func (s *Server) AddShard(req *adminv1.AddShardRequest, stream adminv1.AdminService_AddShardServer) error {
	ctx := stream.Context()
	caller, err := caller.Of(ctx)
	if err != nil {
		return refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if !s.cfg.IsOperator(caller) {
		return refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, "only operators may change the shard map")
	}
	if s.cfg.Operators != nil {
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PERMISSION_DENIED,
			"a shard add advances the new shard's epoch and deletes moving ranges' waiters, so it needs two signed-in operators: "+
				"lockctl shards add NAME --reason ... requests it and prints an ID, and a different operator runs lockctl shards approve ID "+
				"(RequestShardAdd, ApproveAction)", "cause", "two_person_required")
	}
	if !s.cfg.OnePersonEpochAdvance {
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PERMISSION_DENIED,
			"a shard add needs two signed-in operators, and this arbiter has no operator sign-in configured "+
				"(no OpenID Connect verifier): configure it (--oidc-issuer), or, for a trial, start the arbiter with "+
				"--allow-one-person-epoch-advance", "cause", "no_operator_verifier")
	}
	if err := s.shardAddable(req.GetShard()); err != nil {
		return err
	}
	if err := requireReason(req.GetReason()); err != nil {
		return err
	}
	s.log().Warn("single-person shard add: no operator sign-in is configured", "shard", req.GetShard(), "by", caller.String(), "reason", req.GetReason())
	why := fmt.Sprintf("%s (by %s at %s)", req.GetReason(), caller.String(), time.Now().UTC().Format(time.RFC3339))
	m, err := shardmap.Add(ctx, s.table.Clusters(), req.GetShard(), why, func(st shardmap.Step) {
		s.log().Info("add shard", "shard", req.GetShard(), "phase", st.Phase, "detail", st.Detail)
		stream.Send(&adminv1.AddShardResponse{Phase: st.Phase, Detail: st.Detail})
	})
	if err != nil {
		return s.shardAddFailure(ctx, err, "call AddShard again for the same shard to resume")
	}
	s.table.Set(m)
	return nil
}

// shardAddable checks that shard names one of this arbiter's entity
// shards: the add needs a client of it.
func (s *Server) shardAddable(shard string) error {
	switch {
	case s.table == nil || len(s.shards) == 0:
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this arbiter serves no entity shards: configure them (--shard NAME=ENDPOINTS) first")
	case shard == "":
		return refuse.InvalidArgument("shard", "is required: the name of a shard this arbiter has a client for")
	case s.shards[shard] == nil:
		return refuse.InvalidArgument("shard", fmt.Sprintf("%q is not one of this arbiter's shards (%v): give every arbiter its endpoints first", shard, s.shardNames()))
	}
	return nil
}

// shardAddFailure maps shardmap.Add's error: an add that ran out of time
// (waiting for holders) says how to resume; anything else is said as a
// precondition, the add stopped where it was.
func (s *Server) shardAddFailure(ctx context.Context, err error, resume string) error {
	if ctx.Err() != nil {
		return refuse.With(codes.DeadlineExceeded, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"the add was interrupted; "+resume+": "+err.Error())
	}
	return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
}

// RequestShardAdd implements adminv1.AdminServiceServer. A shard already
// in the map is refused: there is nothing to add.
func (s *Server) RequestShardAdd(ctx context.Context, req *adminv1.RequestShardAddRequest) (*adminv1.RequestShardAddResponse, error) {
	op, err := s.signedInOperator(ctx)
	if err != nil {
		return nil, err
	}
	add := req.GetAdd()
	if err := requireReason(add.GetReason()); err != nil {
		return nil, err
	}
	if err := s.shardAddable(add.GetShard()); err != nil {
		return nil, err
	}
	m, found, err := s.storedMap(ctx)
	switch {
	case err != nil:
		return nil, err
	case !found:
		return nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "no shard map is stored: initialise it first")
	case slices.Contains(m.Shards, add.GetShard()):
		return nil, refuse.InvalidArgument("shard", fmt.Sprintf("%s is already in map version %d: nothing to add", add.GetShard(), m.Version))
	}
	rec := actionRecord{Kind: kindShardAdd, Requester: op, Reason: add.GetReason(), ShardAdd: &shardAddArgs{Shard: add.GetShard(), Reason: add.GetReason()}}
	if err := s.store(ctx, &rec); err != nil {
		return nil, err
	}
	s.log().Info("shard add requested", "action", rec.ID, "shard", add.GetShard(), "by", op.String(), "reason", rec.Reason)
	return &adminv1.RequestShardAddResponse{Action: rec.proto()}, nil
}

// storedMap reads the shard map from the coord cluster.
func (s *Server) storedMap(ctx context.Context) (shardmap.Map, bool, error) {
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	m, _, found, err := shardmap.Load(octx, s.coord.Etcd())
	if err != nil {
		return shardmap.Map{}, false, s.cfg.Bound.Failure(ctx, err)
	}
	return m, found, nil
}

// shardAddWait bounds the shardmap.Add of an approved shard add, which
// waits for the moving ranges' holders: the longest session TTL
// (class.MaxTTL), within which a holder that stopped renewing is gone,
// and a margin for the add's own steps. The approval's deadline keeps
// workTimeout more for reading back and recording the outcome. Tests
// shorten it with Hooks.ShardAddWait.
func (s *Server) shardAddWait() time.Duration {
	if d := s.hooked().ShardAddWait; d != nil {
		return *d
	}
	return class.MaxTTL + s.workTimeout()
}

// shardAddMarkKey is where request id's shard add puts its final map, in
// the Txn that stores it (shardmap.Mark): under the request's own key,
// which the Admin API's etcd role may write and the audit tailer skips.
func shardAddMarkKey(id string) string { return records.ActionKey(id) + "/map" }

// approveShardAdd runs an approved shard add under ctx (the approval's
// own deadline, workCtx): shardmap.Add for at most shardAddWait, the rest
// kept for reading back. Whatever Add's error, the outcome is read back
// (shardAddDone): done only when this request's run stored the final map
// and every shard serves it. An add stopped part way (holders still there
// at the deadline, a shard not yet stamped) leaves the request pending
// again: approving it again resumes the add, as shardmap.Add does for the
// same shard. An add that can no longer be this request's (another shard
// being added, or this one added by another request) is ACTION_STALE.
func (s *Server) approveShardAdd(ctx context.Context, rec actionRecord, approver Operator) (*adminv1.ShardAddResult, error) {
	name := rec.ShardAdd.Shard
	if err := s.shardAddable(name); err != nil {
		return nil, err
	}
	mark, err := s.shardAddMark(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ShardAddResult{}
	var m shardmap.Map
	actx, cancel := context.WithTimeout(ctx, s.shardAddWait())
	defer cancel()
	run, herr := s.actionTxnHook(rec.ID)
	if run {
		s.log().Info("adding shard", "action", rec.ID, "shard", name, "requester", rec.Requester.String(), "approver", approver.String())
		why := fmt.Sprintf("%s (requested by %s, approved by %s, request %s)", rec.ShardAdd.Reason, rec.Requester.String(), approver.String(), rec.ID)
		m, err = shardmap.Add(actx, s.table.Clusters(), name, why, func(st shardmap.Step) {
			s.log().Info("add shard", "action", rec.ID, "shard", name, "phase", st.Phase, "detail", st.Detail)
			out.Steps = append(out.Steps, &adminv1.AddShardResponse{Phase: st.Phase, Detail: st.Detail})
		}, mark)
	}
	if herr != nil {
		err = herr
	}
	if errors.Is(err, shardmap.ErrOtherAdd) {
		return nil, stale("shard_add_in_progress", fmt.Sprintf("request %s cannot add shard %s now: %v; nothing was changed; request again once that add is finished (lockctl shards)",
			rec.ID, name, err), "shard", name)
	}
	res, marked, done, rerr := s.shardAddRead(ctx, rec)
	switch {
	case rerr != nil && err == nil:
		return nil, unsettled{rerr}
	case rerr != nil:
		return nil, unsettled{s.shardAddFailure(actx, err, "approve request "+rec.ID+" again to resume")}
	case done:
		if err != nil {
			s.log().Warn("shard add read back as made", "action", rec.ID, "err", err)
		}
		if err == nil {
			s.table.Set(m)
		} else if s.table.Load(ctx) != nil {
			s.log().Warn("shard map not reloaded after a shard add read back; its watch brings it", "action", rec.ID)
		}
		out.Version, out.Shards = res.MapVersion, res.Shards
		return out, nil
	}
	if cur, found, merr := s.storedMap(ctx); !marked && merr == nil && found && slices.Contains(cur.Shards, name) {
		// In the map, and not by this request (no mark of it): another
		// request's add, which no approval of this one can undo or redo.
		return nil, stale("shard_in_map", fmt.Sprintf("shard %s is in map version %d, added by another request or add, not by request %s: nothing for it to do",
			name, cur.Version, rec.ID), "shard", name)
	}
	if err == nil {
		err = fmt.Errorf("shard %s's add finished but does not read back as request %s's; approve it again", name, rec.ID)
	}
	return nil, s.shardAddFailure(actx, err, "approve request "+rec.ID+" again to resume")
}

// shardAddMark is the mark the add of request id puts with its final
// map, on a lease of ActionTTL of its own: it outlives the request, which
// was made before the approval, so reading back never misses it.
func (s *Server) shardAddMark(ctx context.Context, id string) (shardmap.Mark, error) {
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	defer cancel()
	lease, err := s.coord.Etcd().Grant(octx, int64(s.cfg.ActionTTL/time.Second))
	if err != nil {
		return shardmap.Mark{}, s.cfg.Bound.Failure(ctx, err)
	}
	return shardmap.Mark{Key: shardAddMarkKey(id), Lease: lease.ID}, nil
}

// shardAddDone reads back whether shard add rec was made: its run stored
// the final map (the mark, put in the same Txn, says so and which) and
// every shard of that map serves it (stamped with its version or a later
// one). The shard in the map is not enough: another request, or a
// one-person add, may have put it there. A map stored but not yet stamped
// everywhere is not done: approving again finishes the stamping.
func (s *Server) shardAddDone(ctx context.Context, rec actionRecord) (*actionResult, bool, error) {
	res, _, done, err := s.shardAddRead(ctx, rec)
	return res, done, err
}

// shardAddRead is shardAddDone's read: marked when request rec's run
// stored the final map, done when besides every shard serves it.
func (s *Server) shardAddRead(ctx context.Context, rec actionRecord) (res *actionResult, marked, done bool, err error) {
	octx, cancel := s.cfg.Bound.Ctx(ctx)
	resp, err := s.coord.Etcd().Get(octx, shardAddMarkKey(rec.ID))
	cancel()
	if err != nil {
		return nil, false, false, s.cfg.Bound.Failure(ctx, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, false, false, nil
	}
	m, err := shardmap.Decode(resp.Kvs[0].Value)
	if err != nil || !slices.Contains(m.Shards, rec.ShardAdd.Shard) {
		return nil, false, false, fmt.Errorf("request %s's map record %s is unreadable or lacks shard %s", rec.ID, resp.Kvs[0].Key, rec.ShardAdd.Shard)
	}
	for _, name := range m.Shards {
		a := s.shards[name]
		if a == nil {
			return nil, true, false, fmt.Errorf("map version %d names shard %s, which this arbiter has no client for", m.Version, name)
		}
		octx, cancel := s.cfg.Bound.Ctx(ctx)
		st, found, err := epoch.Read(octx, a.Etcd())
		cancel()
		if err != nil {
			return nil, true, false, s.cfg.Bound.Failure(ctx, err)
		}
		if !found || st.MapVersion < m.Version {
			return nil, true, false, nil
		}
	}
	return &actionResult{MapVersion: m.Version, Shards: m.Shards}, true, true, nil
}

func (a *shardAddArgs) proto() *adminv1.AddShardRequest {
	return &adminv1.AddShardRequest{Shard: a.Shard, Reason: a.Reason}
}
