package arbiter

import (
	"fmt"
	"testing"
	"time"
)

// The force-released holds an arbiter remembers are bounded: a record
// deleted (its lease ended) is forgotten, one older than a day is not
// reported, and past maxForced the oldest go first.
func TestForcedHoldsAreBounded(t *testing.T) {
	f := newForcedHolds()
	rec := func(id string, session int64, at time.Time) []byte {
		return []byte(forceRecord{Action: id, At: at, Holds: []forcedHold{{Key: "ns/" + id, Session: session, Revision: 5}}}.Encode())
	}
	now := time.Now()
	f.put("/sys/force/old", rec("old", 1, now.Add(-25*time.Hour)))
	f.put("/sys/force/a", rec("a", 1, now))
	if got := f.of(1); len(got) != 1 || got[0].GetKey() != "ns/a" {
		t.Fatalf("session 1 reports %v, want ns/a only (ns/old is past a day)", got)
	}
	f.delete("/sys/force/a")
	if got := f.of(1); len(got) != 0 {
		t.Fatalf("a deleted record is still reported: %v", got)
	}
	for i := range maxForced + 10 {
		f.put(fmt.Sprintf("/sys/force/%d", i), rec(fmt.Sprint(i), int64(i%7), now.Add(time.Duration(i)*time.Millisecond)))
	}
	if f.n != maxForced {
		t.Fatalf("remembers %d holds, cap %d", f.n, maxForced)
	}
	for s := range int64(7) {
		for _, e := range f.of(s) {
			if e.GetKey() == "ns/0" {
				t.Fatal("the oldest entry survived the cap")
			}
		}
	}
}
