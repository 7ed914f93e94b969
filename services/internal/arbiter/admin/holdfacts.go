package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/lockplane/lockplane/services/lockkey/records"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
)

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
