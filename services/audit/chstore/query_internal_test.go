package chstore

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
)

// clusterHistory is one cluster's history of a key with cluster events
// between its events: a grant, a gap, its release, an advance, a grant
// and its release; and, on another cluster, a gap the key is not on.
func clusterHistory(t0 time.Time) []audit.Event {
	ev := func(cluster string, rev int64, key string, kind audit.Kind) audit.Event {
		e := audit.Event{ClusterID: cluster, Cluster: "c-" + cluster, Revision: rev, Key: key, Kind: kind,
			At: t0.Add(time.Duration(rev) * time.Second), Epoch: 1}
		if key != "" {
			e.Namespace, e.Class, e.Identity = "payments", "ledger", "alice"
		}
		return e
	}
	const key = "payments/ledger/1"
	return []audit.Event{
		ev("c1", 1, key, audit.Grant),
		ev("c1", 5, "", audit.Gap),
		ev("c1", 6, key, audit.Release),
		ev("c1", 7, "", audit.EpochAdvance),
		ev("c1", 8, key, audit.Grant),
		ev("c1", 9, key, audit.Release),
		ev("c2", 3, "", audit.Gap),
	}
}

// A key's cluster events do not count against its limit: the answer has
// its first limit events and the cluster events among them, and those
// after them when it has no more.
func TestClusterEventsDoNotCountAgainstTheLimit(t *testing.T) {
	s, ctx := fresh(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	all := clusterHistory(t0)
	if err := s.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	c1 := all[:6]
	for limit, want := range map[int][]audit.Event{
		1: c1[:1], // the grant; the gap after it is past the answer
		2: c1[:3], // the grant, the gap, the release
		3: c1[:5],
		4: c1, // every event of the key, and the advance between
		9: c1,
	} {
		for name, q := range map[string]func() ([]audit.Event, error){
			"ByKey":            func() ([]audit.Event, error) { return s.ByKey(ctx, "payments/ledger/1", t0, limit) },
			"ByNamespaceClass": func() ([]audit.Event, error) { return s.ByNamespaceClass(ctx, "payments", "", t0, limit) },
		} {
			got, err := q()
			if err != nil || !slices.EqualFunc(got, want, func(a, b audit.Event) bool { return a.ClusterID == b.ClusterID && a.Revision == b.Revision }) {
				t.Errorf("%s, limit %d: %v, %v; want %v", name, limit, kindsOf(got), err, kindsOf(want))
			}
		}
	}
}

func kindsOf(evs []audit.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.ClusterID+":"+string(e.Kind))
	}
	return out
}

// The queries a key's or namespace's answer makes, the cluster events'
// included, are bounded by the window, which the table is partitioned by:
// ClickHouse refuses them otherwise under force_index_by_date.
func TestClusterEventQueriesUseTheWindow(t *testing.T) {
	s, ctx := fresh(t)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	all := clusterHistory(t0)
	if err := s.Insert(ctx, all); err != nil {
		t.Fatal(err)
	}
	base := s.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	s.client = &http.Client{Timeout: s.client.Timeout, Transport: roundTrip(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		q.Set("force_index_by_date", "1")
		req.URL.RawQuery = q.Encode()
		return base.RoundTrip(req)
	})}
	for name, q := range map[string]func() ([]audit.Event, error){
		"ByKey":                  func() ([]audit.Event, error) { return s.ByKey(ctx, "payments/ledger/1", t0, 100) },
		"ByKey, no row":          func() ([]audit.Event, error) { return s.ByKey(ctx, "payments/ledger/none", t0, 100) },
		"ByNamespaceClass":       func() ([]audit.Event, error) { return s.ByNamespaceClass(ctx, "payments", "ledger", t0, 100) },
		"ByNamespaceClass, none": func() ([]audit.Event, error) { return s.ByNamespaceClass(ctx, "payments", "entity", t0, 100) },
	} {
		if got, err := q(); err != nil || len(got) == 0 {
			t.Errorf("%s under force_index_by_date: %v, %v", name, kindsOf(got), err)
		}
	}
	// Later than the gap: the window holds nothing, not even it.
	if got, err := s.ByKey(ctx, "payments/ledger/1", t0.Add(time.Hour), 100); err != nil || len(got) != 0 {
		t.Errorf("a window after every event: %v, %v", kindsOf(got), err)
	}
}
