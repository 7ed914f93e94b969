package audittest

import (
	"reflect"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// EveryKind is a history of every kind of event within 2.4s of t0, oldest
// first (by time, then cluster ID and revision): one key's holds ending
// every way, another namespace's expiry, and cluster events. The expiry
// at index 3 and the grant after it are at the same time, 1.5s after t0.
func EveryKind(t0 time.Time) []audit.Event {
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(rev int64, ms int, kind audit.Kind, id string, sess int64) audit.Event {
		return audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: rev, Key: "payments/ledger/42", Kind: kind,
			At: at(ms), Namespace: "payments", Class: "ledger", Identity: id, Instance: id + "-pod-1", Session: sess, Epoch: 3}
	}
	handoff := hold(11, 5, audit.Handoff, "bob", 202)
	handoff.PrevIdentity, handoff.PrevSession, handoff.WaitedMs = "alice", 101, 4
	waited := func(e audit.Event, ms int64) audit.Event { e.WaitedMs = ms; return e }
	return []audit.Event{
		// A session's events have no key, as the tailer writes them.
		{ClusterID: "c0ffee", Cluster: "coord", Revision: 9, Kind: audit.SessionOpen,
			At: at(0), Identity: "alice", Instance: "alice-pod-1", Session: 101, Epoch: 3, TTLSeconds: 10},
		hold(10, 1, audit.Grant, "alice", 101),
		handoff,
		hold(12, 1500, audit.Expiry, "bob", 202),
		waited(hold(13, 1500, audit.Grant, "carol", 303), 1200), // same time: revision orders
		hold(14, 1600, audit.Release, "carol", 303),
		waited(hold(15, 1700, audit.Grant, "alice", 404), 30),
		hold(16, 1800, audit.SessionClose, "alice", 404),
		hold(17, 1900, audit.Grant, "dave", 505),
		hold(18, 2000, audit.ForceRelease, "dave", 505),
		{ClusterID: "c0ffee", Cluster: "coord", Revision: 19, Kind: audit.EpochAdvance, At: at(2100), Epoch: 4, Detail: "epoch 4"},
		{ClusterID: "c0ffee", Cluster: "coord", Revision: 20, Kind: audit.ShardMove, At: at(2200), Epoch: 4, Detail: "shard map v7"},
		{ClusterID: "beef", Cluster: "shard-a", Revision: 500, Kind: audit.Gap, At: at(2300), Detail: "revisions 100-499 compacted"},
		{ClusterID: "beef", Cluster: "shard-a", Revision: 501, Key: "team-a/orders/7", Kind: audit.Expiry,
			At: at(2400), Namespace: "team-a", Class: "entity", Identity: "bob", Instance: "bob-pod-2", Session: 606, Epoch: 1},
	}
}

// Same fails t unless got is want, listing the events that differ.
func Same(t testing.TB, what string, got, want []audit.Event) {
	t.Helper()
	if reflect.DeepEqual(got, want) {
		return
	}
	t.Errorf("%s: got %d events, want %d", what, len(got), len(want))
	at := func(evs []audit.Event, i int) any {
		if i < len(evs) {
			return evs[i]
		}
		return "none"
	}
	for i := range max(len(got), len(want)) {
		if i >= len(got) || i >= len(want) || !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("  #%d\n   got  %+v\n   want %+v", i, at(got, i), at(want, i))
		}
	}
}
