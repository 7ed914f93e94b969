package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey/records"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

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
