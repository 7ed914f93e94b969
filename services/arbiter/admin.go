package arbiter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	adminv1 "github.com/lockplane/lockplane/services/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/epoch"
	"github.com/lockplane/lockplane/services/identity"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/shardmap"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

type adminServer struct {
	adminv1.UnimplementedAdminServiceServer
	a *Arbiter
	// router is set on a Router's coord arbiter: the shard map RPCs.
	router *Router
}

// Status implements adminv1.AdminServiceServer. It answers without a
// quorum too, from serializable reads, and says so.
func (s *adminServer) Status(ctx context.Context, req *adminv1.StatusRequest) (*adminv1.StatusResponse, error) {
	if _, err := identity.Caller(ctx); err != nil {
		return nil, refusal(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	a, err := s.cluster(req.GetCluster())
	if err != nil {
		return nil, err
	}
	out := &adminv1.StatusResponse{Arbiter: a.cfg.Self.String(), Cluster: a.cfg.Cluster}
	sctx, cancel := context.WithTimeout(ctx, a.cfg.OpTimeout)
	defer cancel()

	// Members and the leader, from each endpoint's own status.
	var leader uint64
	healthy := map[uint64]bool{}
	for _, ep := range a.etcd.Endpoints() {
		st, err := a.etcd.Status(sctx, ep)
		if err != nil {
			continue
		}
		healthy[st.Header.MemberId] = true
		if st.Leader != 0 {
			leader = st.Leader
		}
		out.ClusterId = epoch.FormatID(st.Header.ClusterId)
	}
	if ml, err := a.etcd.MemberList(sctx, clientv3.WithSerializable()); err == nil {
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
	resp, err := a.etcd.Get(sctx, lockkey.EpochKey, opts...)
	if err != nil {
		if out.ClusterId == "" {
			return nil, a.etcdFailure(ctx, err)
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
				a.epochs.set(st)
				a.observeHeader(resp.Header)
			}
		}
	} else {
		out.EpochMissing, out.Sealed = true, true
		if out.Quorum {
			a.epochs.setMissing(resp.Header.Revision)
			a.observeHeader(resp.Header)
		}
	}
	if out.Quorum {
		if rec, err := epoch.ReadRecorded(sctx, s.a.etcd); err == nil {
			out.HighestAllocated = rec.Highest
		}
	}
	return out, nil
}

// AdvanceEpoch implements adminv1.AdminServiceServer. The epoch comes from
// the coord cluster's allocation (epoch.Advance), so it exceeds every epoch
// any cluster of the region was given; here are who may call it, the
// empty coord cluster's floor and how the outcome is reported.
// (Two-person approval is enforced in front of this call by a later layer.)
func (s *adminServer) AdvanceEpoch(ctx context.Context, req *adminv1.AdvanceEpochRequest) (*adminv1.AdvanceEpochResponse, error) {
	caller, err := identity.Caller(ctx)
	if err != nil {
		return nil, refusal(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if !s.a.cfg.IsOperator(caller) {
		return nil, refusal(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, "only operators may advance the epoch")
	}
	if req.GetReason() == "" {
		return nil, invalidArgument("reason", "is required: why the epoch is being advanced")
	}
	a, err := s.cluster(req.GetCluster())
	if err != nil {
		return nil, err
	}
	// One deadline for the whole advance: its reads, the allocation on the
	// coord cluster and the Txn on the cluster advanced.
	octx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), 3*a.cfg.OpTimeout)
	defer cancel()
	coord := s.a
	rec, err := epoch.ReadRecorded(octx, coord.etcd)
	if err != nil {
		return nil, coord.etcdFailure(ctx, err)
	}
	switch {
	case req.Above != nil && rec.Initialised:
		return nil, invalidArgument("above", fmt.Sprintf("is only for a coord cluster with no epoch records; this one has allocated up to epoch %d, "+
			"and every new epoch exceeds that already", rec.Highest))
	case req.Above == nil && !rec.Initialised && a != coord:
		return nil, refusal(codes.FailedPrecondition, lockv1.ErrorReason_SEALED,
			"the coord cluster has no epoch records (new, or rebuilt empty): advance the coord cluster first, with --above", "cause", "no_epoch_record")
	case req.Above == nil && !rec.Initialised:
		return nil, invalidArgument("above", "is required: the coord cluster has no epoch records, so it is new or was rebuilt empty, "+
			"and only an operator knows the highest epoch the region served: take it from the audit archive, a snapshot manifest, "+
			"or the highest fencing token stored at a fenced resource shifted right by 48 bits (0 for a new region)")
	case req.Above != nil:
		// A coord cluster rebuilt empty beside live shards: start above
		// every shard's own record too.
		above := req.GetAbove()
		if s.router != nil {
			for _, sh := range s.router.shards {
				if st, found, err := epoch.Read(octx, sh.etcd); err == nil && found {
					above = max(above, st.Epoch)
				}
			}
		}
		if err := epoch.Initialise(octx, coord.etcd, above); err != nil {
			return nil, refusal(codes.FailedPrecondition, lockv1.ErrorReason_EPOCH_CHANGED, err.Error())
		}
		a.log.Info("epoch allocation initialised", "above", above, "by", caller.String())
	}
	ch := epoch.Change{Cluster: a.cfg.Cluster, Expected: req.GetExpectedEpoch(),
		Reason: fmt.Sprintf("%s (by %s at %s)", req.GetReason(), caller, time.Now().UTC().Format(time.RFC3339))}
	if a != coord {
		// A shard's record may come from a snapshot older than its last
		// advance; and one rebuilt empty must be stamped with the map
		// version it serves under.
		if ch.Floor, err = epoch.Highest(octx, coord.etcd, a.cfg.Cluster); err != nil {
			return nil, coord.etcdFailure(ctx, err)
		}
		m, _, found, err := shardmap.Load(octx, coord.etcd)
		if err != nil {
			return nil, coord.etcdFailure(ctx, err)
		}
		if found && slices.Contains(m.Shards, a.cfg.Cluster) {
			ch.MapVersion = m.Version
		}
	}
	adv, err := epoch.Advance(octx, coord.etcd, a.etcd, ch)
	switch {
	case errors.Is(err, epoch.ErrChanged):
		return nil, refusal(codes.FailedPrecondition, lockv1.ErrorReason_EPOCH_CHANGED, err.Error())
	case errors.Is(err, epoch.ErrUninitialised):
		return nil, refusal(codes.FailedPrecondition, lockv1.ErrorReason_SEALED, err.Error(), "cause", "no_epoch_record")
	case err != nil:
		return nil, a.etcdFailure(ctx, err)
	}
	a.epochs.set(adv.State)
	a.log.Info("epoch advanced", "cluster", a.cfg.Cluster, "from", adv.Previous, "epoch", adv.Epoch, "cluster_id", adv.ClusterID, "by", caller.String(),
		"deleted_holds", adv.DeletedHolds, "deleted_waiters", adv.DeletedWaiters)
	// Re-check the seal against the cluster now serving.
	a.reloadEpoch(ctx)
	return &adminv1.AdvanceEpochResponse{
		Epoch: adv.Epoch, PreviousEpoch: adv.Previous, ClusterId: adv.ClusterID, DeletedHolds: adv.DeletedHolds,
		DeletedWaiters: adv.DeletedWaiters, Revision: adv.Revision,
	}, nil
}

// ShardMap implements adminv1.AdminServiceServer.
func (s *adminServer) ShardMap(ctx context.Context, _ *adminv1.ShardMapRequest) (*adminv1.ShardMapResponse, error) {
	if _, err := identity.Caller(ctx); err != nil {
		return nil, refusal(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	ro := s.router
	if ro == nil || len(ro.shards) == 0 {
		return nil, refusal(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this arbiter serves no entity shards: the entity tier is the coord cluster")
	}
	if err := ro.loadMap(ctx); err != nil {
		return nil, err
	}
	m := ro.smap.Load()
	return &adminv1.ShardMapResponse{Version: m.Version, Shards: m.Shards, Adding: m.Adding, Configured: ro.shardNames()}, nil
}

// AddShard implements adminv1.AdminServiceServer.
func (s *adminServer) AddShard(req *adminv1.AddShardRequest, stream adminv1.AdminService_AddShardServer) error {
	ctx := stream.Context()
	caller, err := identity.Caller(ctx)
	if err != nil {
		return refusal(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if !s.a.cfg.IsOperator(caller) {
		return refusal(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, "only operators may change the shard map")
	}
	ro := s.router
	switch {
	case ro == nil || len(ro.shards) == 0:
		return refusal(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this arbiter serves no entity shards: configure them (--shard NAME=ENDPOINTS) first")
	case req.GetShard() == "":
		return invalidArgument("shard", "is required: the name of a shard this arbiter has a client for")
	case ro.shards[req.GetShard()] == nil:
		return invalidArgument("shard", fmt.Sprintf("%q is not one of this arbiter's shards (%v): give every arbiter its endpoints first", req.GetShard(), ro.shardNames()))
	}
	s.a.log.Info("adding shard", "shard", req.GetShard(), "by", caller.String())
	m, err := shardmap.Add(ctx, ro.clusters(), req.GetShard(), func(st shardmap.Step) {
		s.a.log.Info("add shard", "shard", req.GetShard(), "phase", st.Phase, "detail", st.Detail)
		stream.Send(&adminv1.AddShardResponse{Phase: st.Phase, Detail: st.Detail})
	})
	if err != nil {
		if ctx.Err() != nil {
			return refusal(codes.DeadlineExceeded, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
				"the add was interrupted; call AddShard again for the same shard to resume: "+err.Error())
		}
		return refusal(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, err.Error())
	}
	ro.setMap(m)
	return nil
}

// cluster is the arbiter of the named cluster: "" or the coord cluster's
// own name for it, else an entity shard of this arbiter's Router.
func (s *adminServer) cluster(name string) (*Arbiter, error) {
	if name == "" || name == s.a.cfg.Cluster {
		return s.a, nil
	}
	if s.router != nil {
		if a := s.router.shards[name]; a != nil {
			return a, nil
		}
	}
	var known []string
	if s.router != nil {
		known = s.router.shardNames()
	}
	return nil, invalidArgument("cluster", fmt.Sprintf("%q is not %s or one of this arbiter's entity shards %v", name, s.a.cfg.Cluster, known))
}
