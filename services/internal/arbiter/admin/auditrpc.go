package admin

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/internal/arbiter/caller"
	"github.com/lockplane/lockplane/services/internal/arbiter/refuse"
	"github.com/lockplane/lockplane/services/lockkey"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// maxAuditLimit bounds one audit answer, whatever the caller asks;
// auditTimeout bounds the store's answer.
const (
	// One below the store's cap: a query asks for one more than the
	// limit to learn whether the answer was cut short.
	maxAuditLimit = chstore.MaxLimit - 1
	auditTimeout  = 10 * time.Second
)

// Audit implements adminv1.AdminServiceServer.
func (s *Server) Audit(ctx context.Context, req *adminv1.AuditRequest) (*adminv1.AuditResponse, error) {
	r, err := s.auditReader(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	since, limit, err := auditWindow(req.GetSince(), 24*time.Hour, req.GetLimit(), 1000)
	if err != nil {
		return nil, err
	}
	var evs []audit.Event
	switch {
	case req.GetKey() != "" && req.GetIdentity() == "" && req.GetNamespace() == "" && req.GetClass() == "":
		if err := lockkey.Validate(req.GetKey()); err != nil {
			return nil, refuse.InvalidArgument("key", err.Error())
		}
		evs, err = r.ByKey(ctx, req.GetKey(), since, limit+1)
	case req.GetIdentity() != "" && req.GetKey() == "" && req.GetNamespace() == "" && req.GetClass() == "":
		if _, perr := spiffeid.FromString(req.GetIdentity()); perr != nil {
			return nil, refuse.InvalidArgument("identity", "must be a SPIFFE ID: "+perr.Error())
		}
		evs, err = r.ByIdentity(ctx, req.GetIdentity(), since, limit+1)
	case req.GetNamespace() != "" && req.GetKey() == "" && req.GetIdentity() == "":
		if err := lockkey.Validate(req.GetNamespace() + "/x"); err != nil {
			return nil, refuse.InvalidArgument("namespace", err.Error())
		}
		evs, err = r.ByNamespaceClass(ctx, req.GetNamespace(), req.GetClass(), since, limit+1)
	default:
		return nil, refuse.InvalidArgument("key", "name exactly one of key, identity or namespace (class goes with namespace)")
	}
	if err != nil {
		return nil, s.auditFailure(err)
	}
	out := &adminv1.AuditResponse{}
	out.Events, out.Truncated = auditEvents(evs, limit)
	return out, nil
}

// AuditExpiries implements adminv1.AdminServiceServer.
func (s *Server) AuditExpiries(ctx context.Context, req *adminv1.AuditExpiriesRequest) (*adminv1.AuditExpiriesResponse, error) {
	r, err := s.auditReader(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	since, limit, err := auditWindow(req.GetSince(), time.Hour, req.GetLimit(), 100)
	if err != nil {
		return nil, err
	}
	counts, err := r.Expiries(ctx, since)
	if err != nil {
		return nil, s.auditFailure(err)
	}
	evs, err := r.ExpiriesList(ctx, since, limit+1)
	if err != nil {
		return nil, s.auditFailure(err)
	}
	out := &adminv1.AuditExpiriesResponse{}
	for _, c := range counts {
		out.Counts = append(out.Counts, &adminv1.ExpiryCount{Namespace: c.Namespace, Class: c.Class, Count: c.Count})
	}
	out.Events, out.Truncated = auditEvents(evs, limit)
	return out, nil
}

// auditReader admits an operator to the audit store. History names every
// identity's keys, so only operators read it.
func (s *Server) auditReader(ctx context.Context) (audit.Reader, error) {
	caller, err := caller.Of(ctx)
	if err != nil {
		return nil, refuse.With(codes.Unauthenticated, lockv1.ErrorReason_PERMISSION_DENIED, err.Error())
	}
	if !s.cfg.IsOperator(caller) {
		return nil, refuse.With(codes.PermissionDenied, lockv1.ErrorReason_PERMISSION_DENIED, "only operators may read audit history")
	}
	if s.cfg.Audit == nil {
		return nil, refuse.With(codes.FailedPrecondition, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED,
			"this arbiter has no audit store (--audit-store): audit history is not available here")
	}
	return s.cfg.Audit, nil
}

func (s *Server) auditFailure(err error) error {
	s.log().Warn("audit store query failed", "err", err)
	return refuse.With(codes.Unavailable, lockv1.ErrorReason_ERROR_REASON_UNSPECIFIED, "the audit store did not answer: "+err.Error())
}

// auditWindow reads a request's since and limit, with defaults.
func auditWindow(since *timestamppb.Timestamp, back time.Duration, limit, def int32) (time.Time, int, error) {
	from := time.Now().Add(-back)
	if since != nil {
		if err := since.CheckValid(); err != nil {
			return time.Time{}, 0, refuse.InvalidArgument("since", err.Error())
		}
		from = since.AsTime()
	}
	switch {
	case limit == 0:
		limit = def
	case limit < 0 || limit > maxAuditLimit:
		return time.Time{}, 0, refuse.InvalidArgument("limit", fmt.Sprintf("must be 1 to %d", maxAuditLimit))
	}
	return from, int(limit), nil
}

// auditEvents converts events up to the limit-th of the subject's;
// truncated when there were more. Cluster events (gaps, advances, moves
// beside a key's or namespace's events) do not count: the store answers
// them outside the limit (audit.Reader).
func auditEvents(evs []audit.Event, limit int) ([]*adminv1.AuditEvent, bool) {
	truncated, counted := false, 0
	for i, e := range evs {
		if e.ClusterWide() {
			continue
		}
		if counted == limit {
			evs, truncated = evs[:i], true
			break
		}
		counted++
	}
	out := make([]*adminv1.AuditEvent, len(evs))
	for i, e := range evs {
		out[i] = &adminv1.AuditEvent{
			ClusterId: e.ClusterID, Cluster: e.Cluster, Revision: e.Revision, Key: e.Key, Kind: string(e.Kind),
			At: timestamppb.New(e.At), Namespace: e.Namespace, Class: e.Class, Identity: e.Identity,
			Instance: e.Instance, Session: e.Session, PrevIdentity: e.PrevIdentity, PrevSession: e.PrevSession,
			Epoch: e.Epoch, Detail: e.Detail, WaitedMs: e.WaitedMs, TtlSeconds: e.TTLSeconds,
		}
	}
	return out, truncated
}

// ClassFact is what the register reports of a class beyond its grants.
type ClassFact struct {
	Name, Namespace, Enforcement, Purpose, RiskOwner string
	WaiverExpires                                    time.Time
}

// ClassFacts is implemented by a class registry that knows the register's
// facts (the policy set's); other registries report names only.
type ClassFacts interface {
	ClassFacts() []ClassFact
}

// Report implements adminv1.AdminServiceServer.
func (s *Server) Report(ctx context.Context, req *adminv1.ReportRequest) (*adminv1.ReportResponse, error) {
	r, err := s.auditReader(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, auditTimeout)
	defer cancel()
	since, _, err := auditWindow(req.GetSince(), 7*24*time.Hour, 1, 1)
	if err != nil {
		return nil, err
	}
	out := &adminv1.ReportResponse{}
	switch req.GetKind() {
	case "register":
		grants, err := r.GrantsByClass(ctx, since)
		if err != nil {
			return nil, s.auditFailure(err)
		}
		out.Register = s.register(grants)
	case "contention":
		rows, err := r.Contention(ctx, since)
		if err != nil {
			return nil, s.auditFailure(err)
		}
		for _, c := range rows {
			out.Contention = append(out.Contention, &adminv1.ContentionRow{Namespace: c.Namespace, Class: c.Class,
				Grants: c.Grants, Handoffs: c.Handoffs, Releases: c.Releases, Expiries: c.Expiries,
				Holds: c.Holds, HoldP50Ms: c.HoldP50ms, HoldP99Ms: c.HoldP99ms, HoldMaxMs: c.HoldMaxms,
				Waits: c.Waits, WaitP50Ms: c.WaitP50ms, WaitP99Ms: c.WaitP99ms})
		}
	case "cost":
		rows, err := r.Cost(ctx, since)
		if err != nil {
			return nil, s.auditFailure(err)
		}
		for _, c := range rows {
			out.Cost = append(out.Cost, &adminv1.CostRow{Identity: c.Identity, Sessions: c.Sessions, Holds: c.Holds, Writes: c.Writes,
				KeepalivesEstimated: c.KeepalivesEstimated})
		}
	default:
		return nil, refuse.InvalidArgument("kind", "must be register, contention or cost")
	}
	return out, nil
}

// register lists every class the registry knows, with its grants, and any
// class with grants it no longer knows.
func (s *Server) register(grants map[string]int64) []*adminv1.RegisterRow {
	var out []*adminv1.RegisterRow
	seen := map[string]bool{}
	if f, ok := s.cfg.Classes.(ClassFacts); ok {
		for _, c := range f.ClassFacts() {
			row := &adminv1.RegisterRow{Class: c.Name, Namespace: c.Namespace, Enforcement: c.Enforcement,
				Purpose: c.Purpose, RiskOwner: c.RiskOwner, Grants: grants[c.Name]}
			if !c.WaiverExpires.IsZero() {
				row.WaiverExpires = timestamppb.New(c.WaiverExpires)
			}
			out, seen[c.Name] = append(out, row), true
		}
	}
	for name, n := range grants {
		if !seen[name] {
			out = append(out, &adminv1.RegisterRow{Class: name, Grants: n})
		}
	}
	slices.SortFunc(out, func(a, b *adminv1.RegisterRow) int { return strings.Compare(a.Class, b.Class) })
	return out
}
