package devenv_test

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/class"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	lockv1 "github.com/lockplane/lockplane/services/client/api/lockplane/lock/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/client/reason"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/lockplane/lockplane/services/resourcetest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

// With an audit store the embedded default tails its clusters (coord and
// each shard) into it, and an operator reads a hold's grant and release
// back through the admin API.
func TestTheEmbeddedDefaultAuditsHoldsForOperators(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := ch.Database(t)
	store := chstore.New(ch.URL(), db, chstore.WithCredentials(ch.Writer()))
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	entity := class.Class{Name: "entity", TTL: 3 * time.Second, Tier: class.TierEntity, Prefixes: []string{"team-a/audit-entity/"}}
	// The queries go through the store's read-only user, as an arbiter's.
	reader := chstore.New(ch.URL(), db, chstore.WithCredentials(ch.Reader()))
	waiver := time.Date(2031, 1, 2, 0, 0, 0, 0, time.UTC)
	// The register's facts of two classes, as a policy set gives them:
	// entity (granted below) and ledger (never granted).
	classes := withFacts{Static: class.NewStatic(devenvtest.Fast, entity), facts: []admin.ClassFact{
		{Name: entity.Name, Namespace: "team-a", Enforcement: "advisory", Purpose: "correctness", RiskOwner: "alice@example.com", WaiverExpires: waiver},
		{Name: "ledger", Namespace: "payments", Enforcement: "fenced", Purpose: "correctness", RiskOwner: "bob@example.com"},
	}}
	env := devenvtest.Start(t, devenv.Options{Audit: store, AuditReader: reader, Shards: []string{"entity-0"}, Classes: classes})
	demo := devenvtest.Client(t, env, "demo")
	admin := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn())

	// A key per tier: a key lives on one cluster, its class's.
	for cls, at := range map[string]struct{ cluster, key string }{"": {"coord", "team-a/audit/devenv"}, entity.Name: {"entity-0", "team-a/audit-entity/devenv"}} {
		cluster, key := at.cluster, at.key
		s := devenvtest.Session(t, demo, cls)
		h, err := s.Lock(ctx, key, func(*lockclient.Hold) {})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The store is external: poll the answer until the tailer has
		// written both events, within a deadline.
		var got []string
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := admin.Audit(ctx, &adminv1.AuditRequest{Key: key})
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, e := range resp.GetEvents() {
				// The cluster's own events (epoch, shard map) come with the key's.
				if e.GetCluster() != cluster || e.GetKey() != key {
					continue
				}
				got = append(got, e.GetKind())
				if e.GetIdentity() != env.Profile.Identities["demo"].SPIFFEID {
					t.Fatalf("event %v: want %s held by demo", e, key)
				}
			}
			if strings.Join(got, " ") == string(audit.Grant)+" "+string(audit.Release) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("audit of %s on %s: %v, want a grant then a release", key, cluster, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The reports count what the history holds: both grants, one per
	// cluster, each ended by a release; the demo identity's cost.
	rep, err := admin.Report(ctx, &adminv1.ReportRequest{Kind: "contention"})
	if err != nil {
		t.Fatal(err)
	}
	var grants, releases, holds int64
	for _, r := range rep.GetContention() {
		if r.GetNamespace() == "team-a" {
			grants, releases, holds = grants+r.GetGrants(), releases+r.GetReleases(), holds+r.GetHolds()
		}
	}
	if grants != 2 || releases != 2 || holds != 2 {
		t.Fatalf("contention %v: want 2 grants, 2 releases, 2 timed holds in team-a", rep.GetContention())
	}
	rep, err = admin.Report(ctx, &adminv1.ReportRequest{Kind: "cost"})
	if err != nil || len(rep.GetCost()) == 0 || rep.GetCost()[0].GetIdentity() != env.Profile.Identities["demo"].SPIFFEID || rep.GetCost()[0].GetHolds() != 2 {
		t.Fatalf("cost %v, %v: want demo first, with 2 holds", rep.GetCost(), err)
	}
	if _, err := admin.Report(ctx, &adminv1.ReportRequest{Kind: "nonsense"}); reason.Of(err) != lockv1.ErrorReason_INVALID_ARGUMENT {
		t.Fatalf("an unknown report: %v, want INVALID_ARGUMENT", err)
	}
	// The register joins the registry's facts with the grants in the
	// store: a class with facts and grants, one with facts and none, and
	// one with grants the facts do not list (the default class).
	rep, err = admin.Report(ctx, &adminv1.ReportRequest{Kind: "register"})
	if err != nil {
		t.Fatal(err)
	}
	wantRegister := []*adminv1.RegisterRow{
		{Class: class.DefaultName, Grants: 1},
		{Class: entity.Name, Namespace: "team-a", Enforcement: "advisory", Purpose: "correctness", RiskOwner: "alice@example.com",
			WaiverExpires: timestamppb.New(waiver), Grants: 1},
		{Class: "ledger", Namespace: "payments", Enforcement: "fenced", Purpose: "correctness", RiskOwner: "bob@example.com"},
	}
	if got := rep.GetRegister(); len(got) != len(wantRegister) || !slices.EqualFunc(got, wantRegister, func(a, b *adminv1.RegisterRow) bool { return proto.Equal(a, b) }) {
		t.Fatalf("register %v\nwant %v", got, wantRegister)
	}

	// Only operators read history: each of the three questions.
	other := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "other").Conn())
	if _, err := other.Audit(ctx, &adminv1.AuditRequest{Key: "team-a/audit/devenv"}); reason.Of(err) != lockv1.ErrorReason_PERMISSION_DENIED {
		t.Fatalf("a workload's audit query: %v, want PERMISSION_DENIED", err)
	}
	if _, err := other.AuditExpiries(ctx, &adminv1.AuditExpiriesRequest{}); reason.Of(err) != lockv1.ErrorReason_PERMISSION_DENIED {
		t.Fatalf("a workload's expiries query: %v, want PERMISSION_DENIED", err)
	}
	for _, kind := range []string{"register", "contention", "cost"} {
		if _, err := other.Report(ctx, &adminv1.ReportRequest{Kind: kind}); reason.Of(err) != lockv1.ErrorReason_PERMISSION_DENIED {
			t.Fatalf("a workload's %s report: %v, want PERMISSION_DENIED", kind, err)
		}
	}
	// One question at a time, and the refusal names the field.
	_, err = admin.Audit(ctx, &adminv1.AuditRequest{Key: "team-a/audit/devenv", Identity: env.Profile.Identities["demo"].SPIFFEID})
	r, meta := reason.Info(err)
	if r != lockv1.ErrorReason_INVALID_ARGUMENT || meta["field"] == "" || !strings.Contains(err.Error(), meta["field"]) {
		t.Fatalf("key and identity together: %v (reason %s, %v), want INVALID_ARGUMENT naming the field", err, r, meta)
	}
}

// withFacts is a class registry that knows the register's facts, as the
// policy set's does (live.Policy).
type withFacts struct {
	class.Static
	facts []admin.ClassFact
}

func (w withFacts) ClassFacts() []admin.ClassFact { return w.facts }
