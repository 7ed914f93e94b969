package chstore_test

import (
	"context"
	"errors"
	"math/rand"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/chstore"
	"github.com/lockplane/lockplane/services/resourcetest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	resourcetest.StopClickHouse()
	os.Exit(code)
}

// store is a migrated store on a fresh database.
func store(t *testing.T) (*chstore.Store, context.Context) {
	t.Helper()
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	s := chstore.New(ch.URL(), ch.Database(t), chstore.WithCredentials(ch.Writer()))
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, ctx
}

var t0 = time.Date(2026, 11, 30, 23, 59, 59, 987_000_000, time.UTC) // the next month is a second away

// history is every kind of event, oldest first; the expiry at index 3
// is in the next month.
func history() []audit.Event { return audittest.EveryKind(t0) }

// withClusters keeps what keep keeps and the cluster events (empty key)
// of the clusters those are on, as ByKey and ByNamespaceClass answer.
func withClusters(evs []audit.Event, keep func(audit.Event) bool) []audit.Event {
	on := map[string]bool{}
	for _, e := range filter(evs, keep) {
		on[e.ClusterID] = true
	}
	return filter(evs, func(e audit.Event) bool {
		return keep(e) || (e.Key == "" && on[e.ClusterID] && slices.Contains([]audit.Kind{audit.Gap, audit.EpochAdvance, audit.ShardMove}, e.Kind))
	})
}

func filter(evs []audit.Event, keep func(audit.Event) bool) []audit.Event {
	var out []audit.Event
	for _, e := range evs {
		if keep(e) {
			out = append(out, e)
		}
	}
	return out
}

// Every field of every kind comes back as written, once, in order, though
// every event was inserted twice (in shuffled order).
func TestQueriesReturnEachEventOnceInOrder(t *testing.T) {
	s, ctx := store(t)
	all := history()
	for range 2 {
		shuffled := slices.Clone(all)
		rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if err := s.Insert(ctx, shuffled); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[audit.Kind]bool{}
	for _, e := range all {
		kinds[e.Kind] = true
	}
	if len(kinds) != 10 {
		t.Fatalf("history covers %d kinds, want all 10", len(kinds))
	}

	got, err := s.ByKey(ctx, "payments/ledger/42", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey", got, withClusters(all, func(e audit.Event) bool { return e.Key == "payments/ledger/42" }))

	got, err = s.ByIdentity(ctx, "bob", time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByIdentity", got, filter(all, func(e audit.Event) bool { return e.Identity == "bob" }))

	got, err = s.ByNamespaceClass(ctx, "team-a", "entity", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByNamespaceClass", got, withClusters(all, func(e audit.Event) bool { return e.Namespace == "team-a" }))
	got, err = s.ByNamespaceClass(ctx, "payments", "", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByNamespaceClass, every class", got, withClusters(all, func(e audit.Event) bool { return e.Namespace == "payments" }))
	// No row of it: only the gaps, in which its history might be.
	got, err = s.ByNamespaceClass(ctx, "payments", "entity", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByNamespaceClass(payments, entity)", got, filter(all, func(e audit.Event) bool { return e.Kind == audit.Gap }))

	expiries := filter(all, func(e audit.Event) bool { return e.Kind == audit.Expiry })
	got, err = s.ExpiriesList(ctx, t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ExpiriesList", got, expiries)
	counts, err := s.Expiries(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.ExpiryCount{{Namespace: "payments", Class: "ledger", Count: 1}, {Namespace: "team-a", Class: "entity", Count: 1}}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("Expiries = %+v, want %+v", counts, want)
	}

	for cluster, want := range map[string]int64{"c0ffee": 20, "beef": 501, "none": 0} {
		if rev, err := s.LastRevision(ctx, cluster); err != nil || rev != want {
			t.Errorf("LastRevision(%s) = %d, %v; want %d", cluster, rev, err, want)
		}
	}
}

// since selects to the millisecond, across a month's partition boundary.
func TestSinceIsExactToTheMillisecond(t *testing.T) {
	s, ctx := store(t)
	all := history()
	if err := s.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	expiry := all[3] // the first event of the next month
	for _, c := range []struct {
		since time.Time
		want  int
	}{{expiry.At, 2}, {expiry.At.Add(time.Millisecond), 1}, {expiry.At.Add(-time.Millisecond), 2}} {
		got, err := s.ExpiriesList(ctx, c.since, 100)
		if err != nil || len(got) != c.want {
			t.Errorf("ExpiriesList(since %v) = %d events, %v; want %d", c.since, len(got), err, c.want)
		}
	}
	counts, err := s.Expiries(ctx, expiry.At.Add(time.Millisecond))
	if want := []audit.ExpiryCount{{Namespace: "team-a", Class: "entity", Count: 1}}; err != nil || !reflect.DeepEqual(counts, want) {
		t.Errorf("Expiries after the first = %+v, %v; want %+v", counts, err, want)
	}
}

func TestLimits(t *testing.T) {
	s, ctx := store(t)
	all := history()
	if err := s.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	got, err := s.ByKey(ctx, "payments/ledger/42", t0, 2)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey, limit 2", got, all[1:3])
	if got, err := s.ByIdentity(ctx, "alice", t0, chstore.MaxLimit+1); err != nil || len(got) != 4 {
		t.Errorf("ByIdentity beyond MaxLimit = %d events, %v; want 4", len(got), err)
	}
	if _, err := s.ExpiriesList(ctx, t0, 0); err == nil {
		t.Error("a limit of 0 was accepted")
	}
}

// Values that would break out of a naively quoted literal select nothing
// (but the gaps any subject without rows is shown) and break nothing; a
// key made of them is found exactly.
func TestInjectionSelectsNothing(t *testing.T) {
	s, ctx := store(t)
	nasty := `x\' ) OR 1=1 -- ` + "\n'\\"
	evs := append(history(), audit.Event{ClusterID: "c0ffee", Revision: 99, Key: nasty, Kind: audit.Grant,
		At: t0, Namespace: nasty, Class: nasty, Identity: nasty, Detail: nasty})
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	for _, attack := range []string{`') OR 1=1 --`, `' OR 1=1 --`, `\' OR 1=1 --`, `x\' ) OR 1=1 -- `, "' OR '1'='1"} {
		for name, q := range map[string]func() ([]audit.Event, error){
			"ByKey":            func() ([]audit.Event, error) { return s.ByKey(ctx, attack, time.Time{}, 100) },
			"ByIdentity":       func() ([]audit.Event, error) { return s.ByIdentity(ctx, attack, time.Time{}, 100) },
			"ByNamespaceClass": func() ([]audit.Event, error) { return s.ByNamespaceClass(ctx, "payments", attack, time.Time{}, 100) },
		} {
			got, err := q()
			if err != nil || slices.ContainsFunc(got, func(e audit.Event) bool { return e.Kind != audit.Gap || e.Key != "" }) {
				t.Errorf("%s(%q) = %+v, %v; want the gaps only", name, attack, got, err)
			}
		}
		if rev, err := s.LastRevision(ctx, attack); err != nil || rev != 0 {
			t.Errorf("LastRevision(%q) = %d, %v; want 0", attack, rev, err)
		}
	}
	got, err := s.ByKey(ctx, nasty, time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey(nasty)", got, withClusters(evs, func(e audit.Event) bool { return e.Key == nasty }))
	if got, err := s.ByNamespaceClass(ctx, nasty, nasty, time.Time{}, 100); err != nil || len(got) != 3 {
		t.Errorf("ByNamespaceClass(nasty) = %d events, %v; want 3 (with its cluster's advance and move)", len(got), err)
	}
	if got, err := s.ByKey(ctx, "payments/ledger/42", time.Time{}, 100); err != nil || len(got) != 11 {
		t.Errorf("after the attempts, ByKey = %d events, %v; want 11", len(got), err)
	}
}

// ClickHouse's refusals come back as errors carrying its message.
func TestErrorsCarryClickHouseMessage(t *testing.T) {
	ch := resourcetest.StartClickHouse(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := chstore.New(ch.URL(), "no_such_database", chstore.WithCredentials(ch.Writer()))
	err := s.Insert(ctx, history())
	var chErr *chstore.Error
	if !errors.As(err, &chErr) || chErr.Status == 200 || !strings.Contains(chErr.Message, "no_such_database") {
		t.Fatalf("Insert into a missing database: %v; want a chstore.Error naming it", err)
	}
	if _, err := s.ByKey(ctx, "k", t0, 1); !errors.As(err, &chErr) {
		t.Errorf("ByKey in a missing database: %v; want a chstore.Error", err)
	}
}

// A replayed event whose time is when the tailer read it keeps its first
// reading: the earliest time, nearest the truth, whatever order the
// copies arrive in.
func TestAReplayKeepsTheEarliestReading(t *testing.T) {
	s, ctx := store(t)
	e := audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: 30, Key: "team-a/replay/1", Kind: audit.Expiry,
		At: t0, Namespace: "team-a", Class: "default", Identity: "x", Session: 7}
	later, earlier := e, e
	later.At, earlier.At = t0.Add(time.Minute), t0.Add(-time.Second)
	for _, batch := range [][]audit.Event{{e}, {later}, {earlier}, {later}} {
		if err := s.Insert(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.ByKey(ctx, e.Key, t0.Add(-time.Hour), 10)
	if err != nil || len(got) != 1 || !got[0].At.Equal(earlier.At) {
		t.Fatalf("got %+v, %v; want one event at %s", got, err, earlier.At)
	}
}

// Contention times each hold from its grant or handoff to its key's next
// event, and counts and times the waits its grants ended; cost counts each identity's sessions, holds and writes.
func TestReportsContentionAndCost(t *testing.T) {
	s, ctx := store(t)
	if err := s.Insert(ctx, history()); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Contention(ctx, t0.Add(-time.Hour))
	want := []audit.Contention{
		// Holds of 4 ms (to the handoff), 1495 (to the expiry), and 100
		// each to the release, the close and the force-release.
		// Three of them went to a request that waited: 4, 30 and 1200 ms.
		{Namespace: "payments", Class: "ledger", Grants: 4, Handoffs: 1, Waits: 3, WaitP50ms: 30, WaitP99ms: 1200,
			Releases: 1, Expiries: 1, Holds: 5, HoldP50ms: 100, HoldP99ms: 1495, HoldMaxms: 1495},
		{Namespace: "team-a", Class: "entity", Expiries: 1},
	}
	if err != nil || !reflect.DeepEqual(rows, want) {
		t.Fatalf("contention %+v, %v\nwant %+v", rows, err, want)
	}
	// alice's session (TTL 10 s) is still open at the end of the history:
	// the one renewal a client sends on opening.
	chstore.SetNow(s, t0.Add(2400*time.Millisecond))
	costs, err := s.Cost(ctx, t0.Add(-time.Hour))
	wantCost := []audit.Cost{
		{Identity: "alice", Sessions: 1, Holds: 2, Writes: 4, KeepalivesEstimated: 1},
		{Identity: "bob", Holds: 1, Writes: 3},
		{Identity: "carol", Holds: 1, Writes: 2},
		{Identity: "dave", Holds: 1, Writes: 2},
	}
	if err != nil || !reflect.DeepEqual(costs, wantCost) {
		t.Fatalf("cost %+v, %v\nwant %+v", costs, err, wantCost)
	}
	byClass, err := s.GrantsByClass(ctx, t0.Add(-time.Hour))
	if err != nil || !reflect.DeepEqual(byClass, map[string]int64{"ledger": 5}) {
		t.Fatalf("grants by class %v, %v; want ledger: 5", byClass, err)
	}
}

// A cluster's history comes back in revision order though its times are
// not (a grant's time is its arbiter's clock, a release's when the tailer
// read it); histories of clusters are merged by time.
func TestHistoryIsInRevisionOrderWithinACluster(t *testing.T) {
	s, ctx := store(t)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(cluster string, rev int64, kind audit.Kind, ms int) audit.Event {
		return audit.Event{ClusterID: cluster, Cluster: "c-" + cluster, Revision: rev, Key: "payments/moved/1", Kind: kind,
			At: at(ms), Namespace: "payments", Class: "ledger", Identity: "alice"}
	}
	// The key's first shard, before a shard move, then its second, whose
	// arbiter's clock runs 4 s ahead of the tailer's.
	want := []audit.Event{
		ev("beef", 5, audit.Grant, 100),
		ev("beef", 6, audit.Release, 200),
		ev("c0ffee", 10, audit.Grant, 5000),
		ev("c0ffee", 11, audit.Release, 1000),
		ev("c0ffee", 12, audit.Grant, 6000),
		ev("c0ffee", 13, audit.Expiry, 3000),
	}
	if err := s.Insert(ctx, want); err != nil {
		t.Fatal(err)
	}
	got, err := s.ByKey(ctx, "payments/moved/1", time.Time{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey", got, want)
	got, err = s.ByIdentity(ctx, "alice", time.Time{}, 4)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByIdentity, limit 4", got, want[:4])
	got, err = s.ExpiriesList(ctx, time.Time{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ExpiriesList", got, want[5:])
}

// A key's history, and a namespace's, carries the cluster-level events
// (compaction gaps, epoch advances, shard moves) of the clusters its rows
// are on, in the window and in revision order: a gap in a key's history
// shows where it is, and an advance or a move shows though it ended no
// hold of the key. Other clusters' events, sessions' events and events
// before the window stay out. A key the store has no row of (all of its
// history may be in a gap) gets every cluster's gaps in the window.
func TestAKeysHistoryShowsItsClustersGapsAdvancesAndMoves(t *testing.T) {
	s, ctx := store(t)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	const key = "payments/gappy/1"
	hold := func(rev int64, ms int, kind audit.Kind) audit.Event {
		return audit.Event{ClusterID: "c0ffee", Cluster: "shard-a", Revision: rev, Key: key, Kind: kind, At: at(ms),
			Namespace: "payments", Class: "ledger", Identity: "alice", Session: 7, Epoch: 3}
	}
	cluster := func(id string, rev int64, ms int, kind audit.Kind) audit.Event {
		return audit.Event{ClusterID: id, Cluster: "c-" + id, Revision: rev, Kind: kind, At: at(ms), Epoch: 3, Detail: string(kind)}
	}
	before := cluster("c0ffee", 5, -1000, audit.Gap) // before the window
	grant, gap, advance := hold(10, 100, audit.Grant), cluster("c0ffee", 12, 50, audit.Gap), cluster("c0ffee", 13, 300, audit.EpochAdvance)
	release, move := hold(14, 400, audit.Release), cluster("c0ffee", 15, 500, audit.ShardMove)
	session := audit.Event{ClusterID: "c0ffee", Cluster: "shard-a", Revision: 11, Kind: audit.SessionOpen, At: at(150), Identity: "bob", Session: 8}
	elsewhere := cluster("beef", 20, 200, audit.Gap) // another cluster's
	other := audit.Event{ClusterID: "beef", Cluster: "c-beef", Revision: 21, Key: "team-a/orders/7", Kind: audit.Grant, At: at(250),
		Namespace: "team-a", Class: "entity", Identity: "bob", Session: 9}
	if err := s.Insert(ctx, []audit.Event{before, grant, session, gap, advance, release, move, elsewhere, other}); err != nil {
		t.Fatal(err)
	}
	// Revision order within the cluster, though the gap's time is earlier
	// than the grant's.
	want := []audit.Event{grant, gap, advance, release, move}
	got, err := s.ByKey(ctx, key, t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey", got, want)
	got, err = s.ByNamespaceClass(ctx, "payments", "ledger", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByNamespaceClass", got, want)
	got, err = s.ByNamespaceClass(ctx, "team-a", "", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByNamespaceClass, the other cluster's", got, []audit.Event{elsewhere, other})
	got, err = s.ByKey(ctx, "payments/never/1", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByKey of a key without rows", got, []audit.Event{gap, elsewhere})
	// The holder's own history has no cluster events: they are no one's.
	got, err = s.ByIdentity(ctx, "alice", t0, 100)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "ByIdentity", got, []audit.Event{grant, release})
}

// Keepalives write no revision: cost estimates them from each session's
// lifetime in the log, as the client renews (lockclient: at once, then
// every TTL/3): to its close, to a TTL before its expiry (it had stopped
// renewing), or to now while it is open. A session counts the renewals in
// the window, wherever it opened: one opened before it (dave, erin) counts
// those from the window's start, and one whose close the log lost (erin)
// is capped at now. One whose TTL the log does not give is not estimated.
func TestCostEstimatesKeepalivesFromSessionLifetimes(t *testing.T) {
	s, ctx := store(t)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	rev := int64(0)
	ev := func(kind audit.Kind, ms int, id string, session, ttl int64) audit.Event {
		rev++
		return audit.Event{ClusterID: "c0ffee", Cluster: "coord", Revision: rev, Kind: kind, At: at(ms), Identity: id,
			Session: session, TTLSeconds: ttl, Epoch: 1}
	}
	evs := []audit.Event{
		ev(audit.SessionOpen, -60000, "frank", 7, 9), // ended before the window
		ev(audit.SessionOpen, -60000, "dave", 5, 9),  // opened before the window
		ev(audit.SessionOpen, -10000, "erin", 6, 9),  // its close lost in a gap
		ev(audit.SessionClose, -1000, "frank", 7, 9),
		ev(audit.SessionOpen, 0, "alice", 1, 9), // renews every 3 s
		ev(audit.SessionOpen, 0, "carol", 4, 0), // TTL unknown
		ev(audit.SessionOpen, 1000, "alice", 2, 9),
		ev(audit.SessionOpen, 2000, "bob", 3, 3),     // every 1 s, still open
		ev(audit.SessionClose, 7000, "dave", 5, 9),   // renewed at 0, 3, 6 s in the window
		ev(audit.SessionClose, 10000, "alice", 1, 9), // renewed at 0, 3, 6, 9 s
		ev(audit.Expiry, 16000, "alice", 2, 9),       // at 1, 4, 7 s, then stopped
	}
	// Another cluster's session of the same number is another session.
	other := ev(audit.SessionOpen, 0, "bob", 1, 30)
	other.ClusterID = "beef"
	if err := s.Insert(ctx, append(evs, other)); err != nil {
		t.Fatal(err)
	}
	// bob's: 2, 3, ..., 20 s; the other: 0, 10, 20 s; erin's: 2, 5, ..., 20 s.
	chstore.SetNow(s, at(20000))
	got, err := s.Cost(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"alice": 7, "bob": 22, "carol": 0, "dave": 3, "erin": 7}
	for _, c := range got {
		w, ok := want[c.Identity]
		if !ok || c.KeepalivesEstimated != w {
			t.Errorf("%s: %d keepalives estimated, want %d (a row: %v)", c.Identity, c.KeepalivesEstimated, w, ok)
		}
		delete(want, c.Identity)
	}
	if len(want) > 0 {
		t.Errorf("no cost row for %v: %+v", want, got)
	}
	// erin wrote nothing in the window: her row is her keepalives, last.
	if last := got[len(got)-1]; last != (audit.Cost{Identity: "erin", KeepalivesEstimated: 7}) {
		t.Errorf("last row %+v; want erin's keepalives alone", last)
	}
}
