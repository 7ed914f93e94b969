package archive_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/chstore"
	adminv1 "github.com/lockplane/lockplane/services/client/api/lockplane/admin/v1"
	"github.com/lockplane/lockplane/services/client/lockclient"
	"github.com/lockplane/lockplane/services/devenv"
	"github.com/lockplane/lockplane/services/devenv/devenvtest"
	"github.com/lockplane/lockplane/services/internal/arbiter/admin"
	"github.com/minio/minio-go/v7"
	"google.golang.org/grpc/metadata"
)

// A real force-release with revoke_session, from the two operators' calls
// to the locked records: the tailer puts the revision's events in
// ClickHouse, CopyRecords copies them to the records bucket, and every
// record of that revision, the session's end included, says who asked,
// who approved and why (issue 32).
func TestARevokedSessionsForceReleaseIsLockedAwayWithWhoAndWhy(t *testing.T) {
	e := newEnv(t)
	store := &insertSignal{Store: e.store, changed: make(chan struct{})}
	env := devenvtest.Start(t, devenv.Options{Audit: store, Operators: twoOperators{}})
	since := time.Now().Add(-time.Minute)
	s := devenvtest.Session(t, devenvtest.Client(t, env, "demo"), "")
	keys := []string{"team-a/revoked/1", "team-a/revoked/2", "team-a/revoked/3"}
	for _, k := range keys {
		if _, err := s.TryLock(e.ctx, k, func(*lockclient.Hold) {}); err != nil {
			t.Fatal(err)
		}
	}
	as := func(who string) context.Context {
		return metadata.AppendToOutgoingContext(e.ctx, "authorization", "Bearer "+who)
	}
	req, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "alice").Conn()).RequestForceRelease(as("alice"),
		&adminv1.RequestForceReleaseRequest{Key: keys[1], Reason: "stuck job", RevokeSession: true})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := adminv1.NewAdminServiceClient(devenvtest.Client(t, env, "bob").Conn()).ApproveAction(as("bob"),
		&adminv1.ApproveActionRequest{Id: req.GetAction().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	fr := approved.GetForceRelease()
	if len(fr.GetReleased()) != len(keys) || !fr.GetSessionRevoked() {
		t.Fatalf("force-release result %v; want %v released and the session revoked", fr, keys)
	}
	// The revision's events: each hold's end, and the session record's.
	want := map[string]bool{"": true}
	for _, k := range keys {
		want[k] = true
	}
	if err := store.await(e.ctx, func(evs []audit.Event) bool {
		n := 0
		for _, ev := range evs {
			if ev.Revision == fr.GetRevision() && want[ev.Key] {
				n++
			}
		}
		return n == len(want)
	}); err != nil {
		t.Fatalf("the revision's events never reached ClickHouse: %v", err)
	}

	cfg := e.config(minio.Governance)
	cfg.Clock = nil // the real one: the events are stamped now
	a := e.archive(t, cfg)
	if _, err := a.CopyRecords(e.ctx, since); err != nil {
		t.Fatal(err)
	}
	got := map[string]lockedRecord{}
	for _, r := range lockedRecords(t, e, cfg.RecordsBucket) {
		if r.event.Revision == fr.GetRevision() {
			got[r.event.Key] = r
		}
	}
	if len(got) != len(want) {
		t.Errorf("records of revision %d: %d; want one for each of %d events (the holds' and the session's)", fr.GetRevision(), len(got), len(want))
	}
	for key := range want {
		r, ok := got[key]
		if !ok {
			t.Errorf("no locked record of %q at revision %d", key, fr.GetRevision())
			continue
		}
		if r.event.Kind != audit.ForceRelease || r.event.Session != s.ID() || r.versions != 1 || r.mode != minio.Governance || r.until.IsZero() {
			t.Errorf("%s: %s of session %x, %d versions, retained %s until %s; want one locked force_release of session %x",
				r.key, r.event.Kind, r.event.Session, r.versions, r.mode, r.until, s.ID())
		}
		for _, needle := range []string{`"requester":"`, "alice", `"approver":"`, "bob", `"reason":"stuck job"`, req.GetAction().GetId()} {
			if !strings.Contains(r.event.Detail, needle) {
				t.Errorf("%s: detail %q does not hold %s", r.key, r.event.Detail, needle)
			}
		}
	}
}

// twoOperators stands in for the OpenID Connect verifier, as in the audit
// package's force-release test: the token is the operator's name.
type twoOperators struct{}

func (twoOperators) Verify(_ context.Context, raw string) (admin.Operator, error) {
	switch raw {
	case "alice", "bob":
		return admin.Operator{Issuer: "https://idp.test", Subject: "u-" + raw, Name: raw}, nil
	}
	return admin.Operator{}, errors.New("unknown token")
}

// insertSignal is the ClickHouse store, telling of every insert.
type insertSignal struct {
	*chstore.Store
	mu      sync.Mutex
	evs     []audit.Event
	changed chan struct{}
}

func (s *insertSignal) Insert(ctx context.Context, evs []audit.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.Store.Insert(ctx, evs); err != nil {
		return err
	}
	s.evs = append(s.evs, evs...)
	close(s.changed)
	s.changed = make(chan struct{})
	return nil
}

// await returns once ok holds of the events inserted, or ctx's error.
func (s *insertSignal) await(ctx context.Context, ok func([]audit.Event) bool) error {
	for {
		s.mu.Lock()
		done, ch := ok(s.evs), s.changed
		s.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

var _ devenv.AuditStore = (*insertSignal)(nil)
