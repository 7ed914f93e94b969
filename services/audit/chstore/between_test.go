package chstore_test

import (
	"testing"
	"time"

	"github.com/lockplane/lockplane/services/audit"
	"github.com/lockplane/lockplane/services/audit/audittest"
	"github.com/lockplane/lockplane/services/audit/chstore"
)

// pages reads [from, to) page by page, as an exporter does; a cursor that
// does not move on fails rather than loops.
func pages(t *testing.T, s *chstore.Store, from, to time.Time, limit int, kinds ...audit.Kind) []audit.Event {
	t.Helper()
	var all []audit.Event
	var after audit.Cursor
	for range 100 {
		page, err := s.Between(t.Context(), from, to, after, limit, kinds...)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		after = audit.CursorOf(page[len(page)-1])
	}
	t.Fatalf("paging [%s, %s) by %d did not end", from, to, limit)
	return nil
}

// Paging through a range reads each event of it once, in order, whatever
// the page size, across a month's partition boundary and two events at
// the same millisecond; from is included and to is not, to the
// millisecond.
func TestBetweenPagesThroughARangeOnce(t *testing.T) {
	s, ctx := store(t)
	all := history()
	for range 2 { // a replay is read once
		if err := s.Insert(ctx, all); err != nil {
			t.Fatal(err)
		}
	}
	end := all[len(all)-1].At.Add(time.Millisecond)
	for _, limit := range []int{1, 2, 3, 100} {
		audittest.Same(t, "every event", pages(t, s, t0, end, limit), all)
	}
	audittest.Same(t, "no upper bound", pages(t, s, t0, time.Time{}, 4), all)
	expiry := all[3] // the first event of the next month; the next one is at the same time
	audittest.Same(t, "to is excluded", pages(t, s, time.Time{}, expiry.At, 2), all[:3])
	audittest.Same(t, "from is included", pages(t, s, expiry.At, end, 2), all[3:])
	audittest.Same(t, "a millisecond later", pages(t, s, expiry.At.Add(time.Millisecond), end, 5), all[5:])
	audittest.Same(t, "of kinds", pages(t, s, t0, end, 1, audit.EpochAdvance, audit.ForceRelease),
		filter(all, func(e audit.Event) bool { return e.Kind == audit.EpochAdvance || e.Kind == audit.ForceRelease }))
	if _, err := s.Between(ctx, t0, end, audit.Cursor{}, 0); err == nil {
		t.Error("a limit of 0 was accepted")
	}
}

// A cursor and kinds made of quotes and backslashes are values, not SQL.
func TestBetweenQuotesCursorAndKinds(t *testing.T) {
	s, ctx := store(t)
	nasty := `x\' ) OR 1=1 -- ` + "\n'\\"
	evs := []audit.Event{
		{ClusterID: nasty, Revision: 1, Key: nasty, Kind: audit.Grant, At: t0},
		{ClusterID: nasty, Revision: 1, Key: nasty + "z", Kind: audit.Grant, At: t0},
	}
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatal(err)
	}
	got, err := s.Between(ctx, t0, time.Time{}, audit.CursorOf(evs[0]), 10)
	if err != nil {
		t.Fatal(err)
	}
	audittest.Same(t, "after a nasty cursor", got, evs[1:])
	if got, err := s.Between(ctx, t0, time.Time{}, audit.Cursor{}, 10, audit.Kind(`') OR 1=1 --`)); err != nil || len(got) != 0 {
		t.Errorf("a nasty kind = %d events, %v; want none", len(got), err)
	}
}
