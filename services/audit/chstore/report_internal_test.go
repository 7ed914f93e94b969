package chstore

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// The estimate takes the renewal rate as a parameter (Cost passes
// protocol.RenewalsPerTTL): a client renewing twice as often is
// estimated twice the renewals after the one at open.
func TestKeepalivesFollowTheRenewalRate(t *testing.T) {
	s, ctx := fresh(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	open := audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 1, Kind: audit.SessionOpen, At: t0,
		Identity: "alice", Session: 1, TTLSeconds: 9, Epoch: 1}
	closed := open
	closed.Revision, closed.Kind, closed.At = 2, audit.SessionClose, t0.Add(9*time.Second)
	if err := s.Insert(ctx, []audit.Event{open, closed}); err != nil {
		t.Fatal(err)
	}
	s.now = func() time.Time { return t0.Add(time.Minute) }
	for perTTL, want := range map[int]int64{3: 4, 6: 7} {
		got, err := s.keepalives(ctx, t0, perTTL)
		if err != nil || got["alice"] != want {
			t.Errorf("renewing %d times a TTL over one TTL: %v, %v; want %d", perTTL, got, err, want)
		}
	}
}
