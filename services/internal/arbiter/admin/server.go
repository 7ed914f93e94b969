// Package admin serves lockplane.admin.v1 for an arbiter: status, the
// epoch advance (direct, and two-person with force-release: actions.go),
// the shard map and shard add (shardadd.go; two-person like the advance),
// the operators' text rule (operatortext.go), the audit queries, and operators' sign-in
// (operator.go, oidc.go). It reaches the lock core
// (services/internal/arbiter), which wires it, only through the Cluster
// and ShardTable interfaces declared here, and is told the settings it
// needs (Config).
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/etcdcall"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

// Server serves lockplane.admin.v1 for the coord cluster's arbiter
// and, behind a Router, the entity shards' arbiters and shard map.
type Server struct {
	adminv1.UnimplementedAdminServiceServer
	cfg   Config
	coord Cluster
	// shards are a Router's entity shards' arbiters by name; none for a
	// lone Arbiter.
	shards map[string]Cluster
	// table is the shard map a Router routes by: the shard map RPCs. nil
	// for a lone Arbiter.
	table ShardTable
	hooks func() *Hooks
}

// Config is what the Admin API is told of the arbiter's settings; each is
// documented on the arbiter's Config, which it is taken from.
type Config struct {
	// Self is the arbiter's own SPIFFE ID, reported by Status.
	Self spiffeid.ID
	// Classes resolves lock classes; a registry that knows the register's
	// facts (ClassFacts) reports them.
	Classes class.Registry
	// IsOperator decides who may call the RPCs that change state, and
	// read audit history. Required.
	IsOperator func(spiffeid.ID) bool
	// Operators verifies operators' ID tokens; the two-person actions are
	// refused, saying so, when it is nil.
	Operators OperatorVerifier
	// OnePersonEpochAdvance lets a single SPIFFE operator make the calls
	// that advance an epoch and delete holds, AdvanceEpoch and AddShard,
	// while Operators is nil.
	OnePersonEpochAdvance bool
	// EpochQuiet is epoch.Change.Quiet for an advance of a live cluster: the registry's longest TTL plus a second (arbiter.EpochQuiet).
	EpochQuiet time.Duration
	// Placement is the arbiter's class.Placement: an epoch advance stamps
	// it into the new record, so advancing is how keys are rehomed.
	Placement string
	// ActionTTL is how long a two-person action's request lives.
	ActionTTL time.Duration
	// Audit answers the audit queries; none when nil.
	Audit audit.Reader
	// Bound bounds every etcd call (the arbiter's OpTimeout) and maps its
	// failures, as the lock core's; its Logger is the Admin API's log.
	Bound etcdcall.Bound
}

// Cluster is one cluster's arbiter as the Admin API reaches it: the coord
// cluster's, or an entity shard's behind a Router. The lock core
// (services/internal/arbiter) satisfies it; this is all the Admin API
// knows of it.
type Cluster interface {
	// Name is the cluster's name, as the shard map and metrics name it.
	Name() string
	// Etcd is the cluster signed in as the Admin API's etcd user
	// (etcdauth.Admin): force-release, epoch advance and shard add write
	// through it.
	Etcd() etcdcall.Etcd
	// CacheEpoch gives the lock core's epoch cache a record read with a
	// quorum at revision rev of etcd cluster clusterID, or, st nil, that
	// there was none.
	CacheEpoch(st *epoch.State, clusterID uint64, rev int64)
	// ObserveHeader tells the lock core's seal state the cluster ID of a
	// response read with a quorum.
	ObserveHeader(h *etcdserverpb.ResponseHeader)
	// ReloadEpoch reads the epoch record again: the seal is re-checked
	// against the cluster now serving.
	ReloadEpoch(ctx context.Context) error
	// RevokeSession revokes a session's lease, and every hold on it, as
	// the Admin API's etcd user; a lease already gone is no error.
	RevokeSession(ctx context.Context, session int64) error
	// DiscardLease revokes, in the background, a lease the Admin API
	// granted and will not use.
	DiscardLease(lease clientv3.LeaseID)
}

// ShardTable is what the admin service needs of the shard map a Router
// routes by.
type ShardTable interface {
	Load(ctx context.Context) error
	Current() *shardmap.Map
	Set(m shardmap.Map)
	Clusters() shardmap.Clusters
}

// Deps are what the Admin API is built of: its settings, the coord
// cluster's arbiter and, behind a Router, the entity shards' and the
// shard map (none for a lone Arbiter), and the tests' hooks.
type Deps struct {
	Config
	Coord  Cluster
	Shards map[string]Cluster
	Table  ShardTable
	// Hooks returns the tests' hooks (Hooks); nil, or returning nil, in
	// production.
	Hooks func() *Hooks
}

// New serves the admin API for d.Coord and, behind a Router, its entity
// shards and shard map.
func New(d Deps) *Server {
	return &Server{cfg: d.Config, coord: d.Coord, shards: d.Shards, table: d.Table, hooks: d.Hooks}
}

// log is the Admin API's log.
func (s *Server) log() *slog.Logger { return s.cfg.Bound.Logger }

// Status implements adminv1.AdminServiceServer. It answers without a
// quorum too, from serializable reads, and says so.
func (s *Server) Status(ctx context.Context, req *adminv1.StatusRequest) (*adminv1.StatusResponse, error) {
	if _, err := caller.Of(ctx); err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	a, err := s.cluster(req.GetCluster())
	if err != nil {
		return nil, err
	}
	out := &adminv1.StatusResponse{Arbiter: s.cfg.Self.String(), Cluster: a.Name()}
	sctx, cancel := context.WithTimeout(ctx, s.cfg.Bound.Timeout)
	defer cancel()

	// Members and the leader, from each endpoint's own status, asked at
	// once and within half the bound: a member that is down must not use
	// up the time the reads below need.
	var leader uint64
	healthy := map[uint64]bool{}
	eps := a.Etcd().Endpoints()
	statuses := make([]*clientv3.StatusResponse, len(eps))
	ectx, ecancel := context.WithTimeout(sctx, s.cfg.Bound.Timeout/2)
	var wg sync.WaitGroup
	for i, ep := range eps {
		wg.Go(func() { statuses[i], _ = a.Etcd().Status(ectx, ep) })
	}
	wg.Wait()
	ecancel()
	for _, st := range statuses {
		if st == nil {
			continue
		}
		healthy[st.Header.MemberId] = true
		if st.Leader != 0 {
			leader = st.Leader
		}
		out.ClusterId = epoch.FormatID(st.Header.ClusterId)
	}
	if ml, err := a.Etcd().MemberList(sctx, clientv3.WithSerializable()); err == nil {
		out.ClusterId = epoch.FormatID(ml.Header.ClusterId)
		for _, m := range ml.Members {
			out.Members = append(out.Members, &adminv1.Member{
				Id: epoch.FormatID(m.ID), Name: m.Name, ClientUrls: m.ClientURLs, PeerUrls: m.PeerURLs,
				Healthy: healthy[m.ID], IsLeader: m.ID == leader, IsLearner: m.IsLearner,
			})
		}
		sort.Slice(out.Members, func(i, j int) bool { return out.Members[i].Name < out.Members[j].Name })
	}
	if leader != 0 {
		out.Leader = epoch.FormatID(leader)
		out.Quorum = true
	}

	// The epoch record: linearizable when there is a quorum, else the
	// local copy of whichever member answers.
	var opts []clientv3.OpOption
	if !out.Quorum {
		opts = append(opts, clientv3.WithSerializable())
	}
	resp, err := a.Etcd().Get(sctx, lockkey.EpochKey, opts...)
	if err != nil {
		if out.ClusterId == "" {
			return nil, s.cfg.Bound.Failure(ctx, err)
		}
		return out, nil
	}
	out.Revision = resp.Header.Revision
	out.ClusterId = epoch.FormatID(resp.Header.ClusterId)
	if len(resp.Kvs) > 0 {
		if st, err := epoch.Decode(resp.Kvs[0].Value, resp.Kvs[0].ModRevision); err == nil {
			out.Epoch, out.EpochClusterId, out.MapVersion = st.Epoch, st.ClusterID, st.MapVersion
			out.Sealed = st.Sealed(resp.Header.ClusterId)
			if out.Quorum {
				a.CacheEpoch(&st, resp.Header.ClusterId, resp.Header.Revision)
				a.ObserveHeader(resp.Header)
			}
		}
	} else {
		out.EpochMissing, out.Sealed = true, true
		if out.Quorum {
			a.CacheEpoch(nil, resp.Header.ClusterId, resp.Header.Revision)
			a.ObserveHeader(resp.Header)
		}
	}
	if out.Quorum {
		if rec, err := epoch.ReadRecorded(sctx, s.coord.Etcd()); err == nil {
			out.HighestAllocated = rec.Highest
		}
	}
	return out, nil
}

// AdvanceEpoch implements adminv1.AdminServiceServer: the direct,
// one-person advance. Once the arbiter verifies operators' sign-in
// (Config.Operators) it is refused, naming the two-person flow
// (RequestEpochAdvance, ApproveAction), which runs the same advance
// (advanceEpoch). Without sign-in it serves a SPIFFE operator only where
// Config.OnePersonEpochAdvance opts in (trials, the embedded default).
func (s *Server) AdvanceEpoch(ctx context.Context, req *adminv1.AdvanceEpochRequest) (*adminv1.AdvanceEpochResponse, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if !s.cfg.IsOperator(caller) {
		return nil, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, "only operators may advance the epoch")
	}
	if s.cfg.Operators != nil {
		return nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PERMISSION_DENIED,
			"an epoch advance needs two signed-in operators: lockctl epoch advance requests it and prints an ID, "+
				"and a different operator runs lockctl epoch approve ID (RequestEpochAdvance, ApproveAction)", "cause", "two_person_required")
	}
	if !s.cfg.OnePersonEpochAdvance {
		return nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_PERMISSION_DENIED,
			"an epoch advance needs two signed-in operators, and this arbiter has no operator sign-in configured "+
				"(no OpenID Connect verifier): configure it (--oidc-issuer), or, for a trial, start the arbiter with "+
				"--allow-one-person-epoch-advance", "cause", "no_operator_verifier")
	}
	// The same rule as the two-person path's: the reason goes into the
	// epoch record, the log and the archive.
	if err := requireReason(req.GetReason()); err != nil {
		return nil, err
	}
	s.log().Warn("single-person epoch advance: no operator sign-in is configured", "by", caller.String())
	return s.advanceEpoch(ctx, caller.String(), req)
}

// advanceEpoch advances req's cluster's epoch. The epoch comes from the
// coord cluster's allocation (epoch.Advance), so it exceeds every epoch
// any cluster of the region was given; here are the empty coord cluster's
// floor and how the outcome is reported. by names who decided it, for the
// epoch record and the log.
func (s *Server) advanceEpoch(ctx context.Context, by string, req *adminv1.AdvanceEpochRequest) (*adminv1.AdvanceEpochResponse, error) {
	a, err := s.cluster(req.GetCluster())
	if err != nil {
		return nil, err
	}
	// One deadline for the whole advance: its reads, the anchor and the
	// allocation on the coord cluster, the Txn on the cluster advanced.
	octx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), time.Duration(6+len(s.shards))*s.cfg.Bound.Timeout)
	defer cancel()
	coord := s.coord
	rec, err := epoch.ReadRecorded(octx, coord.Etcd())
	if err != nil {
		return nil, s.advanceFailure(ctx, err)
	}
	if err := s.anchor(octx, by, a, rec, req); err != nil {
		return nil, s.advanceFailure(ctx, err)
	}
	ch := epoch.Change{Cluster: a.Name(), Expected: req.GetExpectedEpoch(), Quiet: s.cfg.EpochQuiet, Placement: s.cfg.Placement,
		Reason: fmt.Sprintf("%s (by %s at %s)", req.GetReason(), by, time.Now().UTC().Format(time.RFC3339))}
	if a != coord {
		// A shard rebuilt empty must be stamped with the map version it
		// serves under, or every grant routed to it is refused MOVING.
		m, _, found, err := shardmap.Load(octx, coord.Etcd())
		if err != nil {
			return nil, s.advanceFailure(ctx, err)
		}
		if found && slices.Contains(m.Shards, a.Name()) {
			ch.MapVersion = m.Version
		}
	}
	adv, err := epoch.Advance(octx, coord.Etcd(), a.Etcd(), ch)
	if err != nil {
		return nil, s.advanceFailure(ctx, err)
	}
	if id, err := strconv.ParseUint(adv.ClusterID, 16, 64); err == nil {
		a.CacheEpoch(&adv.State, id, adv.Revision)
	}
	s.log().Info("epoch advanced", "cluster", a.Name(), "from", adv.Previous, "epoch", adv.Epoch, "cluster_id", adv.ClusterID, "by", by,
		"deleted_holds", adv.DeletedHolds, "deleted_waiters", adv.DeletedWaiters)
	// Re-check the seal against the cluster now serving.
	a.ReloadEpoch(ctx)
	return &adminv1.AdvanceEpochResponse{
		Epoch: adv.Epoch, PreviousEpoch: adv.Previous, ClusterId: adv.ClusterID, DeletedHolds: adv.DeletedHolds,
		DeletedWaiters: adv.DeletedWaiters, Revision: adv.Revision,
	}, nil
}

// anchor checks the advance against the coord cluster's allocation
// records: a coord cluster that is new, rebuilt empty or restored (its
// records not its own) takes the operator's floor, raised to every live
// shard's epoch, before anything is allocated; above is refused otherwise.
// The target's expected epoch is checked first, so a refused advance
// anchors nothing.
func (s *Server) anchor(ctx context.Context, by string, target Cluster, rec epoch.Recorded, req *adminv1.AdvanceEpochRequest) error {
	coord := s.coord
	switch {
	case req.Above != nil && rec.Anchored:
		return refuse.InvalidArgument("above", fmt.Sprintf("is only for a coord cluster that is new, rebuilt empty or restored; this one's allocation records are its own "+
			"(highest epoch %d) and every new epoch exceeds them already: advance without --above", rec.Highest))
	case rec.Anchored:
		return nil
	case target != coord:
		cmd := "lockctl epoch advance --expected 0 --above N --reason ..."
		if rec.Initialised {
			cmd = "lockctl epoch advance --expected E --above N --reason ..., E the epoch lockctl status shows"
		}
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SEALED,
			fmt.Sprintf("the coord cluster's epoch allocation is not anchored (it is new, rebuilt empty or restored): advance the coord cluster first (%s), then %s", cmd, target.Name()),
			"cause", "coord_not_anchored")
	case req.Above == nil:
		state := "has no epoch records, so it is new or was rebuilt empty"
		if rec.Initialised {
			state = "holds allocation records written by another etcd cluster, so it was restored from a snapshot and may have allocated epochs since"
		}
		return refuse.InvalidArgument("above", "is required: the coord cluster "+state+", and only an operator knows the highest epoch the region served: "+
			"take the highest of the audit archive, the newest snapshot manifest, and the highest fencing token stored at a fenced resource "+
			"shifted right by 48 bits (0 only for a new region); see docs/epochs.md")
	}
	// The target's expected epoch first: a refused advance anchors nothing.
	if st, found, err := epoch.Read(ctx, target.Etcd()); err != nil {
		return err
	} else if !found && req.GetExpectedEpoch() != 0 || found && st.Epoch != req.GetExpectedEpoch() {
		return fmt.Errorf("%w: cluster %s: expected epoch %d, found %d (0: no record)", epoch.ErrChanged, target.Name(), req.GetExpectedEpoch(), st.Epoch)
	}
	above := req.GetAbove()
	for _, name := range s.shardNames() {
		st, found, err := epoch.Read(ctx, s.shards[name].Etcd())
		if err != nil {
			return refuse.With(codes.Unavailable, lockv1.ErrorReason_NO_QUORUM,
				fmt.Sprintf("shard %s's epoch could not be read (%v): the coord cluster is anchored above every live shard's epoch, so every shard must answer", name, err),
				"shard", name)
		}
		if found {
			above = max(above, st.Epoch)
		}
	}
	if _, err := epoch.Anchor(ctx, coord.Etcd(), above); err != nil {
		return err
	}
	s.log().Info("epoch allocation anchored", "above", above, "operator_floor", req.GetAbove(), "by", by)
	return nil
}

// shardNames names the Router's entity shards, sorted; none for a lone
// Arbiter.
func (s *Server) shardNames() []string {
	return slices.Sorted(maps.Keys(s.shards))
}

// advanceFailure maps an advance's error: a precondition (the epoch moved,
// the coord cluster not anchored, an unreadable record) is said as such;
// only a failure to reach etcd is NO_QUORUM.
func (s *Server) advanceFailure(ctx context.Context, err error) error {
	switch {
	case reason.Of(err) != lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED:
		return err
	case errors.Is(err, epoch.ErrChanged):
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_EPOCH_CHANGED, err.Error())
	case errors.Is(err, epoch.ErrUninitialised), errors.Is(err, epoch.ErrCoordRestored):
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_SEALED, err.Error(), "cause", "coord_not_anchored")
	case errors.Is(err, epoch.ErrInvalid):
		return refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_EPOCH_CHANGED, err.Error())
	}
	return s.cfg.Bound.Failure(ctx, err)
}

// ShardMap implements adminv1.AdminServiceServer.
func (s *Server) ShardMap(ctx context.Context, _ *adminv1.ShardMapRequest) (*adminv1.ShardMapResponse, error) {
	if _, err := caller.Of(ctx); err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if s.table == nil || len(s.shards) == 0 {
		return nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this arbiter serves no entity shards: the entity tier is the coord cluster")
	}
	if err := s.table.Load(ctx); err != nil {
		return nil, err
	}
	m := s.table.Current()
	return &adminv1.ShardMapResponse{Version: m.Version, Shards: m.Shards, Adding: m.Adding, Configured: s.shardNames()}, nil
}

// cluster is the arbiter of the named cluster: "" or the coord cluster's
// own name for it, else an entity shard of this arbiter's Router.
func (s *Server) cluster(name string) (Cluster, error) {
	if name == "" || name == s.coord.Name() {
		return s.coord, nil
	}
	if a := s.shards[name]; a != nil {
		return a, nil
	}
	return nil, refuse.InvalidArgument("cluster", fmt.Sprintf("%q is not %s or one of this arbiter's entity shards %v", name, s.coord.Name(), s.shardNames()))
}
